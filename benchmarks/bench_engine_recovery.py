"""Time from a SIGKILLed rollout engine to the run training again, and to the one-line exit when it cannot be replaced.

Both runs are ``trinity run`` on the CPU quickstart (``examples/quickstart/cpu.yaml``:
one hf engine, one FSDP2 trainer rank, online sync every step, no evaluation),
a subprocess with its own local Ray cluster, as a user runs it. The engine's
process is found among the run's descendants by its Ray process title
(``ray::HFEngine``) and killed with SIGKILL.

1. Recovery: after training step ``--first-kill`` is logged, the engine is
   killed; once the run trains again on a batch rolled out by the fresh
   engine, it is killed again, ``--kills`` times in all. Reported per kill:
   seconds from the kill to the next training step logged in
   ``<run>/metrics.jsonl`` (whatever batch it trained on), and to the first
   training step whose batch the fresh engine rolled out whole (the explorer
   step after the kill with no dead engine and no failed task). Goal: the
   latter < 30 s, and how long each fresh engine took to start serving (from
   the run's log). The run must then finish (exit 0).
2. Exit: the same run with ``explorer.max_engine_restarts: 0``: seconds from
   the kill to the process's exit, its exit status (1) and its one error line.

Run ``.venv/bin/python benchmarks/bench_engine_recovery.py``; it prints the
figures and writes JSON to ``benchmarks/results/engine_recovery.json``
(``--out`` to change).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
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
DEFAULT_OUT = REPO / "benchmarks" / "results" / "engine_recovery.json"
TARGET_S = 30.0
ENGINE_TITLE = "ray::HFEngine"


def _config(workdir: Path, name: str, steps: int, max_restarts: int) -> Path:
    raw = yaml.safe_load(QUICKSTART.read_text())
    raw["name"] = name
    raw["checkpoint_root_dir"] = str(workdir / "ckpt")
    raw["model"]["model_path"] = str(workdir / "tiny-model")
    raw["monitor"] = {"progress": False, "plot": False}
    raw["buffer"]["explorer_input"]["taskset"]["path"] = str(REPO / "examples" / "quickstart" / "tasks" /
                                                             "train.jsonl")
    raw["buffer"]["explorer_input"]["eval_tasksets"] = []
    raw["buffer"]["total_steps"] = steps
    raw["trainer"]["save_interval"] = 5
    raw["explorer"]["max_engine_restarts"] = max_restarts
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _start(config: Path, workdir: Path) -> tuple[subprocess.Popen[str], Path]:
    log = workdir / f"{config.stem}.log"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    process = subprocess.Popen([sys.executable, "-m", "trinity.cli.main", "run", "-v", "--config", str(config)],
                               cwd=REPO, env=env, stdout=log.open("w"),
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return process, log


def _records(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line being written
    return out


def _descendants(root: int) -> list[int]:
    """Return the pids of every live process below ``root``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _engine_pid(root: int) -> int | None:
    for pid in _descendants(root):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if title.startswith(ENGINE_TITLE):
            return pid
    return None


