"""The CUDA probe: NVML errors, CUDA_VISIBLE_DEVICES and the torch build, each with an actionable reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from trinity_backend_cuda import driver, probe, torchbuild

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


# --- no driver at all: answered from files, without pynvml -------------------------------------

_NO_DRIVER_PROBE = """
import json, sys
from pathlib import Path
from trinity_backend_cuda import driver, plugin
empty = Path(sys.argv[1])
driver.DEVICE_DIR, driver.LD_SO_CACHE, driver.LIBRARY_DIRS = empty, empty / "ld.so.cache", (empty,)
result = plugin.trinity_probe()
print(json.dumps([result.available, result.reason, "pynvml" in sys.modules]))
"""


def test_no_device_files_and_no_library_answers_without_pynvml(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    done = subprocess.run(
        [sys.executable, "-c", _NO_DRIVER_PROBE, str(tmp_path)], capture_output=True, text=True, env=env,
        timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr
    available, reason, imported_pynvml = json.loads(done.stdout.strip().splitlines()[-1])
    assert not available
    assert imported_pynvml is False, "with no driver on the machine the probe must not import pynvml"
    assert "no /dev/nvidia* device files and no libnvidia-ml.so.1" in reason
    assert "install the NVIDIA driver" in reason and "TRINITY_DEVICE=cpu" in reason


@pytest.fixture
def no_driver_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No device files, no loader cache, no library folders, no LD_LIBRARY_PATH: nothing of a driver."""
    empty = tmp_path / "nothing"
    empty.mkdir()
    monkeypatch.setattr(driver, "DEVICE_DIR", empty)
    monkeypatch.setattr(driver, "LD_SO_CACHE", empty / "ld.so.cache")
    monkeypatch.setattr(driver, "LIBRARY_DIRS", (empty,))
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    return empty


def test_nvml_double_untouched_without_a_driver(cuda_doubles: Install, no_driver_files: Path) -> None:
    runtime = cuda_doubles(gpus=2, device_dir=None)
    result = probe.probe()
    assert not result.available and "no /dev/nvidia* device files" in result.reason
    assert runtime.nvml.calls == {}, "NVML must not be asked when no driver is installed"


def test_device_files_alone_send_the_probe_to_nvml(cuda_doubles: Install, no_driver_files: Path) -> None:
    runtime = cuda_doubles(gpus=2, device_dir=no_driver_files / "dev")
    result = probe.probe()
    assert result.available and result.device_count == 2
    assert runtime.nvml.calls["nvmlInit"] == 1


@pytest.mark.parametrize("where", ["LD_LIBRARY_PATH", "ld.so.cache", "wsl"])
def test_library_alone_sends_the_probe_to_nvml(
    cuda_doubles: Install, no_driver_files: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    runtime = cuda_doubles(gpus=1, device_dir=None)
    libs = no_driver_files / "lib"
    libs.mkdir()
    if where == "LD_LIBRARY_PATH":
        (libs / driver.NVML_LIBRARY).touch()
        monkeypatch.setenv("LD_LIBRARY_PATH", f"/nonexistent{os.pathsep}{libs}")
    elif where == "ld.so.cache":
        cache = no_driver_files / "ld.so.cache"
        cache.write_bytes(b"glibc-ld.so.cache1.1\0libc.so.6\0libnvidia-ml.so.1\0/usr/lib/libnvidia-ml.so.1\0")
        monkeypatch.setattr(driver, "LD_SO_CACHE", cache)
    else:  # WSL 2 has no /dev/nvidia*: the Windows driver's libraries are in /usr/lib/wsl/lib
        (libs / driver.NVML_LIBRARY).touch()
        monkeypatch.setattr(driver, "LIBRARY_DIRS", (libs,))
    result = probe.probe()
    assert result.available and result.device_count == 1
    assert runtime.nvml.calls["nvmlInit"] == 1
