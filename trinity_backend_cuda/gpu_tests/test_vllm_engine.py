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


def test_vllm_engine_images(selected_backend: str, workdir: Path, detail: Callable[[str], None]) -> None:
    """VLLMEngine on the tiny vision-language model: an image prompt expanded by vLLM as by the image processor,
    and log-probs the transformers model recomputes at its 3-D rotary positions."""
    vllm = pytest.importorskip("vllm", reason="vllm not installed")
    import numpy as np
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText

    from trinity.common.models.engine import SamplingParams
    from trinity.common.models.tiny_vlm import build_tiny_vlm
    from trinity.common.models.vllm_engine import VLLMEngine

    model_path = build_tiny_vlm(workdir / "tiny-vlm")
    image = Image.fromarray(np.random.RandomState(0).randint(0, 256, (56, 84, 3), dtype=np.uint8))
    messages = [{"role": "user", "content": [{"type": "image", "image": image},
                                             {"type": "text", "text": "What is 2 plus 2?"}]}]
    engine = VLLMEngine(model_path=str(model_path), dtype="float32", max_prompt_tokens=64, memory_utilization=0.3)
    try:
        [[completion]] = engine.chat([messages], SamplingParams(max_tokens=8, temperature=1.0, seed=1))
        expected_prompt, _ = engine.vision.encode(messages)
        special = engine.vision.special_ids
    finally:
        engine.shutdown()
    images = completion.multi_modal_inputs
    assert images is not None and completion.prompt_tokens.tolist() == expected_prompt
    model = AutoModelForImageTextToText.from_pretrained(model_path, dtype=torch.float32).eval()
    tokens = torch.cat([completion.prompt_tokens, completion.response_tokens]).unsqueeze(0)
    types = (tokens == model.config.image_token_id).int()
    with torch.no_grad():
        logits = model(input_ids=tokens, mm_token_type_ids=types, **images).logits[0].float()
    logits[:, special] -= 100.0
    start = len(completion.prompt_tokens)
    recomputed = torch.log_softmax(logits[start - 1 : -1], dim=-1).gather(
        -1, completion.response_tokens.unsqueeze(-1)).squeeze(-1)
    worst = float((recomputed - completion.logprobs).abs().max())
    text = (f"vllm {getattr(vllm, '__version__', '?')}: image prompt of {start} tokens expanded as the image "
            f"processor does; {len(completion.response_tokens)} tokens, max |log-prob - transformers| {worst:.2e}")
    detail(text)
    assert worst < 5e-2, text
