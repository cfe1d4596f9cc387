"""What ``AsyncLLM.generate`` yields."""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm.logprobs import Logprob


@dataclass
class CompletionOutput:
    """One of the ``n`` completions of a request."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None

    def finished(self) -> bool:
        """Whether this completion has finished."""
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    """The state of a request: its prompt and its completions."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: None
    outputs: list[CompletionOutput] = field(default_factory=list)
    finished: bool = False
