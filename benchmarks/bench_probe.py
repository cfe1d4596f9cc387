"""What a cold ``trinity backends list`` and a cold selection cost trinity itself, measured in one run.

a. CLI: wall time of a fresh ``trinity backends list`` process against a
   fresh ``python -c "import trinity"`` (the interpreter and the package's
   import, which any command pays), interleaved run by run, median of N; the
   difference and the ratio are reported. A second baseline adds what Python
   itself pays for any entry-point plugin system (importing
   ``importlib.metadata``, scanning the entry points, importing the installed
   plugin modules); the list's time beyond it is trinity's own work.
   Target < 50 ms of it, for ``--json`` (the table adds rich). CPU time
   (user + system) is reported beside wall time: on a busy machine it is the
   steadier of the two.
b. The CUDA probe in a fresh interpreter, as it runs on a machine without an
   NVIDIA driver: the file check that answers without ``pynvml``, against the
   same probe sent on to NVML (what it cost before the check). Median of N.
c. Selection with 50 installed dummy backends, cold: ``benchmarks/bench_device.py``'s
   measurement (c), reused as is. Target < 50 ms of trinity's own work.

Run ``python benchmarks/bench_probe.py``; it prints a table and writes JSON to
``benchmarks/results/probe.json`` (``--out`` to change). Exit 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import bench_device  # noqa: E402
from benchmarks.bench_device import bench_selection  # noqa: E402


def _clean_env() -> dict[str, str]:
    """The environment of every measured process: no device choice and no Ray cluster to read."""
    env = bench_device._clean_env()
    env.pop("RAY_ADDRESS", None)
    return env

DEFAULT_OUT = REPO / "benchmarks" / "results" / "probe.json"
TARGET_OWN_S = 0.050
#: The baseline commands of (a).
IMPORT_TRINITY = "python -c 'import trinity'"
PLUGIN_FLOOR = "import trinity + entry points + plugin imports"
_FLOOR = (
    "import trinity\n"
    "from importlib.metadata import entry_points\n"
    "[ep.load() for ep in entry_points(group='trinity.backends')]\n"
)

_CUDA_PROBE = """
import json, sys, time
from trinity_backend_cuda import driver, plugin
if sys.argv[1] == "nvml":  # pretend device files exist, so the probe goes on to pynvml as it did before
    driver.look_for_driver = lambda: driver.DriverTraces(device_files=("/dev/nvidiactl",), library="")
started = time.perf_counter()
result = plugin.trinity_probe()
print(json.dumps([time.perf_counter() - started, result.available, "pynvml" in sys.modules, result.reason]))
"""


def _timed(command: Sequence[str], env: dict[str, str]) -> tuple[float, float]:
    """Run ``command``; return its wall time and its CPU time (user + system), which a busy machine inflates less."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bench_cli(runs: int) -> dict[str, Any]:
    """(a) Median wall time of a cold ``trinity backends list`` and of ``import trinity``, interleaved."""
    script = Path(sys.executable).with_name("trinity")
    trinity = [str(script)] if script.exists() else [sys.executable, "-m", "trinity.cli.main"]
    commands = {
        IMPORT_TRINITY: [sys.executable, "-c", "import trinity"],
        PLUGIN_FLOOR: [sys.executable, "-c", _FLOOR],
        "trinity backends list": [*trinity, "backends", "list"],
        "trinity backends list --json": [*trinity, "backends", "list", "--json"],
    }
    env = _clean_env()
    for command in commands.values():  # warm the page cache (and write the .pyc files) once
        _timed(command, env)
    samples: dict[str, list[float]] = {name: [] for name in commands}
    cpu_samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, command in commands.items():
            wall, cpu = _timed(command, env)
            samples[name].append(wall)
            cpu_samples[name].append(cpu)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    cpu = {name: statistics.median(values) for name, values in cpu_samples.items()}
    base, floor = medians[IMPORT_TRINITY], medians[PLUGIN_FLOOR]
    own_json = medians["trinity backends list --json"] - floor
    return {
        "runs": runs,
        "median_s": medians,
        "median_cpu_s": cpu,
        "own_json_cpu_s": cpu["trinity backends list --json"] - cpu[PLUGIN_FLOOR],
        "list_json_minus_import_trinity_cpu_s": cpu["trinity backends list --json"] - cpu[IMPORT_TRINITY],
        "list_minus_import_trinity_s": medians["trinity backends list"] - base,
        "list_json_minus_import_trinity_s": medians["trinity backends list --json"] - base,
        "ratio_list_vs_import_trinity": medians["trinity backends list"] / base,
        "ratio_list_json_vs_import_trinity": medians["trinity backends list --json"] / base,
        "own_s": medians["trinity backends list"] - floor,
        "own_json_s": own_json,
        "target": f"< {TARGET_OWN_S * 1e3:.0f} ms of trinity's own work for --json (list minus the plugin floor)",
        "met": own_json < TARGET_OWN_S,
    }


