"""What must hold after a job survived its kills, read from the run folder and every run's log.

* every training step 1..total is in the effective history exactly once
  (the metrics reader shows each once, the last checkpoint is step ``total``),
  and each run resumed right after the checkpoint it loaded;
* with a persistent buffer, every explored group is trained in exactly one
  effective step and the SQLite table holds each group once, all of it read;
* with experience replay, every explored group is trained at least once and
  at most as often as its priority function allows, and the replay pool's
  file records exactly the effective history's uses;
* every checkpoint folder left is complete (``trinity checkpoints verify``);
* after each sync the engines' weights equal the trainer's (``sync/checksum_match``).

The *effective history* of a step is what the last run that trained it logged:
a resumed run trains again every step after its checkpoint.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

from trinity.monitor import load_records

REPO = Path(__file__).resolve().parents[2]
TRAINED = re.compile(r"train step (\d+): \d+ experiences of groups (.+?), model versions \[")
GROUP = re.compile(r"^[^/]+/e(\d+)/t(\d+)/s\d+$")
RESUMED = re.compile(r"resume[sd] from \S+/step-(\d+) at step (\d+)")


def trained_groups(text: str) -> dict[int, list[tuple[int, int]]]:
    """Return the ``(epoch, task index)`` of every group each training step of one run's log trained, by step."""
    steps: dict[int, list[tuple[int, int]]] = {}
    for step, groups in TRAINED.findall(text):
        assert int(step) not in steps, f"step {step} logged twice in one run"
        found = [GROUP.match(group) for group in groups.split()]
        assert all(found), f"unexpected group ids: {groups}"
        steps[int(step)] = [(int(m.group(1)), int(m.group(2))) for m in found if m]
    return steps


def effective_groups(logs: Sequence[str]) -> dict[int, list[tuple[int, int]]]:
    """Return each step's groups as the last run that trained the step logged them."""
    history: dict[int, list[tuple[int, int]]] = {}
    for text in logs:
        history.update(trained_groups(text))
    return dict(sorted(history.items()))


def resume_problems(logs: Sequence[str]) -> list[str]:
    """Return how runs strayed from "train the steps right after the loaded checkpoint, one by one"."""
    problems = []
    for number, text in enumerate(logs, 1):
        steps = list(trained_groups(text))
        resumed = RESUMED.search(text)
        start = int(resumed.group(2)) + 1 if resumed else 1
        if steps and steps != list(range(start, start + len(steps))):
            problems.append(f"run {number} resumed at step {start - 1} but trained steps {steps}")
    return problems


def steps_lost(run_dir: Path, total: int) -> int:
    """Return how many of the steps 1..total no run trained (by the metrics reader's view of the run)."""
    trained = {r.step for r in load_records(run_dir / "metrics.jsonl") if r.phase == "train"}
    return len(set(range(1, total + 1)) - trained)


def step_problems(run_dir: Path, total: int, *, checksums: bool) -> list[str]:
    """Return how the run's train records and last checkpoint differ from "steps 1..total, once each"."""
    problems = []
    train = [r for r in load_records(run_dir / "metrics.jsonl") if r.phase == "train"]
    if [r.step for r in train] != list(range(1, total + 1)):
        problems.append(f"train steps in metrics.jsonl: {[r.step for r in train]}, expected 1..{total}")
    state_file = run_dir / "checkpoints" / f"step-{total}" / "trainer_state.json"
    if not state_file.is_file():
        problems.append(f"no final checkpoint {state_file}")
    elif json.loads(state_file.read_text())["step"] != total:
        problems.append(f"{state_file}: step {json.loads(state_file.read_text())['step']}, expected {total}")
    if checksums:
        unequal = [r.step for r in train if r.metrics.get("sync/checksum_match") != 1.0]
        if unequal:
            problems.append(f"engine weights differ from the trainer's after the sync of steps {unequal}")
    return problems


def group_problems(run_dir: Path, logs: Sequence[str], groups: int, group_size: int) -> list[str]:
    """Return how the trained groups and the SQLite buffer differ from "each of ``groups`` groups exactly once"."""
    problems = []
    history = effective_groups(logs)
    trained = sorted(g for step_groups in history.values() for g in step_groups)
    expected = [(0, index) for index in range(groups)]
    if trained != expected:
        twice = sorted({g for g in trained if trained.count(g) > 1})
        lost = sorted(set(expected) - set(trained))
        problems.append(f"groups trained twice: {twice}, never trained: {lost}")
    with closing(sqlite3.connect(run_dir / "buffer" / "experience.sqlite")) as db:
        rows = db.execute("SELECT group_id, COUNT(*), MIN(consumed) FROM experiences GROUP BY group_id").fetchall()
    if len(rows) != groups:
        problems.append(f"the buffer holds {len(rows)} groups, expected {groups}")
    wrong = [(group, count, consumed) for group, count, consumed in rows if count != group_size or not consumed]
    if wrong:
        problems.append(f"buffer groups stored more or less than once, or never read: {wrong[:5]}")
    return problems


def replay_problems(run_dir: Path, logs: Sequence[str], groups: int, limit: int) -> list[str]:
    """Return how the effective history and the replay pool differ from "each group 1..``limit`` times"."""
    problems = []
    uses: dict[tuple[int, int], int] = {}
    for step_groups in effective_groups(logs).values():
        for group in step_groups:
            uses[group] = uses.get(group, 0) + 1
    expected = {(0, index) for index in range(groups)}
    if set(uses) != expected:
        never, unexpected = sorted(expected - set(uses)), sorted(set(uses) - expected)
        problems.append(f"groups never trained: {never}, unexpected: {unexpected}")
    over = {group: count for group, count in uses.items() if count > limit}
    if over:
        problems.append(f"groups trained more often than the replay limit of {limit}: {over}")
    with closing(sqlite3.connect(run_dir / "buffer" / "experience.replay.sqlite")) as db:
        rows = db.execute("SELECT g.group_id, COUNT(u.id) FROM replay_groups g JOIN replay_uses u ON u.entry = g.id "
                          "GROUP BY g.group_id").fetchall()
    recorded = {}
    for group_id, count in rows:
        found = GROUP.match(group_id)
        if found:
            recorded[(int(found.group(1)), int(found.group(2)))] = int(count)
    if recorded != uses:
        problems.append(f"the replay pool records uses {recorded}, the effective history {uses}")
    return problems


def checkpoint_problems(run_dir: Path) -> list[str]:
    """Return every checkpoint that ``trinity checkpoints verify --json`` does not find intact."""
    done = subprocess.run(
        [sys.executable, "-m", "trinity.cli.main", "checkpoints", "verify", str(run_dir), "--json"],
        check=False,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    if done.returncode != 0:
        return [f"trinity checkpoints verify exited {done.returncode}: {done.stdout[-2000:]}{done.stderr[-2000:]}"]
    report = json.loads(done.stdout)
    return [
        f"checkpoint {row['path']}: {row['status']} ({row['reason']})"
        for row in report["checkpoints"]
        if Path(row["path"]).name.startswith("step-") and row["status"] != "ok"
    ]
