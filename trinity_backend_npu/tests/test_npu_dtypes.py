"""The npu backend's model dtypes and attention kernel, through the façade on the fake Ascend host."""

from __future__ import annotations

import sys
from typing import Any

import pytest

import trinity.device
from trinity.device.loader import load_plugin
from trinity_backend_npu import plugin


def test_bfloat16_first_and_no_flash_attention() -> None:
    backend = load_plugin(plugin, expected_name="npu")
    assert backend.supported_dtypes().supported == ("bfloat16", "float16", "float32")
    assert backend.resolve_dtype("auto") == "bfloat16"
    for dtype in ("bfloat16", "float16", "float32"):
        choice = backend.attention_implementation(dtype)
        assert choice.implementation == "sdpa" and "flash_attn is CUDA-only" in choice.reason


def test_the_answers_need_no_torch_npu(npu_machine: Any) -> None:
    backend = load_plugin(plugin, expected_name="npu")
    backend.attention_implementation(backend.resolve_dtype("auto"))
    assert "torch_npu" not in sys.modules


def test_selected_npu_resolves_auto_to_bfloat16(npu_runtime: Any, fresh_facade: None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRINITY_DEVICE", "npu")
    assert trinity.device.resolve_dtype("auto") == "bfloat16"
    assert trinity.device.attention_implementation("bfloat16").implementation == "sdpa"
