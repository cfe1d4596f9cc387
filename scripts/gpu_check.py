#!/usr/bin/env python3
"""Run the CUDA backend's GPU tests (``trinity_backend_cuda/gpu_tests``) and write a short report of their figures.

Normally started by ``scripts/gpu_check.sh``, which installs the repository's
packages without network first. Run directly::

    python3 scripts/gpu_check.py              # every check (exit 0 pass, 1 some FAIL, 2 no CUDA device)
    python3 scripts/gpu_check.py --dry-run    # list the checks; imports nothing heavy
    python3 scripts/gpu_check.py --preflight  # only: is there a CUDA torch and a GPU? (exit 0 or 2)
    python3 scripts/gpu_check.py --only hf-engine,weight-sync

Each check is one test module, run by pytest in a process of its own with a
time limit (so one crash or hang does not stop the rest); each test's
figures become its report line. The report goes to
``$OUT/gpu_check_report.txt`` (else ``./``), rewritten after every check,
with pytest's output in ``gpu_check_details.log`` beside it. ``--allow-cpu``
runs the tests on the CPU backend where there is no GPU: a smoke run of the
plumbing, not a GPU check.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "trinity_backend_cuda" / "gpu_tests"
sys.path.insert(0, str(TESTS))
import harness  # noqa: E402
from harness import Report, Row, one_line  # noqa: E402

#: Exit status when there is no usable CUDA device (or no torch).
EXIT_NO_CUDA = 2
#: Each check (``test_<name>.py`` with ``-`` as ``_``) and its time limit in seconds, in the order they run.
CHECKS = {"backends": 120, "conformance": 300, "fsdp-trainer": 240, "hf-engine": 180, "weight-sync": 200,
          "vllm-engine": 300, "colocate": 600, "offload": 300}


def module_of(check: str) -> Path:
    """Return the test module of ``check``."""
    return TESTS / f"test_{check.replace('-', '_')}.py"


def run_check(check: str, env: dict[str, str], workdir: Path, limit: float, details: Path) -> list[Row]:
    """Run one check's test module under pytest with ``limit`` seconds; return its rows (a FAIL row on a crash)."""
    junit = workdir / f"junit-{check}.xml"
    junit.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", str(module_of(check)), "-v", "-p", "no:cacheprovider",
               "--rootdir", str(TESTS), "-o", "addopts=", f"--junitxml={junit}", "-o", "junit_family=xunit1"]
    started = time.monotonic()
    with (workdir / f"log-{check}.txt").open("w+") as log:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # pytest and the peers it started
            process.wait()
        log.seek(0)
        output = log.read()
    with details.open("a", encoding="utf-8") as file:
        file.write(f"\n===== {check} (exit {process.returncode}, {time.monotonic() - started:.1f} s) =====\n")
        file.write(output[-40000:])
    last = next((ln for ln in reversed(output.strip().splitlines()) if ln.strip()), "no output")
    if not junit.is_file():
        state = "timed out" if process.returncode == -signal.SIGKILL else f"exited {process.returncode}"
        return [Row("FAIL", check, f"pytest {state} without results; last output: {one_line(last, 200)}",
                    time.monotonic() - started)]
    return harness.rows_of(check, junit)


def dry_run(checks: Sequence[str]) -> int:
    """Print the checks that would run (each module's first docstring line); imports nothing heavy."""
    print("gpu_check: would run these checks (dry run: nothing imported, installed or started):")
    for number, check in enumerate(checks, 1):
        summary = (ast.get_docstring(ast.parse(module_of(check).read_text(encoding="utf-8"))) or "").splitlines()
        print(f"  {number}. {check}: {summary[0] if summary else ''} (limit {CHECKS[check]} s)")
    print(f"tests: {TESTS}\nreport: {harness.output_dir() / 'gpu_check_report.txt'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Probe, prepare the install, run each check's tests, print and save the report; return the exit status."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="list the checks; import nothing heavy")
    parser.add_argument("--preflight", action="store_true", help="only check for a CUDA torch and a GPU (exit 0/2)")
    parser.add_argument("--only", help="comma-separated check names")
    parser.add_argument("--budget-s", type=float, default=390.0, help="start no check after this many seconds")
    parser.add_argument("--workdir", help="work folder (kept); default: a temporary one, removed at the end")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work folder")
    parser.add_argument("--allow-cpu", action="store_true", help="smoke run on the CPU backend if there is no GPU")
    args = parser.parse_args(argv)
    checks = [c.strip() for c in (args.only or ",".join(CHECKS)).split(",") if c.strip()]
    if unknown := [c for c in checks if c not in CHECKS]:
        parser.exit(64, f"gpu_check: unknown check(s) {', '.join(unknown)}; known: {', '.join(CHECKS)}\n")
    if args.dry_run:
        return dry_run(checks)
    env = {k: v for k, v in os.environ.items() if k not in ("TRINITY_DEVICE", "TRINITY_DEVICE_RESOLVED")}
    env.setdefault("RAY_AUTH_MODE", "disabled")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    probe = harness.probe_torch(env)
    report = Report(harness.header_line(probe, args.allow_cpu))
    if not probe.get("ok") and not args.allow_cpu:
        report.notes.append(f"gpu_check: no CUDA device: {harness.no_cuda_reason(probe)}")
        print(report.notes[-1], file=sys.stderr)
        report.save()
        return EXIT_NO_CUDA
    if args.preflight:
        print(f"gpu_check: CUDA ok: {', '.join(probe.get('names') or [])}; torch {probe.get('torch')}, "
              f"CUDA {probe.get('cuda')}" if probe.get("ok") else
              f"gpu_check: no CUDA device ({harness.no_cuda_reason(probe)}); going on for --allow-cpu")
        return 0
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="trinity-gpu-check-"))
    workdir.mkdir(parents=True, exist_ok=True)
    details = harness.output_dir() / harness.DETAILS_NAME
    details.parent.mkdir(parents=True, exist_ok=True)
    details.write_text(f"{report.header}\nwork folder: {workdir}\n", encoding="utf-8")
    print(report.header, flush=True)
    report.notes.extend(harness.dependency_notes())
    install = harness.prepare_install(workdir, env)
    report.add(install)
    if probe.get("ok") and (note := harness.provide_nvml(workdir, env)):
        report.notes.append(note)
    env.update(GPU_CHECK_DEVICE="cuda" if probe.get("ok") else "cpu", GPU_CHECK_WORKDIR=str(workdir))
    started = time.monotonic()
    try:
        for check in checks:
            left = args.budget_s - (time.monotonic() - started)
            if install.status == "FAIL":
                report.add(Row("FAIL", check, "not run: trinity is not importable (see install)"))
            elif left < 15:
                report.add(Row("FAIL", check, f"not run: the time budget of {args.budget_s:.0f} s was spent"))
            else:
                print(f"... {check} (limit {min(CHECKS[check], left):.0f} s)", flush=True)
                for row in run_check(check, env, workdir, min(CHECKS[check], left), details):
                    report.add(row)
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    counts = {s: sum(r.status == s for r in report.rows) for s in ("PASS", "FAIL", "SKIP")}
    report.footer.append(f"{counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['SKIP']} SKIP in "
                         f"{time.monotonic() - started:.0f} s")
    report.save()
    print("\n" + report.text() + f"(report: {report.path}; details: {details})", flush=True)
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