def bench_cuda_probe(runs: int) -> dict[str, Any]:
    """(b) The CUDA probe, cold, answered from files against sent on to NVML; median of ``runs`` each."""
    env = _clean_env()
    samples: dict[str, list[float]] = {"files": [], "nvml": []}
    facts: dict[str, Any] = {}
    for _ in range(runs):
        for mode, values in samples.items():
            done = subprocess.run([sys.executable, "-c", _CUDA_PROBE, mode], env=env, capture_output=True,
                                  text=True, check=True)
            seconds, available, imported, reason = json.loads(done.stdout.strip().splitlines()[-1])
            values.append(seconds)
            facts[mode] = {"available": available, "imported_pynvml": imported, "reason": reason}
    medians = {mode: statistics.median(values) for mode, values in samples.items()}
    return {"runs": runs, "median_s": medians, "facts": facts, "saved_s": medians["nvml"] - medians["files"],
            "met": not facts["files"]["imported_pynvml"]}


def _table(results: dict[str, Any]) -> str:
    cli, cuda, sel = results["cli"], results["cuda_probe"], results["selection"]
    ms = cli["median_s"]
    rows = [
        ("(a) trinity backends list, cold", f"{ms['trinity backends list'] * 1e3:.0f} ms",
         f"import trinity {ms[IMPORT_TRINITY] * 1e3:.0f} ms",
         f"+{cli['list_minus_import_trinity_s'] * 1e3:.0f} ms, {cli['ratio_list_vs_import_trinity']:.1f}x; "
         f"beyond the plugin floor {cli['own_s'] * 1e3:.0f} ms (rich table included)"),
        ("    trinity backends list --json", f"{ms['trinity backends list --json'] * 1e3:.0f} ms",
         f"plugin floor {ms[PLUGIN_FLOOR] * 1e3:.0f} ms",
         f"+{cli['list_json_minus_import_trinity_s'] * 1e3:.0f} ms, {cli['ratio_list_json_vs_import_trinity']:.1f}x; "
         f"trinity's own {cli['own_json_s'] * 1e3:.0f} ms (target < {TARGET_OWN_S * 1e3:.0f} ms) "
         f"{'ok' if cli['met'] else 'MISSED'}"),
        ("    the same, CPU time", f"{cli['median_cpu_s']['trinity backends list --json'] * 1e3:.0f} ms",
         f"plugin floor {cli['median_cpu_s'][PLUGIN_FLOOR] * 1e3:.0f} ms",
         f"+{cli['list_json_minus_import_trinity_cpu_s'] * 1e3:.0f} ms over import trinity; "
         f"trinity's own {cli['own_json_cpu_s'] * 1e3:.0f} ms"),
        ("(b) CUDA probe, no driver: files", f"{cuda['median_s']['files'] * 1e3:.2f} ms",
         f"sent on to NVML {cuda['median_s']['nvml'] * 1e3:.2f} ms",
         f"saves {cuda['saved_s'] * 1e3:.1f} ms; pynvml imported: {cuda['facts']['files']['imported_pynvml']}"),
    ]
    cold = sel["with_dummies"]["cold_median"]
    rows.append((
        f"(c) select, {sel['dummy_backends']} dummies, cold", f"{cold['total_s'] * 1e3:.1f} ms",
        f"python floor {sel['with_dummies']['python_floor_cold_s'] * 1e3:.1f} ms",
        f"trinity's own {sel['trinity_own_cold_s'] * 1e3:.1f} ms (target < {TARGET_OWN_S * 1e3:.0f} ms) "
        f"{'ok' if sel['met'] else 'MISSED'}",
    ))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:<{widths[2]}}  {d}".rstrip() for a, b, c, d in rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the three measurements, print the table, write the JSON; exit 1 if a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default: {DEFAULT_OUT})")
    parser.add_argument("--runs", type=int, default=15, help="fresh processes per measurement (default 15)")
    parser.add_argument("--dummies", type=int, default=50, help="dummy backends installed for (c) (default 50)")
    parser.add_argument("--processes", type=int, default=7, help="fresh processes for (c) (default 7)")
    args = parser.parse_args(argv)
    # An installed package has its .pyc files; compiling sources on every start is not trinity's cost.
    # Every measured process's environment is built from this one.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    results: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "when": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
    }
    for key, step in (
        ("cli", lambda: bench_cli(args.runs)),
        ("cuda_probe", lambda: bench_cuda_probe(args.runs)),
        ("selection", lambda: bench_selection(args.dummies, args.processes, 1)),
    ):
        print(f"running {key} ...", file=sys.stderr, flush=True)
        results[key] = step()
    print(_table(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"\nwritten: {args.out}")
    return 0 if all(results[key]["met"] for key in ("cli", "cuda_probe", "selection")) else 1


if __name__ == "__main__":
    sys.exit(main())
