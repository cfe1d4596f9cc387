"""The CUDA doctor: every check reports ok/warn/fail with a fix, and none raises."""

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

from trinity.device.loader import load_plugin
from trinity.device.types import DoctorCheck
from trinity_backend_cuda import doctor, nccl, plugin, torchbuild

Install = Callable[..., Any]


def by_name(checks: list[DoctorCheck]) -> dict[str, DoctorCheck]:
    """Index checks by name (names are unique)."""
    named = {check.name: check for check in checks}
    assert len(named) == len(checks), [c.name for c in checks]
    return named


def fake_triton(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    """Make ``find_spec("triton")`` find a package (never imported by the code under test)."""
    package = root / "triton_site" / "triton"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('the test double of triton must not be imported')\n")
    monkeypatch.syspath_prepend(str(package.parent))


def fake_vllm(monkeypatch: pytest.MonkeyPatch, root: Path, version: str) -> None:
    """Install a ``vllm`` distribution (package + dist-info) that the doctor finds but must never import."""
    site = root / "vllm_site"
    package = site / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('the doctor must not import vllm')\n")
    info = site / f"vllm-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    (info / "RECORD").write_text(f"vllm/__init__.py,,\n{info.name}/METADATA,,\n")
    monkeypatch.syspath_prepend(str(site))


def fake_nccl_distribution(monkeypatch: pytest.MonkeyPatch, root: Path, name: str, version: str) -> Path:
    """Install a dist-info for ``name`` (e.g. nvidia-nccl-cu12) shipping ``nvidia/nccl/lib/libnccl.so.2``."""
    site = root / f"site_{name}"
    library = site / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"")
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"nvidia/nccl/lib/libnccl.so.2,,\n{info.name}/METADATA,,\n")
    monkeypatch.syspath_prepend(str(site))
    return library


