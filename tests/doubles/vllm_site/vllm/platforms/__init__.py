"""``vllm.platforms.current_platform``: the double stands for vLLM on an accelerator, never its CPU build."""


class _Platform:
    """The part of vLLM's ``Platform`` interface the engine asks."""

    def is_cpu(self) -> bool:
        """vLLM's CPU build answers True; the double models vLLM on a GPU (see the README)."""
        return False


current_platform = _Platform()
