"""The vllm engine (against the vLLM double) hands vLLM the dtype the device backend decides."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.device.precision_backend import NO_FLOAT16, select_bf16_eager
from tests.doubles.vllm_path import vllm_double


@pytest.fixture(scope="module")
def double() -> Iterator[Path]:
    with vllm_double() as site:
        yield site


def test_auto_is_the_backends_preferred_dtype_not_vllms(double: Path, tiny_model: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from trinity.common.models.vllm_engine import VLLMEngine

    select_bf16_eager(monkeypatch)
    engine = VLLMEngine(str(tiny_model), dtype="auto", max_prompt_tokens=32)
    try:
        assert engine.dtype == "bfloat16" and engine.describe()["dtype"] == "bfloat16"
    finally:
        engine.shutdown()


def test_a_dtype_the_device_cannot_do_is_refused_before_vllm_starts(double: Path, tiny_model: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from trinity.common.models.vllm_engine import VLLMEngine, VLLMEngineError

    select_bf16_eager(monkeypatch)
    with pytest.raises(VLLMEngineError, match=f"dtype float16 is not supported on the bf16eager backend: {NO_FLOAT16}"):
        VLLMEngine(str(tiny_model), dtype="float16")
