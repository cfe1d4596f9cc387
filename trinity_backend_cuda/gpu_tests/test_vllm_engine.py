"""The vllm rollout engine generates a batch on the GPU (skipped where vLLM is not installed)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from gpu_support import PROMPTS, completion_stats


def test_vllm_engine(selected_backend: str, tiny_model: Path, detail: Callable[[str], None]) -> None:
    """VLLMEngine starts on the tiny model and generates 16 prompts: tokens/s, finite log-probs, checksum."""
    vllm = pytest.importorskip("vllm", reason="vllm not installed")
    from trinity.common.models.engine import SamplingParams
    from trinity.common.models.vllm_engine import VLLMEngine

    started = time.monotonic()
    engine = VLLMEngine(model_path=str(tiny_model), tensor_parallel_size=1, memory_utilization=0.3)
    load_s = time.monotonic() - started
    try:
        engine.generate(PROMPTS[:2], SamplingParams(max_tokens=8))
        started = time.monotonic()
        results = engine.generate(PROMPTS[:16], SamplingParams(temperature=1.0, max_tokens=64))
        elapsed = time.monotonic() - started
        try:
            checksum = str(engine.state_dict_checksum())[:12]
        except Exception as exc:  # noqa: BLE001 - reported, not fatal: generation is what this test proves
            checksum = f"n/a ({type(exc).__name__}: {exc})"[:120]
    finally:
        engine.shutdown()
    tokens, finite = completion_stats(results)
    text = (f"vllm {getattr(vllm, '__version__', '?')}: 16 prompts, {tokens} tokens in {elapsed:.2f} s = "
            f"{tokens / max(elapsed, 1e-9):.0f} tokens/s, log-probs finite: {'yes' if finite else 'NO'}, "
            f"start {load_s:.1f} s, checksum {checksum}")
    detail(text)
    assert len(results) == 16 and tokens > 0 and finite, text
