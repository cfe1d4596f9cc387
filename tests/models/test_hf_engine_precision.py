"""The hf engine loads its model in the dtype and with the attention kernel the device backend decides."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.device.precision_backend import NO_FLOAT16, select_bf16_eager
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import EngineError, HFEngine


def test_auto_on_the_cpu_is_float32_with_sdpa(tiny_model: Path) -> None:
    engine = HFEngine(str(tiny_model), dtype="auto", torch_threads=1)
    assert {p.dtype for p in engine.model.parameters()} == {torch.float32}
    assert engine.model.config._attn_implementation == "sdpa"
    assert (engine.describe()["dtype"], engine.describe()["attn_implementation"]) == ("float32", "sdpa")


def test_the_backends_dtype_and_attention_are_used(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    select_bf16_eager(monkeypatch)
    engine = HFEngine(str(tiny_model), dtype="auto", torch_threads=1)
    assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
    assert engine.model.config._attn_implementation == "eager"
    assert engine.describe()["dtype"] == "bfloat16"
    (completions,) = engine.chat([[{"role": "user", "content": "Repeat the letter a."}]],
                                 SamplingParams(max_tokens=4))
    assert len(completions[0].response_tokens) >= 1 and completions[0].logprobs.dtype == torch.float32


def test_a_dtype_the_device_cannot_do_is_an_engine_error(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    select_bf16_eager(monkeypatch)
    with pytest.raises(EngineError, match=f"dtype float16 is not supported on the bf16eager backend: {NO_FLOAT16}"):
        HFEngine(str(tiny_model), dtype="float16")
