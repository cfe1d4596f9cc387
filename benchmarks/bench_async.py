"""Mode both, explorer and trainer concurrent (``sync_offset: 1``) against strict alternation (``sync_offset: 0``).

Both runs are ``trinity run`` on the CPU quickstart (``examples/quickstart/cpu.yaml``:
one hf engine, one FSDP2 trainer rank, online sync every step), each actor
given one CPU by Ray and so one torch thread (``OMP_NUM_THREADS=1``). On this
config a rollout batch and a training step take about the same time, the case
where overlapping them pays most.

1. Throughput: ``--steps`` trainer steps with no evaluation, once with
   ``sync_offset: 0`` and once with ``sync_offset: 1``, alternating for
   ``--rounds`` rounds. Steps/s is counted from the first to the last training
   record of ``metrics.jsonl`` (start-up excluded). Reported: steps/s of each,
   their ratio (median over rounds), and the mean explore and train seconds
   per step of the alternating run. Goal >= 1.7x on two cores.
2. Quality: the whole quickstart (160 steps, evaluation every 20) with
   ``sync_offset: 1``. Reported: the first and final evaluation reward; bar:
   final >= 2x the first and >= first + 0.2.

Run ``.venv/bin/python benchmarks/bench_async.py``; it prints a table and
writes JSON to ``benchmarks/results/async.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart" / "cpu.yaml"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "async.json"
TARGET_RATIO = 1.7


def _config(workdir: Path, name: str, offset: int, steps: int | None, evaluate: bool) -> Path:
    raw = yaml.safe_load(QUICKSTART.read_text())
    raw["name"] = name
    raw["checkpoint_root_dir"] = str(workdir / "ckpt")
    raw["model"]["model_path"] = str(workdir / "tiny-model")
    raw["synchronizer"]["sync_offset"] = offset
    raw["monitor"] = {"progress": False, "plot": False}
    taskset = raw["buffer"]["explorer_input"]["taskset"]
    taskset["path"] = str(REPO / "examples" / "quickstart" / "tasks" / "train.jsonl")
    evals = raw["buffer"]["explorer_input"]["eval_tasksets"]
    for entry in evals:
        entry["path"] = str(REPO / entry["path"])
    if steps is not None:
        raw["buffer"]["total_steps"] = steps
        raw["trainer"]["save_interval"] = 0
    if not evaluate:
        raw["buffer"]["explorer_input"]["eval_tasksets"] = []
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _run(config: Path, workdir: Path, name: str) -> list[dict[str, Any]]:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "trinity.cli.main", "run", "--config",
                           str(config)], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"trinity run {config.name} exited {done.returncode}:\n{done.stderr[-3000:]}")
    print(f"  {name}: {time.monotonic() - started:.1f} s wall", flush=True)
    metrics = workdir / "ckpt" / "quickstart" / name / "metrics.jsonl"
    return [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]


def _throughput(records: list[dict[str, Any]]) -> dict[str, float]:
    train = [r for r in records if r["phase"] == "train"]
    explore = [r for r in records if r["phase"] == "explore"]
    span = train[-1]["time"] - train[0]["time"]
    return {
        "steps": float(len(train)),
        "steps_per_s": (len(train) - 1) / span,
        "explore_s": statistics.mean(float(r["metrics"].get("explore/time_s", 0.0)) for r in explore),
        "train_s": statistics.mean(float(r["metrics"].get("step_time_s", 0.0)) for r in train),
        "max_trained_staleness": max(float(r["metrics"].get("buffer/trained_staleness", 0.0)) for r in train),
    }


def main() -> None:
    """Run both measurements, print the table and write the JSON results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="trainer steps per throughput run")
    parser.add_argument("--rounds", type=int, default=1, help="alternating offset-0 / offset-1 runs")
    parser.add_argument("--skip-quality", action="store_true", help="skip the whole-quickstart run")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()

    results: dict[str, Any] = {"config": str(QUICKSTART.relative_to(REPO)), "steps": args.steps, "rounds": []}
    with tempfile.TemporaryDirectory(prefix="bench-async-") as tmp:
        workdir = Path(tmp)
        for index in range(args.rounds):
            entry = {}
            for offset in (0, 1):
                name = f"offset{offset}-r{index}"
                print(f"round {index + 1}, sync_offset {offset}", flush=True)
                entry[f"offset{offset}"] = _throughput(
                    _run(_config(workdir, name, offset, args.steps, evaluate=False), workdir, name))
            entry["ratio"] = entry["offset1"]["steps_per_s"] / entry["offset0"]["steps_per_s"]
            results["rounds"].append(entry)
        results["ratio"] = statistics.median(r["ratio"] for r in results["rounds"])
        results["target"] = f">= {TARGET_RATIO}x"
        results["met"] = results["ratio"] >= TARGET_RATIO
        if not args.skip_quality:
            print("quickstart, sync_offset 1", flush=True)
            logged = _run(_config(workdir, "quality", 1, None, evaluate=True), workdir, "quality")
            evals = [r for r in logged if r["phase"] == "eval"]
            first, final = (float(evals[i]["metrics"]["eval/reward/mean"]) for i in (0, -1))
            results["quality"] = {"first_eval_reward": first, "final_eval_reward": final,
                                  "eval_steps": [r["step"] for r in evals],
                                  "bar_met": final >= 2 * first and final >= first + 0.2}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    for index, entry in enumerate(results["rounds"]):
        a, b = entry["offset0"], entry["offset1"]
        print(f"round {index + 1}: offset 0 {a['steps_per_s']:.2f} steps/s (explore {a['explore_s']:.3f} s, "
              f"train {a['train_s']:.3f} s per step); offset 1 {b['steps_per_s']:.2f} steps/s; "
              f"ratio {entry['ratio']:.2f}x")
    print(f"ratio (median): {results['ratio']:.2f}x (target {results['target']})")
    if "quality" in results:
        q = results["quality"]
        print(f"quickstart with sync_offset 1: eval reward {q['first_eval_reward']:.2f} -> "
              f"{q['final_eval_reward']:.2f} (bar met: {q['bar_met']})")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
