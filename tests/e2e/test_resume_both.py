"""End to end: mode both with the explorer a batch ahead (``sync_offset: 1``) and a SQLite buffer, SIGKILLed
after a checkpoint and run again with the same command: every step is trained once, every group once.

Which groups each step trained is read from the run's log (``trinity -v``: one line per training step).
"""

from __future__ import annotations

import json
import re
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_run_both import job_config, kill_when, records, run_cli
from trinity.trainer.checkpoint import CheckpointDir

BATCHES = 5  # buffer.total_steps: explorer batches of 2 tasks, 4 rollouts each
TRAINED = re.compile(r"train step (\d+): \d+ experiences of groups (.+?), model versions \[")
GROUP = re.compile(r"^[^/]+/e(\d+)/t(\d+)/s\d+$")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trinity.common.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny")


def trained_groups(text: str) -> dict[int, list[tuple[int, int]]]:
    """Return the ``(epoch, task index)`` of every group each training step logged, by step."""
    steps: dict[int, list[tuple[int, int]]] = {}
    for step, groups in TRAINED.findall(text):
        assert int(step) not in steps, f"step {step} logged twice in one run"
        found = [GROUP.match(group) for group in groups.split()]
        assert all(found), groups
        steps[int(step)] = [(int(m.group(1)), int(m.group(2))) for m in found if m]
    return steps


@pytest.mark.parametrize(("train_batch_size", "save_interval"), [(8, 2), (4, 3)],
                         ids=["whole-batches", "half-batches"])
def test_killed_async_run_resumes_without_repeating_or_skipping_a_group(
    tmp_path: Path, tiny_model: Path, train_batch_size: int, save_interval: int,
) -> None:
    raw = job_config(tmp_path, tiny_model, **{
        "buffer.total_steps": BATCHES, "buffer.train_batch_size": train_batch_size,
        "trainer.save_interval": save_interval, "cluster.gpu_per_node": 2,
        "synchronizer.sync_offset": 1, "synchronizer.verify_checksums": False,
        "buffer.explorer_input.eval_tasksets": [],
        "buffer.trainer_input.experience_buffer": {"name": "experience", "storage_type": "sql",
                                                   "max_read_timeout": 120.0},
    })
    total = BATCHES * 8 // train_batch_size  # training steps: 8 rows per explorer batch
    config_file = tmp_path / "job.yaml"
    config_file.write_text(yaml.safe_dump(raw))
    run_dir = tmp_path / "ckpt" / "e2e" / "run"
    log = tmp_path / "run.log"

    def checkpoint_passed() -> bool:
        return (run_dir / "checkpoints" / f"step-{save_interval}").is_dir() and (
            run_dir / "metrics.jsonl").exists() and any(
            r["phase"] == "train" and r["step"] == save_interval + 1 for r in records(run_dir))

    kill_when(run_cli(config_file, log, verbose=True), log, checkpoint_passed)
    latest = CheckpointDir(run_dir / "checkpoints").latest()
    assert latest is not None
    saved = int(latest.name.removeprefix("step-"))
    assert saved < total
    extra = json.loads((latest / "trainer_state.json").read_text())["extra"]
    explored = extra["tasks"]["step"]  # explorer batches stored when the checkpoint was saved
    assert extra["loop"]["taken_places"] == saved * train_batch_size // 4
    assert saved * train_batch_size // 8 <= explored <= BATCHES
    first_log = log.read_text()

    before = len(records(run_dir))
    second = run_cli(config_file, log, verbose=True)
    assert second.wait(300) == 0, log.read_text()[-3000:]
    resumed = records(run_dir)[before:]
    assert [r["step"] for r in resumed if r["phase"] == "train"] == list(range(saved + 1, total + 1))
    assert [r["step"] for r in resumed if r["phase"] == "explore"] == list(range(explored + 1, BATCHES + 1)), \
        "the resumed run explores exactly the batches not stored before the checkpoint"

    before_kill, after = trained_groups(first_log), trained_groups(log.read_text()[len(first_log):])
    assert sorted(after) == list(range(saved + 1, total + 1))
    groups = [g for step in range(1, saved + 1) for g in before_kill[step]]
    groups += [g for step in sorted(after) for g in after[step]]
    assert sorted(groups) == [(0, index) for index in range(BATCHES * 2)], "a group was trained twice or skipped"
    with closing(sqlite3.connect(run_dir / "buffer" / "experience.sqlite")) as db:
        rows = db.execute("SELECT group_id, COUNT(*), MIN(consumed) FROM experiences GROUP BY group_id").fetchall()
    assert len(rows) == BATCHES * 2 and all(count == 4 and consumed for _, count, consumed in rows), \
        "the buffer holds a group twice (explored again) or one never read"
