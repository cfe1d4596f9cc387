"""``scripts/gpu_check.sh`` / ``scripts/gpu_check.py`` without a GPU: syntax, dry run, collection, the no-CUDA exit.

The GPU tests themselves (``trinity_backend_cuda/gpu_tests``) need a GPU;
without one, what can be shown is that the driver lists them without
importing torch, that pytest collects them there (and the normal suite does
not), that the driver and the tests stop with status 2 and one line when
there is no CUDA device (before installing anything), that a junit file
becomes the report's rows, and that the fallbacks (entry points without an
install, the NVML stand-in) behave.
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
GPU_TESTS = REPO / "trinity_backend_cuda" / "gpu_tests"
CHECK_NAMES = ("backends", "conformance", "fsdp-trainer", "hf-engine", "weight-sync", "vllm-engine", "colocate",
               "offload")


def _has_cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


needs_no_cuda = pytest.mark.skipif(_has_cuda(), reason="a CUDA device is present: the script would run")


def _harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check_harness_under_test", GPU_TESTS / "harness.py")
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
    _harness().write_shim(site)
    code = (
        "from importlib.metadata import entry_points\n"
        "[ep] = [e for e in entry_points(group='trinity.backends') if e.name == 'cuda' and "
        f"str(e.dist._path).startswith({str(site)!r})]\n"
        "print(ep.value, ep.dist.metadata['Name'], ep.dist.metadata['Version'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(site)}, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["trinity_backend_cuda.plugin", "trinity-backend-cuda", "0.3.0"]


def test_nvml_standin_reports_a_missing_driver_as_nvml_does(tmp_path: Path) -> None:
    import ctypes.util

    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("an NVIDIA driver is installed")
    folder = _harness().write_nvml_standin(tmp_path / "standin")
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


def test_the_gpu_tests_are_collected_by_the_driver_only(tmp_path: Path) -> None:
    import tomllib

    testpaths = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["testpaths"]
    assert not any(GPU_TESTS.is_relative_to(REPO / path) for path in testpaths), "the normal suite would collect them"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "--rootdir", str(GPU_TESTS),
         "-o", "addopts=", str(GPU_TESTS)],
        capture_output=True, text=True, timeout=120, cwd=REPO, env=_env(tmp_path, GPU_CHECK_DEVICE="cpu"), check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ids = {line.split("::", 1)[1] for line in done.stdout.splitlines() if "::" in line}
    for test in ("test_backends", "test_doctor", "test_fsdp_trainer", "test_hf_engine", "test_weight_sync[gloo]",
                 "test_weight_sync[nccl]", "test_vllm_engine",
                 "TestRealBackendConformance::test_probe_agrees_with_torch"):
        assert test in ids, sorted(ids)


@needs_no_cuda
def test_the_gpu_tests_refuse_without_cuda_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(GPU_TESTS), "-o", "addopts=",
         str(GPU_TESTS / "test_hf_engine.py")],
        capture_output=True, text=True, timeout=120, cwd=REPO, env=_env(tmp_path), check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no CUDA device: torch " in done.stdout + done.stderr and "passed" not in done.stdout


JUNIT = """<testsuites><testsuite name="pytest" tests="5">
<testcase classname="test_weight_sync" name="test_weight_sync[gloo]" time="3.5">
  <properties><property name="detail" value="100 MiB, checksums equal: 900 MB/s"/></properties></testcase>
<testcase classname="test_weight_sync" name="test_weight_sync[nccl]" time="0.0">
  <skipped message="one GPU: NCCL needs one device per rank"/></testcase>
<testcase classname="test_hf_engine" name="test_hf_engine" time="2.0">
  <failure message="AssertionError: model on cpu, expected cuda:0">trace</failure></testcase>
<testcase classname="test_conformance.TestRealBackendConformance" name="test_info" time="0.1"/>
<testcase classname="test_conformance.TestRealBackendConformance" name="test_probe" time="0.1">
  <error message="RuntimeError: no driver">trace</error></testcase>
</testsuite></testsuites>"""


def test_a_junit_file_becomes_the_report_rows(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT, encoding="utf-8")
    lines = [row.line() for row in _harness().rows_of("checks", junit)]
    assert lines == [
        "PASS weight-sync-gloo: 100 MiB, checksums equal: 900 MB/s (3.5 s)",
        "SKIP weight-sync-nccl: one GPU: NCCL needs one device per rank",
        "FAIL hf-engine: AssertionError: model on cpu, expected cuda:0 (2.0 s)",
        "FAIL checks: 1 passed, 1 failed, 0 skipped of 2; test_probe: RuntimeError: no driver",
    ]
