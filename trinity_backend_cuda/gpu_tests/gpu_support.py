"""Constants and small helpers the GPU tests share (a module of its own: test modules import it by name)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

#: The device type the tests must find selected: ``cuda``, or ``cpu`` for the driver's ``--allow-cpu`` smoke run.
EXPECTED_DEVICE = os.environ.get("GPU_CHECK_DEVICE", "cuda")
#: The tiny model every model test uses: head_dim 64, which every attention kernel (vLLM's included) supports.
TINY_SPEC = {"hidden_size": 256, "num_layers": 2, "num_heads": 4, "intermediate_size": 512, "vocab_size": 400}
#: Sixteen short prompts in the tiny tokenizer's vocabulary.
PROMPTS = [f"What is {3 + 6 * i} plus {90 - 5 * i}? The answer is" for i in range(16)]


def synchronize() -> None:
    """Wait for queued device work (timings must include it)."""
    import trinity.device

    trinity.device.synchronize()


def completion_stats(results: Sequence[Sequence[Any]]) -> tuple[int, bool]:
    """Return (generated tokens, whether every log-prob is finite, <= 0 and one per token) over ``results``."""
    import torch

    tokens = 0
    finite = True
    for completions in results:
        for completion in completions:
            tokens += len(completion.response_tokens)
            logprobs = torch.as_tensor(completion.logprobs, dtype=torch.float32)
            if len(logprobs) != len(completion.response_tokens):
                finite = False
            if logprobs.numel() and not (bool(torch.isfinite(logprobs).all()) and float(logprobs.max()) <= 1e-4):
                finite = False
    return tokens, finite


def trinity_command() -> list[str]:
    """Return the ``trinity`` console script beside this Python when installed, else ``python -m trinity.cli.main``."""
    import sys
    from pathlib import Path

    script = Path(sys.executable).with_name("trinity")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "trinity.cli.main"]