@pytest.fixture
def no_system_nccl(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only NCCL the test provides is found: no system directories, no LD_LIBRARY_PATH, no real distribution."""
    monkeypatch.setattr(nccl, "SYSTEM_LIB_DIRS", ())
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)


def torch_dir_with_nccl(root: Path, version: str = "2.26.2") -> Path:
    """A torch package directory whose lib/ holds libnccl.so.<version>."""
    lib = root / "torch" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnccl.so.2").write_bytes(b"")
    (lib / f"libnccl.so.{version}").write_bytes(b"")
    return root / "torch"


def test_healthy_machine(
    cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_system_nccl: None
) -> None:
    build = torchbuild.TorchBuild("2.8.0+cu128", cuda="12.8", path=torch_dir_with_nccl(tmp_path))
    cuda_doubles(gpus=2, torch_build=build, driver_version="570.124.06", cuda_driver_version=12080)
    monkeypatch.setattr(nccl, "NCCL_DISTRIBUTIONS", ())
    fake_triton(monkeypatch, tmp_path)
    fake_vllm(monkeypatch, tmp_path, "0.11.2")
    checks = by_name(doctor.run_checks())
    assert {name: c.status for name, c in checks.items()} == {
        "NVIDIA driver": "ok",
        "CUDA_VISIBLE_DEVICES": "ok",
        "torch CUDA build": "ok",
        "CUDA driver compatibility": "ok",
        "NCCL": "ok",
        "triton (torch.compile)": "ok",
        "vllm": "ok",
    }
    assert checks["vllm"].facts == {"vllm": "0.11.2"}
    driver = checks["NVIDIA driver"]
    assert "570.124.06" in driver.detail and "CUDA up to 12.8" in driver.detail and "2 GPU(s)" in driver.detail
    assert driver.facts["driver_version"] == "570.124.06" and driver.facts["gpu_count"] == "2"
    assert "NVIDIA H200" in driver.detail
    assert checks["torch CUDA build"].facts["torch_cuda"] == "12.8"
    assert checks["NCCL"].facts == {
        "nccl": "2.26.2", "source": "torch/lib", "path": str(tmp_path / "torch" / "lib" / "libnccl.so.2.26.2")
    }
    assert all(c.fix == "" for c in checks.values())


def test_driver_not_loaded(cuda_doubles: Install, doubles: ModuleType) -> None:
    cuda_doubles(nvml_fail={"nvmlInit": doubles.NVML_ERROR_DRIVER_NOT_LOADED})
    checks = by_name(doctor.run_checks())
    driver = checks["NVIDIA driver"]
    assert driver.status == "fail"
    assert "kernel module is not loaded" in driver.detail and "modprobe nvidia" in driver.fix
    assert driver.facts == {"nvml_error": "9"}
    assert "CUDA_VISIBLE_DEVICES" not in checks and "CUDA driver compatibility" not in checks


def test_real_machine_without_driver_never_raises(no_driver_library: ModuleType) -> None:
    checks = by_name(doctor.run_checks())
    assert checks["NVIDIA driver"].status == "fail"
    assert "libnvidia-ml.so.1" in checks["NVIDIA driver"].detail
    for check in checks.values():
        assert check.status in ("ok", "warn", "fail")
        if check.status != "ok":
            assert check.fix, check


def test_cpu_only_torch(cuda_doubles: Install) -> None:
    cuda_doubles(torch_build=torchbuild.TorchBuild("2.13.0+cpu"))
    checks = by_name(doctor.run_checks())
    torch_check = checks["torch CUDA build"]
    assert torch_check.status == "fail"
    assert torch_check.detail == "torch 2.13.0+cpu is a CPU-only build"
    assert "install a CUDA build of torch" in torch_check.fix
    assert "CUDA driver compatibility" not in checks


def test_torch_missing(cuda_doubles: Install) -> None:
    cuda_doubles(torch_build=None)
    check = by_name(doctor.run_checks())["torch CUDA build"]
    assert check.status == "fail" and check.detail == "torch is not installed" and check.fix


def test_nccl_missing(
    cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_system_nccl: None
) -> None:
    (tmp_path / "torch" / "lib").mkdir(parents=True)
    cuda_doubles(torch_build=torchbuild.TorchBuild("2.8.0+cu128", cuda="12.8", path=tmp_path / "torch"))
    monkeypatch.setattr(nccl, "NCCL_DISTRIBUTIONS", ("nvidia-nccl-cu12-not-installed-double",))
    check = by_name(doctor.run_checks())["NCCL"]
    assert check.status == "fail"
    assert "no NCCL library found" in check.detail
    assert check.fix.startswith("pip install nvidia-nccl-cu12")


def test_nccl_from_pip_distribution(
    cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_system_nccl: None
) -> None:
    library = fake_nccl_distribution(monkeypatch, tmp_path, "nvidia-nccl-cu12", "2.27.3")
    cuda_doubles(torch_build=torchbuild.TorchBuild("2.8.0+cu128", cuda="12.8", path=tmp_path / "no-torch"))
    check = by_name(doctor.run_checks())["NCCL"]
    assert check.status == "ok"
    assert check.facts["source"] == "nvidia-nccl-cu12" and check.facts["nccl"] == "2.27.3"
    assert Path(check.facts["path"]).resolve() == library.resolve()


def test_nccl_for_another_cuda_major_warns(
    cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_system_nccl: None
) -> None:
    fake_nccl_distribution(monkeypatch, tmp_path, "nvidia-nccl-cu12", "2.27.3")
    cuda_doubles(torch_build=torchbuild.TorchBuild("2.10.0+cu130", cuda="13.0"))
    check = by_name(doctor.run_checks())["NCCL"]
    assert check.status == "warn" and "torch is built with CUDA 13" in check.detail
    assert check.fix == "pip install nvidia-nccl-cu13"


def test_nccl_from_ld_library_path(
    cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_system_nccl: None
) -> None:
    (tmp_path / "libnccl.so.2.21.5").write_bytes(b"")
    monkeypatch.setenv("LD_LIBRARY_PATH", f"/nonexistent{os.pathsep}{tmp_path}")
    monkeypatch.setattr(nccl, "NCCL_DISTRIBUTIONS", ())
    cuda_doubles()
    check = by_name(doctor.run_checks())["NCCL"]
    assert check.status == "ok" and check.facts["source"] == "system" and check.facts["nccl"] == "2.21.5"


@pytest.mark.parametrize(
    ("driver_cuda", "torch_cuda", "status"),
    [
        (12080, "12.8", "ok"),
        (12090, "12.8", "ok"),
        (13000, "12.8", "ok"),
        (12040, "12.8", "warn"),
        (11080, "12.1", "fail"),
    ],
)
def test_driver_compatibility(cuda_doubles: Install, driver_cuda: int, torch_cuda: str, status: str) -> None:
    build = torchbuild.TorchBuild(f"2.x+cu{torch_cuda}", cuda=torch_cuda)
    cuda_doubles(cuda_driver_version=driver_cuda, torch_build=build)
    check = by_name(doctor.run_checks())["CUDA driver compatibility"]
    assert check.status == status
    if status != "ok":
        assert "upgrade the NVIDIA driver" in check.fix


def test_visible_devices_checks(cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda_doubles(gpus=2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,5,0")
    cut = by_name(doctor.run_checks())["CUDA_VISIBLE_DEVICES"]
    assert cut.status == "warn" and cut.facts["visible"] == "1" and "'5' is out of range" in cut.detail
    assert cut.fix
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    empty = by_name(doctor.run_checks())["CUDA_VISIBLE_DEVICES"]
    assert empty.status == "fail" and "empty string" in empty.detail and empty.fix
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    fine = by_name(doctor.run_checks())["CUDA_VISIBLE_DEVICES"]
    assert fine.status == "ok" and "1 of 2 GPU(s)" in fine.detail


def test_triton_missing_warns(cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda_doubles()
    monkeypatch.setattr("importlib.util.find_spec", _find_spec_without("triton"))
    check = by_name(doctor.run_checks())["triton (torch.compile)"]
    assert check.status == "warn" and "triton is not installed" in check.detail
    assert "pip install triton" in check.fix


def test_vllm_missing_warns_with_the_extra_to_install(cuda_doubles: Install) -> None:
    cuda_doubles()
    check = by_name(doctor.run_checks())["vllm"]  # vLLM cannot be installed on this CPU-only machine
    assert check.status == "warn" and "the hf engine can" in check.detail
    assert "trinity-rft[vllm]" in check.fix


def _find_spec_without(hidden: str) -> Callable[..., Any]:
    import importlib.util

    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> Any:
        return None if name == hidden else real(name, package)

    return find_spec


def test_a_raising_check_becomes_a_fail(cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda_doubles()

    def broken(*args: object) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(nccl, "find_nccl", broken)
    checks = by_name(doctor.run_checks())
    assert checks["NCCL"].status == "fail"
    assert "OSError: disk on fire" in checks["NCCL"].detail and checks["NCCL"].fix
    assert checks["NVIDIA driver"].status == "ok", "the other checks still run"


def test_backend_doctor_adds_core_checks(cuda_doubles: Install) -> None:
    cuda_doubles()
    checks = by_name(load_plugin(plugin, expected_name="cuda").doctor())
    assert "torch" in checks, "the core's torch check comes with the backend's"
    assert checks["NVIDIA driver"].status == "ok"


def test_doctor_imports_no_torch_or_triton() -> None:
    code = (
        "import json, sys\n"
        "from trinity_backend_cuda import plugin\n"
        "checks = plugin.trinity_doctor()\n"
        "print(json.dumps([len(checks), sorted(m for m in ('torch', 'triton') if m in sys.modules)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    count, imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert count >= 4 and imported == []
