"""``trinity backends list --json`` selects cuda; ``trinity backends check cuda --json`` (the doctor) summarised."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

from gpu_support import EXPECTED_DEVICE, trinity_command


def _trinity(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*trinity_command(), *args], capture_output=True, text=True, timeout=120, check=False)


def test_backends(detail: Callable[[str], None]) -> None:
    """`trinity backends list --json` shows the backend available and selected."""
    done = _trinity("backends", "list", "--json")
    assert done.returncode == 0, f"`trinity backends list --json` exited {done.returncode}: {done.stderr.strip()}"
    listing = json.loads(done.stdout)
    row = next((r for r in listing["backends"] if r["name"] == EXPECTED_DEVICE), None)
    selected = listing.get("selected") or {}
    names = ", ".join(r["name"] for r in listing["backends"])
    assert row is not None, (f"no {EXPECTED_DEVICE!r} backend discovered (found: {names}); is trinity-backend-cuda "
                             "installed (entry point trinity.backends:cuda)?")
    assert row["status"] == "ok", f"{EXPECTED_DEVICE} is broken: {row['error']}"
    assert row["available"], f"{EXPECTED_DEVICE} is not available: {row['reason']}"
    assert row["selected"], (f"{EXPECTED_DEVICE} is available but {selected.get('name')!r} is selected "
                             f"({selected.get('reason') or listing.get('selection_error')})")
    probe = "NVML" if EXPECTED_DEVICE == "cuda" else "probe"
    count = row["device_count"]
    compiled = "yes" if row["compile_supported"] else f"no ({row['compile_reason']})"
    detail(f"{EXPECTED_DEVICE} selected ({selected.get('source')}, {probe}: {count} "
           f"device{'s' if count != 1 else ''}); compile: {compiled}")


def test_doctor(detail: Callable[[str], None]) -> None:
    """`trinity backends check <backend> --json`: every doctor finding, with the driver and library versions."""
    done = _trinity("backends", "check", EXPECTED_DEVICE, "--json")
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"`trinity backends check {EXPECTED_DEVICE} --json` exited {done.returncode} without "
                             f"JSON: {done.stderr.strip()}") from None
    counts = {status: 0 for status in ("ok", "warn", "fail")}
    for finding in report["checks"]:
        counts[finding["status"]] = counts.get(finding["status"], 0) + 1
    notes = [f"{c['name']}: {c['detail']}" for c in report["checks"] if c["status"] != "ok"]
    text = f"{counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail"
    facts = {k: v for c in report["checks"] for k, v in c.get("facts", {}).items()
             if k in ("driver_version", "cuda_driver_version", "torch", "torch_cuda", "nccl")}
    if facts:
        text += " [" + ", ".join(f"{k}={v}" for k, v in sorted(facts.items())) + "]"
    if notes:
        text += "; " + "; ".join(notes)
    detail(text)
    assert report["ok"], text
