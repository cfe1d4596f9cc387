"""Experience replay in a real mode-both run: the trainer reuses groups by priority, within their use limit.

Real Ray, two trainer ranks and an engine (the tiny model), a SQLite buffer,
upstream's ``explorer_driven`` sync style, which lets the trainer take steps
of replayed groups while the explorer rolls the next batch out.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from tests.e2e.test_run_both import job_config, records
from trinity.common.config import parse_config
from trinity.launcher import run_plan
from trinity.planner.run import resolve_run

TRAINED = re.compile(r"train step (\d+): \d+ experiences of groups (.+?), model versions \[")
LIMIT = 2


def pool_uses(path: Path) -> dict[str, int]:
    """Return the uses the replay pool's file records, by group id (read with plain sqlite3)."""
    with closing(sqlite3.connect(path)) as db:
        return dict(db.execute(
            "SELECT g.group_id, COUNT(u.id) FROM replay_groups g JOIN replay_uses u ON u.entry = g.id "
            "GROUP BY g.group_id").fetchall())


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trinity.common.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny")


def test_replay_reuses_groups_by_priority_within_their_limit(
    tmp_path: Path, tiny_model: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raw = job_config(
        tmp_path,
        tiny_model,
        **{
            "buffer.total_steps": 4,
            "buffer.explorer_input.eval_tasksets": [],
            "explorer.eval_on_startup": False,
            "synchronizer.sync_style": "explorer_driven",
            "synchronizer.verify_checksums": False,
            "buffer.trainer_input.experience_buffer": {
                "name": "experience",
                "storage_type": "sql",
                "replay_buffer": {
                    "enable": True,
                    "priority_fn": "decay_limit_randomization",
                    "reuse_cooldown_time": 0,
                    "priority_fn_args": {"use_count_limit": LIMIT},
                },
            },
        },
    )
    caplog.set_level(logging.INFO, logger="trinity.launcher")
    assert run_plan(resolve_run(parse_config(raw))) == 0

    run_dir = tmp_path / "ckpt" / "e2e" / "run"
    trained: dict[int, list[str]] = {int(s): g.split() for s, g in TRAINED.findall(caplog.text)}
    assert sorted(trained) == list(range(1, len(trained) + 1)) and len(trained) >= 4
    uses: dict[str, int] = {}
    for groups in trained.values():
        for group in groups:
            uses[group] = uses.get(group, 0) + 1
    explored = 4 * 2  # explorer steps x tasks per step
    assert len(uses) == explored, f"every explored group is trained: {uses}"
    assert max(uses.values()) <= LIMIT, f"a group trained more often than use_count_limit allows: {uses}"

    # the pool's file records exactly the uses the trainer trained
    assert pool_uses(run_dir / "buffer" / "experience.replay.sqlite") == uses

    train = [r for r in records(run_dir) if r["phase"] == "train"]
    assert [r["step"] for r in train] == sorted(trained)
    assert all(r["metrics"]["replay/batch_max_use_count"] <= LIMIT for r in train)
    reused = sum(r["metrics"]["replay/batch_reused_groups"] for r in train)
    assert reused == sum(uses.values()) - len(uses)  # a use beyond the first is a reuse
    # the explorer waits for a sync after each of its steps: the trainer, with no fresh batch yet, replays
    assert reused > 0
    last = train[-1]["metrics"]
    assert last["replay/reused_groups"] == reused
    assert last["replay/replay_only_batches"] == len(trained) - 4  # steps beyond the explorer's 4


def test_a_resumed_run_keeps_the_replay_pool_of_its_checkpoint_with_a_queue_buffer(
    tmp_path: Path, tiny_model: Path
) -> None:
    """A queue buffer dies with the run, the replay pool does not: a resumed run continues with the pool it saved."""
    def config(steps: int) -> dict:
        return job_config(
            tmp_path,
            tiny_model,
            **{
                "buffer.total_steps": steps,
                "trainer.save_interval": 2,
                "buffer.explorer_input.eval_tasksets": [],
                "explorer.eval_on_startup": False,
                "synchronizer.verify_checksums": False,
                "buffer.trainer_input.experience_buffer": {
                    "name": "experience",
                    "storage_type": "queue",
                    "replay_buffer": {"enable": True, "reuse_cooldown_time": 0},
                },
            },
        )

    pool_file = tmp_path / "ckpt" / "e2e" / "run" / "buffer" / "experience.replay.sqlite"
    assert run_plan(resolve_run(parse_config(config(2)))) == 0
    first = pool_uses(pool_file)
    assert len(first) == 4 and set(first.values()) == {1}  # fresh groups rank first: none reused yet
    assert run_plan(resolve_run(parse_config(config(4)))) == 0  # resumes from step 2's checkpoint
    second = pool_uses(pool_file)
    assert {g: second.get(g) for g in first} == first, "the resumed run started with an empty pool"
    assert len(second) == 8
