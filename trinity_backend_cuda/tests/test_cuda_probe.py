"""The CUDA probe: NVML errors, CUDA_VISIBLE_DEVICES and the torch build, each with an actionable reason."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
import torch

from trinity_backend_cuda import probe, torchbuild

Install = Callable[..., Any]


def test_real_pynvml_without_driver_library(no_driver_library: ModuleType) -> None:
    result = probe.probe()
    assert not result.available
    assert result.device_count == 0
    assert "libnvidia-ml.so.1" in result.reason
    assert "install the NVIDIA driver" in result.reason
    assert "TRINITY_DEVICE=cpu" in result.reason


def test_two_gpus_available_and_nvml_session_closed(cuda_doubles: Install) -> None:
    runtime = cuda_doubles(gpus=2)
    result = probe.probe()
    assert result.available and result.device_count == 2 and result.reason == ""
    assert runtime.nvml.refcount == 0, "the probe must shut NVML down"
    assert runtime.nvml.calls["nvmlInit"] == 1 and runtime.nvml.calls["nvmlShutdown"] == 1
    assert "nvmlDeviceGetUUID" not in runtime.nvml.calls, "UUIDs are read only when CUDA_VISIBLE_DEVICES has some"


def test_driver_not_loaded(cuda_doubles: Install, doubles: ModuleType) -> None:
    runtime = cuda_doubles(nvml_fail={"nvmlInit": doubles.NVML_ERROR_DRIVER_NOT_LOADED})
    result = probe.probe()
    assert not result.available
    assert "kernel module is not loaded" in result.reason and "modprobe nvidia" in result.reason
    assert runtime.nvml.refcount == 0
    assert "nvmlShutdown" not in runtime.nvml.calls, "no shutdown for a session that never opened"


@pytest.mark.parametrize(
    ("code_name", "expected"),
    [
        ("NVML_ERROR_LIBRARY_NOT_FOUND", "no NVIDIA driver found"),
        ("NVML_ERROR_LIB_RM_VERSION_MISMATCH", "reboot"),
        ("NVML_ERROR_NO_PERMISSION", "/dev/nvidia*"),
        ("NVML_ERROR_GPU_IS_LOST", "nvidia-smi -r"),
        ("NVML_ERROR_UNKNOWN", "NVML error 999: Unknown Error"),
    ],
)
def test_nvml_errors_become_reasons(cuda_doubles: Install, doubles: ModuleType, code_name: str, expected: str) -> None:
    cuda_doubles(nvml_fail={"nvmlInit": doubles.NVML_ERROR_CODES[code_name]})
    result = probe.probe()
    assert not result.available and result.device_count == 0
    assert expected in result.reason


def test_error_after_init_still_closes_the_session(cuda_doubles: Install, doubles: ModuleType) -> None:
    runtime = cuda_doubles(nvml_fail={"nvmlDeviceGetCount": doubles.NVML_ERROR_GPU_IS_LOST})
    result = probe.probe()
    assert not result.available and "fallen off the bus" in result.reason
    assert runtime.nvml.refcount == 0 and runtime.nvml.calls["nvmlShutdown"] == 1


def test_driver_without_gpus(cuda_doubles: Install) -> None:
    cuda_doubles(gpus=0)
    result = probe.probe()
    assert not result.available and "reports no GPU" in result.reason


def test_missing_pynvml(cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda_doubles()
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    result = probe.probe()
    assert not result.available and "pip install nvidia-ml-py" in result.reason


@pytest.mark.parametrize(("mask", "count"), [("1", 1), ("0,3", 2), ("3,0,2", 3), ("0,9,1", 1)])
def test_visible_devices_subset(cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch, mask: str, count: int) -> None:
    cuda_doubles(gpus=4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", mask)
    result = probe.probe()
    assert result.available and result.device_count == count


def test_visible_devices_empty(cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda_doubles(gpus=4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    result = probe.probe()
    assert not result.available and result.device_count == 0
    assert "CUDA_VISIBLE_DEVICES is set to an empty string" in result.reason


def test_visible_devices_minus_one(cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda_doubles(gpus=2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    result = probe.probe()
    assert not result.available and "'-1' is negative" in result.reason


def test_visible_devices_by_uuid(cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = cuda_doubles(gpus=4)
    uuids = [gpu.uuid for gpu in runtime.nvml.gpus]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{uuids[2]},{uuids[0][:12]}")
    result = probe.probe()
    assert result.available and result.device_count == 2
    assert runtime.nvml.calls["nvmlDeviceGetUUID"] == 4
    assert runtime.nvml.refcount == 0


def test_visible_devices_unknown_uuid(cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda_doubles(gpus=2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-deadbeef")
    result = probe.probe()
    assert not result.available and "matches the UUID of no GPU" in result.reason


def test_cpu_only_torch(cuda_doubles: Install) -> None:
    cuda_doubles(gpus=2, torch_build=torchbuild.TorchBuild(version="2.13.0+cpu"))
    result = probe.probe()
    assert not result.available
    assert result.reason.startswith("torch 2.13.0+cpu is a CPU-only build; install a CUDA build of torch")


def test_rocm_torch(cuda_doubles: Install) -> None:
    cuda_doubles(gpus=2, torch_build=torchbuild.TorchBuild(version="2.8.0+rocm6.4", hip="6.4.4"))
    result = probe.probe()
    assert not result.available and "ROCm (HIP 6.4.4) build, not a CUDA build" in result.reason


def test_torch_not_installed(cuda_doubles: Install) -> None:
    cuda_doubles(gpus=2, torch_build=None)
    result = probe.probe()
    assert not result.available and result.reason.startswith("torch is not installed")


def test_unexpected_failure_is_an_answer(cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda_doubles()

    def broken() -> torchbuild.TorchBuild:
        raise PermissionError("version.py")

    monkeypatch.setattr(torchbuild, "read_torch_build", broken)
    result = probe.probe()
    assert not result.available and "PermissionError" in result.reason


# --- reading torch/version.py without importing torch ------------------------------------------


def test_reads_the_installed_torch_build() -> None:
    build = torchbuild.read_torch_build()
    assert build is not None
    assert build.version == torch.__version__
    assert build.cuda == torch.version.cuda
    assert build.path is not None and (build.path / "__init__.py").is_file()
    assert (build.problem() == "") == (torch.version.cuda is not None)


@pytest.mark.parametrize(
    ("text", "version", "cuda", "hip"),
    [
        ("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\nhip: Optional[str] = None\n", "2.13.0+cpu",
         None, None),
        ("__version__ = '2.8.0+cu128'\ndebug = False\ncuda: Optional[str] = '12.8'\n", "2.8.0+cu128", "12.8", None),
        ("__version__ = '2.4.1'\ncuda = '12.1'\nhip = None\n", "2.4.1", "12.1", None),
        ("__version__ = '2.8.0+rocm6.4'\ncuda = None\nhip = '6.4.4'\n", "2.8.0+rocm6.4", None, "6.4.4"),
    ],
)
def test_parse_version_file(text: str, version: str, cuda: str | None, hip: str | None) -> None:
    facts = torchbuild.parse_version_file("from typing import Optional\n" + text)
    assert facts["__version__"] == version
    assert facts.get("cuda") == cuda
    assert facts.get("hip") == hip


def test_cuda_major() -> None:
    assert torchbuild.TorchBuild("2.8.0+cu128", cuda="12.8").cuda_major == 12
    assert torchbuild.TorchBuild("2.10.0+cu130", cuda="13.0").cuda_major == 13
    assert torchbuild.TorchBuild("2.13.0+cpu").cuda_major is None
