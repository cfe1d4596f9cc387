"""The hf rollout engine generates a batch on the device: tokens/s, model device, finite log-probs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from gpu_support import EXPECTED_DEVICE, PROMPTS, completion_stats, synchronize


def test_hf_engine(selected_backend: str, tiny_model: Path, detail: Callable[[str], None]) -> None:
    """HFEngine generates 16 prompts x 64 new tokens on the device: tokens/s, model device, finite log-probs."""
    from trinity.common.models.engine import SamplingParams
    from trinity.common.models.hf_engine import HFEngine

    started = time.monotonic()
    engine = HFEngine(str(tiny_model), max_batch_size=32, batch_wait_ms=0)
    load_s = time.monotonic() - started
    try:
        device = str(next(engine.model.parameters()).device)
        engine.generate(PROMPTS[:2], SamplingParams(max_tokens=8))  # warm-up: kernels, allocator
        synchronize()
        started = time.monotonic()
        results = engine.generate(PROMPTS[:16], SamplingParams(temperature=1.0, max_tokens=64, n=1))
        synchronize()
        elapsed = time.monotonic() - started
        checksum = engine.state_dict_checksum()
    finally:
        engine.shutdown()
    tokens, finite = completion_stats(results)
    text = (f"16 prompts x 64 new tokens max: {tokens} tokens in {elapsed:.2f} s = {tokens / elapsed:.0f} tokens/s, "
            f"model on {device}, log-probs finite: {'yes' if finite else 'NO'}, load {load_s:.1f} s, "
            f"checksum {checksum[:12]}")
    detail(text)
    expected = "cpu" if EXPECTED_DEVICE == "cpu" else f"{EXPECTED_DEVICE}:0"
    assert device == expected, f"model on {device}, expected {expected} | {text}"
    assert finite, f"some log-probs are not finite (or > 0, or not one per token) | {text}"
    assert len(results) == 16 and tokens > 0, f"{len(results)} results with {tokens} tokens for 16 prompts | {text}"
