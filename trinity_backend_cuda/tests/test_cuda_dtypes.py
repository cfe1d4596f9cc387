"""The CUDA backend's dtypes and attention kernel, answered from NVML doubles and a stand-in flash_attn package."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import trinity.device
from trinity.device.errors import UnsupportedDtypeError
from trinity.device.loader import load_plugin
from trinity_backend_cuda import plugin

Install = Callable[..., Any]


def _backend() -> Any:
    return load_plugin(plugin, expected_name="cuda")


@pytest.fixture
def flash_attn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An installed flash_attn distribution (an empty package with its metadata: never imported here)."""
    (tmp_path / "flash_attn").mkdir()
    (tmp_path / "flash_attn" / "__init__.py").write_text("raise ImportError('flash_attn must not be imported')\n")
    info = tmp_path / "flash_attn-2.8.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flash_attn\nVersion: 2.8.3\n")
    monkeypatch.syspath_prepend(str(tmp_path))


def test_ampere_and_newer_prefer_bfloat16(cuda_doubles: Install) -> None:
    cuda_doubles(gpus=2)
    backend = _backend()
    support = backend.supported_dtypes()
    assert support.supported == ("bfloat16", "float32", "float16") and not support.note
    assert backend.resolve_dtype("auto") == "bfloat16"
    assert backend.resolve_dtype("float16") == "float16"


def test_volta_refuses_bfloat16_with_the_capability(cuda_doubles: Install, doubles: ModuleType) -> None:
    cuda_doubles(gpus=doubles.make_gpus(2, "Tesla V100-SXM2-32GB", (7, 0)))
    backend = _backend()
    assert backend.resolve_dtype("auto") == "float32"
    with pytest.raises(UnsupportedDtypeError) as caught:
        backend.resolve_dtype("bfloat16")
    message = str(caught.value)
    assert "Tesla V100-SXM2-32GB has compute capability 7.0" in message and "8.0 (Ampere)" in message
    assert "use one of float32, float16" in message


def test_a_mixed_node_answers_for_its_oldest_gpu(cuda_doubles: Install, doubles: ModuleType) -> None:
    gpus = doubles.make_gpus(1, "NVIDIA A100", (8, 0)) + doubles.make_gpus(1, "Tesla T4", (7, 5))
    cuda_doubles(gpus=gpus)
    support = _backend().supported_dtypes()
    assert "bfloat16" not in support.supported
    assert support.reason("bfloat16").startswith("Tesla T4 has compute capability 7.5")


def test_without_a_driver_the_ampere_answer_comes_with_a_note(cuda_doubles: Install, doubles: ModuleType) -> None:
    cuda_doubles(gpus=2, nvml_fail={"nvmlInit": doubles.NVML_ERROR_LIBRARY_NOT_FOUND})
    support = _backend().supported_dtypes()
    assert support.preferred == "bfloat16"
    assert "compute capability not read" in support.note and "libnvidia-ml.so.1" in support.note


def test_the_answer_opens_and_closes_one_nvml_session(cuda_doubles: Install) -> None:
    installed = cuda_doubles(gpus=2)
    _backend().supported_dtypes()
    assert installed.nvml.refcount == 0
    assert installed.nvml.calls["nvmlDeviceGetCudaComputeCapability"] == 2


def test_sdpa_without_flash_attn(cuda_doubles: Install) -> None:
    cuda_doubles(gpus=1)
    choice = _backend().attention_implementation("bfloat16")
    assert choice.implementation == "sdpa" and "pip install flash-attn" in choice.reason


@pytest.mark.usefixtures("flash_attn")
def test_flash_attention_2_when_installed_in_half_precision(cuda_doubles: Install) -> None:
    cuda_doubles(gpus=1)
    backend = _backend()
    choice = backend.attention_implementation("bfloat16")
    assert (choice.implementation, choice.reason) == ("flash_attention_2", "flash_attn 2.8.3 installed")
    assert backend.attention_implementation("float16").implementation == "flash_attention_2"
    full = backend.attention_implementation("float32")
    assert full.implementation == "sdpa" and "not float32" in full.reason
    assert "flash_attn" not in sys.modules


@pytest.mark.usefixtures("flash_attn")
def test_no_flash_attention_2_before_ampere(cuda_doubles: Install, doubles: ModuleType) -> None:
    cuda_doubles(gpus=doubles.make_gpus(1, "Tesla T4", (7, 5)))
    choice = _backend().attention_implementation("float16")
    assert choice.implementation == "sdpa" and "Tesla T4 has compute capability 7.5" in choice.reason


def test_the_facade_answers_for_the_selected_cuda_backend(cuda_doubles: Install, doubles: ModuleType,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    cuda_doubles(gpus=doubles.make_gpus(2, "Tesla V100-SXM2-32GB", (7, 0)))
    monkeypatch.setenv("TRINITY_DEVICE", "cuda")
    trinity.device.select_backend()
    assert trinity.device.resolve_dtype("auto") == "float32"
    assert trinity.device.attention_implementation("float32").implementation == "sdpa"
