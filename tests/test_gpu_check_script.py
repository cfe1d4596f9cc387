"""``scripts/gpu_check.sh`` / ``scripts/gpu_check.py`` on this CPU-only machine: syntax, dry run, the no-CUDA exit.

The checks themselves need a GPU; what can be shown here is that the script
lists them without importing torch, that it stops with status 2 and one line
when there is no CUDA device (before installing anything), and that its
fallbacks (entry points without an install, the NVML stand-in) behave.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
SHELL = REPO / "scripts" / "gpu_check.sh"
SCRIPT = REPO / "scripts" / "gpu_check.py"
CHECK_NAMES = ("backends", "conformance", "fsdp-trainer", "hf-engine", "weight-sync", "vllm-engine")


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


needs_no_cuda = pytest.mark.skipif(_has_cuda(), reason="this machine has a CUDA device: the script would run")


def _gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRINITY_DEVICE", "TRINITY_DEVICE_RESOLVED")}
    env["OUT"] = str(tmp_path / "out")
    env.update(extra)
    return env


def _poisoned_torch(tmp_path: Path, body: str) -> str:
    """Return a PYTHONPATH whose ``torch`` runs ``body`` on import."""
    site = tmp_path / "poison"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(body, encoding="utf-8")
    return os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))


def test_shell_script_parses_and_is_executable() -> None:
    done = subprocess.run(["bash", "-n", str(SHELL)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert os.access(SHELL, os.X_OK)
    assert "set -uo pipefail" in SHELL.read_text()


def test_dry_run_lists_the_six_checks_without_importing_torch(tmp_path: Path) -> None:
    pythonpath = _poisoned_torch(tmp_path, "raise SystemExit('gpu_check imported torch in a dry run')\n")
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run"], capture_output=True, text=True, timeout=60,
                          env=_env(tmp_path, PYTHONPATH=pythonpath), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    for number, name in enumerate(CHECK_NAMES, 1):
        assert f"{number}. {name}:" in done.stdout
    assert not (tmp_path / "out").exists(), "a dry run writes no report"


@needs_no_cuda
def test_without_cuda_it_exits_2_with_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120,
                          env=_env(tmp_path), cwd=tmp_path, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: no CUDA device: "), lines
    report = (tmp_path / "out" / "gpu_check_report.txt").read_text()
    assert report.startswith("trinity gpu check — ") and "no CUDA device" in report


def test_without_torch_it_exits_2_and_says_so(tmp_path: Path) -> None:
    pythonpath = _poisoned_torch(tmp_path, "raise ImportError('no torch here')\n")
    done = subprocess.run([sys.executable, str(SCRIPT), "--preflight"], capture_output=True, text=True, timeout=60,
                          env=_env(tmp_path, PYTHONPATH=pythonpath), check=False)
    assert done.returncode == 2
    assert "no CUDA device: torch cannot be imported (ImportError: no torch here)" in done.stderr


@needs_no_cuda
def test_shell_script_stops_before_installing(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(SHELL)], capture_output=True, text=True, timeout=120,
                          env=_env(tmp_path, PYTHON=sys.executable), check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no CUDA device" in done.stderr
    assert "pip" not in done.stdout + done.stderr


def test_entry_point_shim_is_found_like_an_install(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _gpu_check().write_shim(site)
    code = (
        "from importlib.metadata import entry_points\n"
        "[ep] = [e for e in entry_points(group='trinity.backends') if e.name == 'cuda' and "
        f"str(e.dist._path).startswith({str(site)!r})]\n"
        "print(ep.value, ep.dist.metadata['Name'], ep.dist.metadata['Version'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(site)}, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["trinity_backend_cuda.plugin", "trinity-backend-cuda", "0.1.0"]


def test_nvml_standin_reports_a_missing_driver_as_nvml_does(tmp_path: Path) -> None:
    import ctypes.util

    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has an NVIDIA driver")
    folder = _gpu_check().write_nvml_standin(tmp_path / "standin")
    code = (
        "import pynvml\n"
        f"assert pynvml.__file__.startswith({str(folder)!r})\n"
        "from trinity_backend_cuda import nvml\n"
        "try:\n"
        "    nvml.read_nvml(details=True)\n"
        "except nvml.NvmlUnavailable as exc:\n"
        "    print(exc.code, exc.reason)\n"
    )
    pythonpath = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": pythonpath}, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("12 no NVIDIA driver found"), done.stdout