def _wait(what: str, check: Any, process: subprocess.Popen[str], log: Path, timeout: float = 600.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if process.poll() is not None:
            raise SystemExit(f"the run ended ({process.returncode}) while waiting for {what}:\n"
                             f"{log.read_text()[-3000:]}")
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")


def _kill_engine(process: subprocess.Popen[str], log: Path, not_pid: int | None = None) -> tuple[int, float]:
    pid = _wait("the engine process", lambda: (p if (p := _engine_pid(process.pid)) != not_pid else None),
                process, log)
    assert pid is not None
    killed_at = time.time()
    os.kill(pid, signal.SIGKILL)
    return pid, killed_at


def _recovery(workdir: Path, steps: int, first_kill: int, kills: int) -> dict[str, Any]:
    config = _config(workdir, "recovery", steps, max_restarts=3)
    run_dir = workdir / "ckpt" / "quickstart" / "recovery"
    process, log = _start(config, workdir)
    measured: list[dict[str, float]] = []
    try:
        trained = lambda after: [r for r in _records(run_dir) if r["phase"] == "train" and r["time"] > after]  # noqa: E731
        _wait(f"training step {first_kill}", lambda: any(r["step"] >= first_kill for r in trained(0.0)), process,
              log)
        pid = None
        for number in range(kills):
            pid, killed_at = _kill_engine(process, log, not_pid=pid)
            print(f"  kill {number + 1}: engine pid {pid}", flush=True)

            def clean_after(when: float = killed_at) -> dict[str, Any] | None:
                logged = _records(run_dir)
                clean = [r for r in logged if r["phase"] == "explore" and r["time"] > when
                         and r["metrics"].get("explore/dead_engines") == 0 and r["metrics"].get("explore/failed") == 0]
                if not clean:
                    return None
                later = [r for r in logged if r["phase"] == "train" and r["time"] > clean[0]["time"]]
                return later[0] if later else None

            first = _wait("a training step after the kill", lambda when=killed_at: trained(when), process, log)[0]
            fresh = _wait("a training step on the fresh engine's rollouts", clean_after, process, log)
            measured.append({"kill_to_next_train_s": first["time"] - killed_at,
                             "kill_to_train_on_fresh_engine_s": fresh["time"] - killed_at,
                             "trained_step": float(fresh["step"])})
            print(f"    next training step after {measured[-1]['kill_to_next_train_s']:.1f} s; on the fresh "
                  f"engine's rollouts after {measured[-1]['kill_to_train_on_fresh_engine_s']:.1f} s "
                  f"(step {fresh['step']})", flush=True)
        status = process.wait(900)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
    if status != 0:
        raise SystemExit(f"the recovery run exited {status}:\n{log.read_text()[-3000:]}")
    starts = [float(m.group(1)) for m in re.finditer(r"a fresh rollout engine \d+ serves after ([0-9.]+) s",
                                                      log.read_text())]
    fresh_s = statistics.median(m["kill_to_train_on_fresh_engine_s"] for m in measured)
    return {"kills": measured, "exit_status": status, "fresh_engine_start_s": starts,
            "median_kill_to_train_on_fresh_engine_s": fresh_s, "target": f"< {TARGET_S:g} s",
            "met": fresh_s < TARGET_S}


def _exit(workdir: Path, steps: int, first_kill: int) -> dict[str, Any]:
    config = _config(workdir, "exit", steps, max_restarts=0)
    run_dir = workdir / "ckpt" / "quickstart" / "exit"
    process, log = _start(config, workdir)
    try:
        _wait(f"training step {first_kill}", lambda: any(r["phase"] == "train" and r["step"] >= first_kill
                                                         for r in _records(run_dir)), process, log)
        _pid, killed_at = _kill_engine(process, log)
        status = process.wait(600)
        exited_at = time.time()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
    errors = [line for line in log.read_text().splitlines() if line.startswith("trinity: error: ")]
    return {"kill_to_exit_s": exited_at - killed_at, "exit_status": status, "error_lines": errors,
            "traceback": "Traceback" in log.read_text()}


def main() -> None:
    """Run both measurements, print the figures and write the JSON results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="trainer steps of the recovery run")
    parser.add_argument("--first-kill", type=int, default=5, help="kill the engine after this training step")
    parser.add_argument("--kills", type=int, default=3, help="kills in the recovery run")
    parser.add_argument("--skip-exit", action="store_true", help="skip the run that cannot replace its engine")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()

    results: dict[str, Any] = {"config": str(QUICKSTART.relative_to(REPO)), "steps": args.steps}
    with tempfile.TemporaryDirectory(prefix="bench-engine-recovery-") as tmp:
        workdir = Path(tmp)
        print("recovery: SIGKILL the engine, wait for training again", flush=True)
        results["recovery"] = _recovery(workdir, args.steps, args.first_kill, args.kills)
        if not args.skip_exit:
            print("exit: max_engine_restarts 0, SIGKILL the engine, wait for the exit", flush=True)
            results["exit"] = _exit(workdir, args.steps, args.first_kill)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    recovery = results["recovery"]
    print(f"kill -> training on the fresh engine's rollouts: median "
          f"{recovery['median_kill_to_train_on_fresh_engine_s']:.1f} s over {len(recovery['kills'])} kill(s) "
          f"(target {recovery['target']}, met: {recovery['met']}); fresh engines served after "
          f"{', '.join(f'{s:.1f}' for s in recovery['fresh_engine_start_s'])} s; the run exited "
          f"{recovery['exit_status']}")
    if "exit" in results:
        gone = results["exit"]
        print(f"kill -> exit with max_engine_restarts 0: {gone['kill_to_exit_s']:.1f} s, status "
              f"{gone['exit_status']}, {len(gone['error_lines'])} error line(s): "
              f"{gone['error_lines'][0] if gone['error_lines'] else '-'}")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
