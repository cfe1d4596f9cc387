"""What ``scripts/gpu_check.py`` needs around the GPU tests: the torch probe, the install fallback, the report.

* :func:`probe_torch` asks a fresh interpreter whether torch sees a CUDA
  device (the driver refuses to go on when it does not, before installing).
* :func:`prepare_install` makes ``trinity`` and ``trinity_backend_cuda``
  importable with their entry points: an editable install made by
  ``gpu_check.sh``, else ``PYTHONPATH`` plus generated ``.dist-info`` folders
  (backend discovery reads only ``importlib.metadata``).
* :func:`provide_nvml` puts a ctypes stand-in for ``pynvml`` on the path where
  nvidia-ml-py is missing (the CUDA probe needs those few NVML calls).
* :class:`Report` is the report file, rewritten after every row;
  :func:`rows_of` turns a check's junit file into its rows.

Standard library only: the driver imports this module before it knows
whether torch works.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

REPO = Path(__file__).resolve().parents[2]
REPORT_NAME = "gpu_check_report.txt"
DETAILS_NAME = "gpu_check_details.log"

#: Importable module -> (pip requirement, what needs it). One line each is reported when missing.
DEPENDENCIES: dict[str, tuple[str, str]] = {
    "torch": ("a CUDA build of torch>=2.6", "everything"),
    "pluggy": ("pluggy>=1.5", "backend discovery (every check)"),
    "yaml": ("pyyaml>=6", "the config schema (trainer)"),
    "numpy": ("numpy>=1.24", "torch interop"),
    "pynvml": ("nvidia-ml-py>=12", "the CUDA backend's probe (without it cuda probes unavailable)"),
    "pytest": ("pytest>=8", "the conformance check"),
    "transformers": ("transformers>=4.50", "the tiny model, trainer and hf engine checks"),
    "tokenizers": ("tokenizers>=0.19", "the tiny model's tokenizer"),
    "safetensors": ("safetensors>=0.4", "saving/loading the tiny model"),
    "ray": ("ray>=2.40", "trinity runs (not these checks: the trainer runs in-process)"),
    "sqlalchemy": ("sqlalchemy>=2.0", "trinity's sqlite buffer (not these checks)"),
    "pyarrow": ("pyarrow>=14", "trinity's parquet task sets (not these checks)"),
    "rich": ("rich>=13", "the human table of `trinity backends list` (not these checks: --json)"),
}
#: Optional modules: reported as present/absent, never as a problem.
OPTIONAL = {"vllm": "the vllm-engine check", "triton": "torch.compile on CUDA", "pytest_timeout": "pytest's timeout"}


@dataclass
class Row:
    """One line of the report: ``STATUS name: detail (seconds)``."""

    status: str  # PASS, FAIL or SKIP
    name: str
    detail: str
    seconds: float | None = None

    def line(self) -> str:
        """Return the report line."""
        timing = f" ({self.seconds:.1f} s)" if self.seconds is not None else ""
        return f"{self.status} {self.name}: {self.detail}{timing}"


def one_line(text: object, limit: int = 300) -> str:
    """Return ``text`` on one line, shortened to ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def missing_dependency(name: str) -> str:
    """Return the one-line report of a missing module."""
    requirement, needed_by = DEPENDENCIES.get(name, (name, ""))
    return f"missing Python dependency: {name} (pip install '{requirement}'; needed by {needed_by or 'this check'})"


PROBE_CODE = textwrap.dedent(
    """
    import json, sys
    out = {"ok": False}
    try:
        import torch
    except BaseException as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(out)); sys.exit(0)
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    try:
        out["available"] = bool(torch.cuda.is_available())
        if out["available"]:
            out["count"] = torch.cuda.device_count()
            out["names"] = [torch.cuda.get_device_name(i) for i in range(out["count"])]
            out["ok"] = True
    except BaseException as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    try:
        import pynvml
        pynvml.nvmlInit()
        out["driver"] = str(pynvml.nvmlSystemGetDriverVersion())
        pynvml.nvmlShutdown()
    except BaseException:
        pass
    print(json.dumps(out))
    """
)


def probe_torch(env: dict[str, str]) -> dict[str, Any]:
    """Ask a fresh interpreter whether torch imports and sees a CUDA device (and the driver version)."""
    try:
        done = subprocess.run([sys.executable, "-c", PROBE_CODE], env=env, capture_output=True, text=True,
                              timeout=180, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": "`import torch; torch.cuda.is_available()` did not finish in 180 s"}
    lines = done.stdout.strip().splitlines()
    try:
        found: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"ok": False, "error": f"the torch probe exited {_exit_text(done.returncode)}: {one_line(last)}"}
    if "driver" not in found and shutil.which("nvidia-smi"):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30, check=False)
            if smi.returncode == 0 and smi.stdout.strip():
                found["driver"] = smi.stdout.strip().splitlines()[0]
    return found


def no_cuda_reason(probe: dict[str, Any]) -> str:
    """Return why ``probe`` found no usable CUDA device, in one line."""
    if "torch" not in probe:
        return f"torch cannot be imported ({probe.get('error', 'unknown error')}); install a CUDA build of torch"
    version = probe["torch"]
    if not probe.get("cuda"):
        return f"torch {version} is a CPU-only build (torch.version.cuda is None); install a CUDA build of torch"
    if probe.get("error"):
        return f"torch {version} (CUDA {probe['cuda']}) failed to query CUDA: {probe['error']}"
    return (f"torch {version} (CUDA {probe['cuda']}) sees no GPU: torch.cuda.is_available() is False; "
            "check `nvidia-smi`, the driver and CUDA_VISIBLE_DEVICES")


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"on signal {signal.Signals(-code).name}"
    return f"with status {code}"


def output_dir() -> Path:
    """Return where the report goes: ``$OUT`` when set, else the current directory."""
    out = os.environ.get("OUT")
    return Path(out) if out else Path.cwd()


class Report:
    """The report: header, notes, rows; rewritten to disk after every change."""

    def __init__(self, header: str) -> None:
        self.header = header
        self.notes: list[str] = []
        self.rows: list[Row] = []
        self.footer: list[str] = []
        self.path = output_dir() / REPORT_NAME

    def add(self, row: Row) -> None:
        """Add ``row``, print it and save the report."""
        self.rows.append(row)
        print(row.line(), flush=True)
        self.save()

    def text(self) -> str:
        """Return the whole report."""
        return "\n".join([self.header, *self.notes, *(row.line() for row in self.rows), *self.footer]) + "\n"

    def save(self) -> None:
        """Write the report file (never fails the run)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(self.text(), encoding="utf-8")
        except OSError as exc:
            print(f"gpu_check: cannot write {self.path}: {exc}", file=sys.stderr)


def header_line(probe: dict[str, Any], allow_cpu: bool) -> str:
    """Return the report's first line: date, GPU, driver, torch, CUDA."""
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    names = probe.get("names") or []
    gpu = names[0] if names else ("no GPU (--allow-cpu smoke run: not a GPU check)" if allow_cpu else "no GPU")
    if len(names) > 1:
        gpu = f"{len(names)} x {gpu}"
    return (f"trinity gpu check — {date}, {gpu}, driver {probe.get('driver', 'unknown')}, "
            f"torch {probe.get('torch', 'missing')}, CUDA {probe.get('cuda') or 'none'}")


def _toml_value(text: str, key: str) -> str | None:
    match = re.search(rf'^\s*{re.escape(key)}\s*=\s*"([^"]+)"', text, re.MULTILINE)
    return match.group(1) if match else None


def write_shim(site: Path) -> None:
    """Write ``.dist-info`` folders for trinity-rft and trinity-backend-cuda into ``site`` (entry points included).

    With ``site``, the repository and ``trinity_backend_cuda/src`` on
    ``PYTHONPATH``, ``importlib.metadata`` finds both distributions and the
    ``trinity.backends`` entry point ``cuda`` exactly as after an install.
    """
    projects = [(REPO / "pyproject.toml", "trinity"), (REPO / "trinity_backend_cuda" / "pyproject.toml",
                                                       "trinity_backend_cuda")]
    for pyproject, top_level in projects:
        text = pyproject.read_text(encoding="utf-8")
        name = _toml_value(text, "name") or top_level
        version = _toml_value(text, "version") or "0.0.0"
        folder = site / f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: gpu_check shim of {pyproject}\n",
            encoding="utf-8",
        )
        (folder / "top_level.txt").write_text(f"{top_level}\n", encoding="utf-8")
        backends = re.search(r'\[project\.entry-points\."trinity\.backends"\]\s*\n((?:[^\[\n].*\n?)*)', text)
        lines = []
        if backends:
            lines = ["[trinity.backends]", *(ln.strip().replace('"', "") for ln in backends.group(1).splitlines()
                                             if "=" in ln)]
        (folder / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


VERIFY_CODE = textwrap.dedent(
    """
    import json
    from importlib.metadata import entry_points
    out = {}
    try:
        import trinity
        out["trinity"] = trinity.__file__
    except BaseException as exc:
        out["error"] = f"import trinity: {type(exc).__name__}: {exc}"
    try:
        import trinity_backend_cuda
        out["cuda_package"] = trinity_backend_cuda.__file__
    except BaseException as exc:
        out["error"] = f"import trinity_backend_cuda: {type(exc).__name__}: {exc}"
    out["entry_points"] = sorted(f"{ep.name}={ep.value}" for ep in entry_points(group="trinity.backends"))
    print(json.dumps(out))
    """
)


def verify_install(env: dict[str, str]) -> tuple[bool, str]:
    """Return (ok, detail): do trinity and trinity_backend_cuda import from this tree, with the cuda entry point?"""
    done = subprocess.run([sys.executable, "-c", VERIFY_CODE], cwd=tempfile.gettempdir(), env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return False, f"verification exited {done.returncode}: {one_line(done.stderr[-500:])}"
    if "error" in found:
        return False, found["error"]
    problems = []
    for key in ("trinity", "cuda_package"):
        if not str(Path(found[key]).resolve()).startswith(str(REPO)):
            problems.append(f"{key} imports from {found[key]}, not from {REPO}")
    if not any(ep.startswith("cuda=") for ep in found["entry_points"]):
        problems.append(f"no trinity.backends entry point 'cuda' (found {found['entry_points']})")
    return not problems, "; ".join(problems)


def install_reason(log_path: str) -> str:
    """Return, in one line, why ``pip install -e`` failed, from its log."""
    text = ""
    with contextlib.suppress(OSError):
        text = Path(log_path).read_text(errors="replace")
    if importlib.util.find_spec("hatchling") is None:
        return "hatchling (the build backend of both pyprojects) is not installed and cannot be downloaded"
    if "externally-managed-environment" in text:
        return "this Python is externally managed (PEP 668); pip refuses to install into it"
    if "No module named pip" in text or not text:
        return "pip is not available for this Python"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith(" ")]
    errors = [ln for ln in lines if "error" in ln.lower()]
    return one_line((errors or lines or ["unknown"])[-1], 200)


def prepare_install(workdir: Path, env: dict[str, str]) -> Row:
    """Make trinity and the CUDA backend importable with entry points for the checks; return the install row."""
    mode = os.environ.get("GPU_CHECK_INSTALL", "")
    started = time.monotonic()
    ok, problem = verify_install(env)
    if ok and mode == "editable":
        return Row("PASS", "install", "pip install --no-deps --no-build-isolation -e . -e trinity_backend_cuda "
                   "(offline)", time.monotonic() - started)
    if ok:
        return Row("PASS", "install", "trinity and trinity-backend-cuda already importable from this tree with "
                   "their entry points (no install by this run)", time.monotonic() - started)
    why = install_reason(os.environ.get("GPU_CHECK_INSTALL_LOG", "")) if mode == "failed" else (
        "not installed by gpu_check.sh" if not mode else problem)
    site = workdir / "shim-site"
    write_shim(site)
    paths = [str(site), str(REPO), str(REPO / "trinity_backend_cuda" / "src")]
    env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH", "")])])
    ok, problem = verify_install(env)
    detail = (f"editable install impossible ({why}); using PYTHONPATH (repo, trinity_backend_cuda/src) plus "
              f"generated .dist-info folders carrying the entry points, which importlib.metadata reads like an "
              f"installed package's")
    if not ok:
        return Row("FAIL", "install", f"{detail}; still not importable: {problem}", time.monotonic() - started)
    return Row("PASS", "install", detail, time.monotonic() - started)


NVML_STANDIN = textwrap.dedent(
    '''
    """gpu_check's stand-in for nvidia-ml-py (``pynvml``), used only where that package is missing.

    It makes, through ctypes on the driver's own libnvidia-ml.so.1, the NVML calls
    trinity-backend-cuda makes; errors carry NVML's codes as ``NVMLError.value``.
    """
    import ctypes

    _lib = None


    class NVMLError(Exception):
        def __init__(self, value):
            super().__init__(value)
            self.value = value

        def __str__(self):
            try:
                function = _lib.nvmlErrorString
                function.restype = ctypes.c_char_p
                return function(self.value).decode()
            except Exception:
                return f"NVML error {self.value}"


    def _call(name, *args):
        global _lib
        if _lib is None:
            try:
                _lib = ctypes.CDLL("libnvidia-ml.so.1")
            except OSError:
                raise NVMLError(12) from None  # NVML_ERROR_LIBRARY_NOT_FOUND
        function = getattr(_lib, name, None)
        if function is None:
            raise NVMLError(13)  # NVML_ERROR_FUNCTION_NOT_FOUND
        code = function(*args)
        if code != 0:
            raise NVMLError(code)


    def _text(name, *args, size=96):
        buffer = ctypes.create_string_buffer(size)
        _call(name, *args, buffer, ctypes.c_uint(size))
        return buffer.value.decode()


    def nvmlInit():
        _call("nvmlInit_v2")


    def nvmlShutdown():
        _call("nvmlShutdown")


    def nvmlDeviceGetCount():
        count = ctypes.c_uint()
        _call("nvmlDeviceGetCount_v2", ctypes.byref(count))
        return count.value


    def nvmlDeviceGetHandleByIndex(index):
        handle = ctypes.c_void_p()
        _call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
        return handle


    def nvmlDeviceGetName(handle):
        return _text("nvmlDeviceGetName", handle)


    def nvmlDeviceGetUUID(handle):
        return _text("nvmlDeviceGetUUID", handle)


    def nvmlSystemGetDriverVersion():
        return _text("nvmlSystemGetDriverVersion", size=80)


    def nvmlSystemGetCudaDriverVersion():
        version = ctypes.c_int()
        _call("nvmlSystemGetCudaDriverVersion", ctypes.byref(version))
        return version.value
    '''
)


def write_nvml_standin(folder: Path) -> Path:
    """Write the ``pynvml`` stand-in (NVML_STANDIN) into ``folder`` and return the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pynvml.py").write_text(NVML_STANDIN.lstrip(), encoding="utf-8")
    return folder


def provide_nvml(workdir: Path, env: dict[str, str]) -> str | None:
    """Where ``pynvml`` is missing, put the stand-in last on ``env``'s PYTHONPATH and return a report note."""
    if importlib.util.find_spec("pynvml") is not None:
        return None
    folder = write_nvml_standin(workdir / "nvml-standin")
    env["PYTHONPATH"] = os.pathsep.join([*filter(None, [env.get("PYTHONPATH", "")]), str(folder)])
    return ("NOTE pynvml (nvidia-ml-py) is missing, so the cuda backend would probe unavailable: its NVML calls go "
            "through gpu_check's ctypes stand-in on the driver's libnvidia-ml.so.1 instead (pip install "
            "nvidia-ml-py for a faithful run)")


def dependency_notes() -> list[str]:
    """Return one line per missing dependency, and one line listing the optional modules found or not."""
    notes = []
    for module, (requirement, needed_by) in DEPENDENCIES.items():
        try:
            missing = importlib.util.find_spec(module) is None
        except (ImportError, ValueError):
            missing = True
        if missing:
            notes.append(f"MISSING {module}: pip install '{requirement}' (needed by {needed_by})")
    optional = []
    for module, purpose in OPTIONAL.items():
        try:
            present = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            present = False
        optional.append(f"{module} {'present' if present else 'absent'} ({purpose})")
    notes.append("optional: " + ", ".join(optional))
    return notes


def _problem(case: ET.Element) -> ET.Element | None:
    """Return a test case's ``failure`` or ``error`` element, or None when it passed or was skipped."""
    failure = case.find("failure")
    return failure if failure is not None else case.find("error")


def rows_of(check: str, junit: Path) -> list[Row]:
    """Return the report rows of one check's junit file: one per test function, one for a test class."""
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    rows: list[Row] = []
    grouped = [c for c in cases if c.get("classname", "").rsplit(".", 1)[-1].startswith("Test")]
    for case in [c for c in cases if c not in grouped]:
        name = case.get("name", "").removeprefix("test_").replace("_", "-").replace("[", "-").rstrip("]")
        details = [p.get("value", "") for p in case.iter("property") if p.get("name") == "detail"]
        problem = _problem(case)
        skipped = case.find("skipped")
        seconds = float(case.get("time", "0"))
        if problem is not None:
            rows.append(Row("FAIL", name, one_line(problem.get("message", "failed"), 900), seconds))
        elif skipped is not None:
            rows.append(Row("SKIP", name, one_line(skipped.get("message", "skipped").removeprefix("Skipped: "))))
        else:
            rows.append(Row("PASS", name, one_line("; ".join(details) or "passed", 900), seconds))
    if grouped:
        bad = [f"{c.get('name')}: {one_line(problem.get('message', ''), 160)}"
               for c in grouped if (problem := _problem(c)) is not None]
        skips = sum(c.find("skipped") is not None for c in grouped)
        text = f"{len(grouped) - len(bad) - skips} passed, {len(bad)} failed, {skips} skipped of {len(grouped)}"
        rows.append(Row("FAIL" if bad else "PASS", check, one_line("; ".join([text, *bad[:4]]), 900)))
    return rows
