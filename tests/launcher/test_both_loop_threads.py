"""The two threads of mode both's loop, with stand-in parts: who waits for whom, and how a failure ends both.

The tasks, scheduler, pipeline, strategy, trainer and synchronizer are small
stand-ins that record what happened in which order and with which weights
version; the real parts run in ``test_both_loop.py``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from trinity.buffer.pipeline import ExperiencePipeline
from trinity.buffer.sampling import SampleStrategy, StalenessStrategy
from trinity.buffer.storage.base import ExperienceStorage
from trinity.buffer.storage.sqlite import SQLiteStorage
from trinity.launcher import both_loop
from trinity.launcher.both_loop import BothLoop
from trinity.synchronizer.policy import SyncPolicy


class Parts:
    """Stand-ins sharing one event log; ``engine_version`` is what the engines hold."""

    def __init__(self, batches: int, *, fail_explore_at: int = 0, interrupt_train_at: int = 0,
                 all_fail_at: tuple[int, ...] = ()) -> None:
        self.events: list[tuple[str, int, int]] = []
        self.engine_version = 0
        self.step = 0
        self.batches = batches
        self.fail_explore_at = fail_explore_at
        self.interrupt_train_at = interrupt_train_at
        self.all_fail_at = all_fail_at
        self.max_staleness: int | None = None
        self.stored: list[Any] = []
        self.stats: dict[str, float] = {}
        self.batch_size = 1
        self.position = SimpleNamespace(step=0)
        self.fed: list[int] = []  # experiences each step told the task selector about
        self.flat = 0  # experiences the group filter dropped (the pipeline's count)

    # tasks
    def next_batch_with_epochs(self) -> list[int] | None:
        if self.position.step >= self.batches:
            return None
        self.position.step += 1
        return [self.position.step]

    def state_dict(self) -> dict[str, int]:
        return {"step": self.position.step}

    def feedback(self, experiences: list[Any]) -> None:
        self.fed.append(len(experiences))

    # scheduler
    def run(self, tasks: list[int], **options: Any) -> Any:
        if tasks[0] == self.fail_explore_at:
            raise RuntimeError(f"rollout of step {tasks[0]} failed")
        time.sleep(0.02)
        self.events.append(("explore", tasks[0], self.engine_version))
        if tasks[0] in self.all_fail_at:  # the batch's only group failed: the scheduler dropped it
            return SimpleNamespace(experiences=[], failures=[], metrics={"dropped_groups": 1}, unserved=[])
        exp = SimpleNamespace(group_id=f"g{tasks[0]}", model_version=self.engine_version)
        return SimpleNamespace(experiences=[exp], failures=[], metrics={}, unserved=[])

    # pipeline
    def write_step(self, experiences: list[Any], *, batch: int, dropped_groups: int) -> list[Any]:
        self.stored.extend(experiences)
        return experiences

    def step_metrics(self) -> dict[str, float]:
        return {}

    def operator_dropped(self) -> int:
        return 0

    def group_filter_dropped(self) -> int:
        return self.flat

    # strategy
    def sample(self, *, trainer_version: int, timeout: Any, groups: int) -> list[Any]:
        if self.max_staleness is None:
            taken, self.stored = self.stored[:groups], self.stored[groups:]
            return taken
        # as staleness_control: drop groups older than the bound, and read on (waiting) for as many fresh ones
        taken, deadline = [], time.monotonic() + 10.0
        while len(taken) < groups:
            if not self.stored:
                assert time.monotonic() < deadline, "the strategy waited for groups the explorer never rolled out"
                time.sleep(0.005)
                continue
            exp = self.stored.pop(0)
            if trainer_version - exp.model_version > self.max_staleness:
                self.stats["stale_dropped_groups"] = self.stats.get("stale_dropped_groups", 0) + 1
            else:
                taken.append(exp)
        return taken

    # trainer
    def train_step(self, experiences: list[Any], checkpoint_extra: Any) -> dict[str, float]:
        if self.step + 1 == self.interrupt_train_at:
            raise KeyboardInterrupt
        time.sleep(0.02)
        self.step += 1
        self.events.append(("train", self.step, experiences[0].model_version))
        return {}

    def save_checkpoint(self, extra: Any, final: bool = False) -> None:
        self.events.append(("save", self.step, -1))

    # synchronizer
    def sync(self, version: int) -> Any:
        self.engine_version = version
        self.events.append(("sync", version, version))
        return SimpleNamespace(metrics=dict, seconds=0.0)


def _loop(parts: Parts, monkeypatch: pytest.MonkeyPatch, *, strategy: Any = None, pipeline: Any = None,
          storage: Any = None, **sync: Any) -> BothLoop:
    monkeypatch.setattr(both_loop, "training_tasks", lambda session, batch, step: batch)
    monkeypatch.setattr(both_loop, "explore_metrics", lambda result, experiences: {})
    settings = {"interval": 1, "offset": 0, "style": "fixed", **sync}
    plan = SimpleNamespace(
        sync=SimpleNamespace(verify_checksums=False, **settings),
        buffer=SimpleNamespace(experience=None, eval_tasksets=[]),
        explorer=SimpleNamespace(eval_on_startup=False, eval_interval=0, rollout=SimpleNamespace(sleep_mode=False)),
        trainer=SimpleNamespace(total_steps=None, save_interval=0, save_hf=None),
    )
    trainer = SimpleNamespace(step=0, train_step=parts.train_step, save_checkpoint=parts.save_checkpoint)
    trainer_proxy = _Live(parts, trainer)
    policy = SyncPolicy(interval=settings["interval"], offset=settings["offset"])
    return BothLoop(SimpleNamespace(plan=plan), tasks=parts, trainer=trainer_proxy, engines=[],
                    pipeline=pipeline or parts, strategy=strategy or parts,
                    sync=SimpleNamespace(policy=policy, sync=parts.sync, publish_target=lambda version: None),
                    scheduler=parts,
                    monitor=SimpleNamespace(log=lambda *a, **k: None), storage=storage)


class _Live:
    """A trainer whose ``step`` is the stand-ins' live step count."""

    def __init__(self, parts: Parts, trainer: Any) -> None:
        self._parts, self._trainer = parts, trainer

    def __getattr__(self, name: str) -> Any:
        return self._parts.step if name == "step" else getattr(self._trainer, name)


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate()}


def test_offset_zero_alternates_strictly(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = Parts(3)
    _loop(parts, monkeypatch).run(resumed=False)
    assert parts.events == [("explore", 1, 0), ("train", 1, 0), ("sync", 1, 1), ("explore", 2, 1), ("train", 2, 1),
                            ("sync", 2, 2), ("explore", 3, 2), ("train", 3, 2), ("sync", 3, 3), ("save", 3, -1)]
    assert len(parts.fed) == 3 and all(parts.fed)  # each step's experiences reached the task selector


def test_offset_one_never_rolls_out_on_weights_older_than_one_step(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = Parts(6)
    _loop(parts, monkeypatch, offset=1).run(resumed=False)
    explored = [(step, version) for kind, step, version in parts.events if kind == "explore"]
    assert explored[:2] == [(1, 0), (2, 0)]
    assert all(step - 2 <= version <= step - 1 for step, version in explored[2:])
    assert [e for e in parts.events if e[0] == "train"][-1][1] == 6


def test_explorer_driven_syncs_when_the_explorer_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = Parts(6)
    _loop(parts, monkeypatch, style="explorer_driven", interval=2, offset=1).run(resumed=False)
    syncs = [i for i, e in enumerate(parts.events) if e[0] == "sync"]
    assert syncs, "the explorer never asked for a sync"
    for index in syncs:  # each sync follows an even explorer step: the explorer asked after sync_interval steps
        last_explore = [e for e in parts.events[:index] if e[0] == "explore"][-1]
        assert last_explore[1] % 2 == 0
    assert [e for e in parts.events if e[0] == "train"][-1][1] == 6


def test_an_explorer_failure_ends_the_run_with_that_error(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = Parts(5, fail_explore_at=3)
    with pytest.raises(RuntimeError, match="rollout of step 3 failed"):
        _loop(parts, monkeypatch, offset=1).run(resumed=False)
    assert "trinity-explorer" not in _threads()
    assert ("save", 2, -1) not in parts.events


def test_ctrl_c_in_the_trainer_stops_the_explorer_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = Parts(50, interrupt_train_at=3)
    with pytest.raises(KeyboardInterrupt):
        _loop(parts, monkeypatch, offset=1).run(resumed=False)
    assert "trinity-explorer" not in _threads()
    assert max(step for kind, step, _ in parts.events if kind == "explore") <= 4


def test_a_batch_whose_groups_all_failed_is_skipped_and_the_run_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = Parts(4, all_fail_at=(2,))
    loop = _loop(parts, monkeypatch)
    loop.run(resumed=False)
    # explorer step 2 stored nothing: no training step for it, and step 3 still rolls out (on version 1)
    assert parts.events == [("explore", 1, 0), ("train", 1, 0), ("sync", 1, 1), ("explore", 2, 1), ("explore", 3, 1),
                            ("train", 2, 1), ("sync", 2, 2), ("explore", 4, 2), ("train", 3, 2), ("sync", 3, 3),
                            ("save", 3, -1)]
    assert loop.skipped_batches == 1


def test_a_training_step_takes_the_complete_groups_of_its_batch_and_never_waits_for_dropped_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parts = Parts(3)
    parts.batch_size = 2  # two groups per training step; each explorer step stores one and drops one
    real_run = parts.run

    def half_dropped(tasks: list[int], **options: Any) -> Any:
        result = real_run(tasks)
        result.metrics["dropped_groups"] = 1
        return result

    monkeypatch.setattr(parts, "run", half_dropped)
    started = time.monotonic()
    _loop(parts, monkeypatch).run(resumed=False)
    assert time.monotonic() - started < 5.0
    assert [e for e in parts.events if e[0] != "save"] == [
        ("explore", 1, 0), ("train", 1, 0), ("sync", 1, 1), ("explore", 2, 1), ("train", 2, 1), ("sync", 2, 2),
        ("explore", 3, 2), ("train", 3, 2), ("sync", 3, 3)]


def test_stale_drops_make_the_explorer_roll_out_more_and_never_stall_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = Parts(8)
    parts.max_staleness = 0
    started = time.monotonic()
    loop = _loop(parts, monkeypatch, offset=1)
    loop.run(resumed=False)
    assert time.monotonic() - started < 8.0
    assert parts.stats["stale_dropped_groups"] > 0
    trained = [e for e in parts.events if e[0] == "train"]
    assert trained and all(version == step - 1 for _, step, version in trained), trained
    assert len(trained) + parts.stats["stale_dropped_groups"] == 8


# -- checkpoints: a real SQLite buffer, sample strategy and pipeline behind the stand-in explorer and trainer --


class BufferedParts(Parts):
    """Stand-ins whose explorer batches hold ``groups`` tasks of two real experiences each, stored in SQLite.

    ``ahead`` maps a training step to the explorer batches that must be
    stored before the step reads its batch, so a checkpoint taken there is
    known to have batches explored ahead of it. Each step records the groups
    it trained and the checkpoint extra it was given.
    """

    def __init__(self, batches: int, *, groups: int = 1, step: int = 0, ahead: dict[int, int] | None = None,
                 stale_batches: tuple[int, ...] = (), **kwargs: Any) -> None:
        super().__init__(batches, **kwargs)
        self.groups = groups
        self.stale_batches = stale_batches
        self.step = self.engine_version = step
        self.ahead = ahead or {}
        self.explored_batches: list[int] = []
        self.trained: dict[int, list[str]] = {}
        self.extras: dict[int, dict[str, Any]] = {}

    def next_batch_with_epochs(self) -> Any:
        if self.position.step >= self.batches:
            return None
        self.position.step += 1
        return [(0, (self.position.step - 1) * self.groups + i) for i in range(self.groups)]

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position.step = int(state["step"])

    def run(self, tasks: list[Any], **options: Any) -> Any:
        from tests.buffer.factories import make_group

        batch = tasks[0][1] // self.groups + 1
        self.explored_batches.append(batch)
        self.events.append(("explore", batch, self.engine_version))
        version = 0 if batch in self.stale_batches else self.engine_version  # as if rolled out long ago
        experiences = [e for _, task in tasks for e in make_group(f"t{task}", 2, version=version)]
        return SimpleNamespace(experiences=experiences, failures=[], metrics={}, unserved=[])

    def train_step(self, experiences: list[Any], checkpoint_extra: Any) -> dict[str, float]:
        if self.step + 1 == self.interrupt_train_at:
            raise KeyboardInterrupt
        self.step += 1
        self.trained[self.step] = list(dict.fromkeys(e.group_id for e in experiences))
        self.extras[self.step] = json.loads(json.dumps(checkpoint_extra()))  # what a checkpoint file would hold
        self.events.append(("train", self.step, min(e.model_version for e in experiences)))
        return {}


class WaitingStrategy(SampleStrategy):
    """The FIFO strategy, reading a step's batch only once the explorer batches ``parts.ahead`` asks for are stored."""

    def __init__(self, parts: BufferedParts, storage: SQLiteStorage, groups: int) -> None:
        super().__init__(storage, batch_size=groups, group_size=2)
        self.parts = parts

    def sample(self, trainer_version: int, timeout: float | None = None, groups: int | None = None) -> list[Any]:
        rows = self.parts.ahead.get(trainer_version + 1, 0) * self.parts.groups * 2
        deadline = time.monotonic() + 10
        while self.storage.end_position()["last_id"] < rows and time.monotonic() < deadline:
            time.sleep(0.01)
        return super().sample(trainer_version, timeout, groups)


def _buffered_loop(parts: BufferedParts, path: Path, monkeypatch: pytest.MonkeyPatch, *, per_step: int,
                   **sync: Any) -> BothLoop:
    storage = SQLiteStorage(path)
    strategy = WaitingStrategy(parts, storage, per_step)
    return _loop(parts, monkeypatch, strategy=strategy, pipeline=ExperiencePipeline(storage=storage),
                 storage=storage, **sync)


def test_a_checkpoint_at_offset_one_keeps_the_batch_explored_ahead(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    parts = BufferedParts(4, ahead={2: 3})
    _buffered_loop(parts, tmp_path / "buf.sqlite", monkeypatch, per_step=1, offset=1).run(resumed=False)
    extra = parts.extras[2]
    # step 2 read batch 2 (rows 3-4); batch 3 (rows 5-6) was stored ahead of it and is not trained yet
    assert extra["tasks"] == {"step": 3}
    assert extra["written"] == {"experience": {"last_id": 6}}
    assert extra["strategy"]["storage"] == {"read_offset": 4} and extra["strategy"]["held"] == []
    loop = extra["loop"]
    counters = ("explored_places", "taken_places", "explored_groups", "taken_groups")
    assert [loop[key] for key in counters] == [3, 2, 3, 2]
    assert loop["untaken"] == [[[2], 0]]  # one stored group of two experiences, none dropped
    assert [places for places, _ in loop["explored"]] == [2, 3]  # batch 1 was released by step 1's sync
    assert loop["consumed"] == [1, {"step": 1}]


def _resume(parts: BufferedParts, extra: dict[str, Any], path: Path, monkeypatch: pytest.MonkeyPatch,
            **settings: Any) -> BufferedParts:
    """Run a fresh loop (fresh strategy on the same file) from ``extra`` to the end; return its stand-ins."""
    resumed = BufferedParts(parts.batches, groups=parts.groups, step=settings.pop("step"))
    loop = _buffered_loop(resumed, path, monkeypatch, **settings)
    loop.restore(extra)
    loop.run(resumed=True)
    return resumed


# whole batches: step 2's checkpoint has batch 3 stored ahead; half batches (two groups per explorer batch,
# one per step): step 3's checkpoint falls in the middle of batch 2
@pytest.mark.parametrize(("groups", "saved", "ahead"), [(1, 2, {2: 3}), (2, 3, {})],
                         ids=["whole-batches", "half-batches"])
def test_resuming_after_a_kill_trains_every_group_once_and_explores_every_batch_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, groups: int, saved: int, ahead: dict[int, int],
) -> None:
    path = tmp_path / "buf.sqlite"
    per_step = 1
    total = 5 * groups // per_step
    first = BufferedParts(5, groups=groups, ahead=ahead, interrupt_train_at=saved + 2)
    with pytest.raises(KeyboardInterrupt):  # the kill: steps after the checkpoint are lost with it
        _buffered_loop(first, path, monkeypatch, per_step=per_step, offset=1).run(resumed=False)
    extra = first.extras[saved]
    assert SQLiteStorage(path).end_position()["last_id"] > extra["written"]["experience"]["last_id"], \
        "the first run stored nothing after the checkpoint: the test would not see rows dropped"

    second = _resume(first, extra, path, monkeypatch, step=saved, per_step=per_step, offset=1)
    assert sorted(second.trained) == list(range(saved + 1, total + 1))
    trained = [g for step in range(1, saved + 1) for g in first.trained[step]]
    trained += [g for step in sorted(second.trained) for g in second.trained[step]]
    assert trained == [f"t{i}" for i in range(5 * groups)], "a group trained twice, skipped or out of order"
    explored_before = extra["tasks"]["step"]
    assert second.explored_batches == list(range(explored_before + 1, 6)), "a stored batch was explored again"
    assert SQLiteStorage(path).total() == 5 * groups * 2, "rows stored after the checkpoint were not dropped"


def test_with_a_queue_buffer_the_checkpoint_resumes_after_the_last_batch_wholly_trained(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    parts = BufferedParts(3, groups=2)
    strategy = SampleStrategy(_ListStorage(), batch_size=1, group_size=2)
    pipeline = ExperiencePipeline(storage=strategy.storage)
    _loop(parts, monkeypatch, strategy=strategy, pipeline=pipeline, offset=1).run(resumed=False)
    # step 3 read the first half of batch 2: a queue loses the other half, so batch 2 is explored again
    assert parts.extras[3] == {"tasks": {"step": 1}, "written": {}, "retrained_places": 1}
    assert parts.extras[4] == {"tasks": {"step": 2}, "written": {}, "retrained_places": 0}
    again = BufferedParts(3, groups=2)
    loop = _loop(again, monkeypatch, strategy=SampleStrategy(_ListStorage(), batch_size=1, group_size=2))
    with caplog.at_level(logging.WARNING, logger="trinity.launcher"):
        loop.restore(parts.extras[3])
    assert again.position.step == 1
    assert "1 group(s) consumed before it are explored and trained again" in caplog.text


def test_a_run_whose_last_groups_are_dropped_as_stale_finishes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = BufferedParts(5, stale_batches=(5,))
    storage = SQLiteStorage(tmp_path / "buf.sqlite")
    strategy = StalenessStrategy(storage, batch_size=1, group_size=2, max_staleness=1)
    loop = _loop(parts, monkeypatch, strategy=strategy, pipeline=ExperiencePipeline(storage=storage),
                 storage=storage)
    runner = threading.Thread(target=loop.run, args=(False,), daemon=True)
    runner.start()
    runner.join(10)
    assert not runner.is_alive(), "the trainer waits for groups that will never come"
    assert sorted(parts.trained) == [1, 2, 3, 4] and strategy.stats["stale_dropped_groups"] == 1
    assert parts.events[-1] == ("save", 4, -1)


class _ListStorage(ExperienceStorage):
    """An in-memory storage that does not outlive the run, as the Ray queue (which needs a cluster)."""

    storage_type = "list"

    def __init__(self) -> None:
        super().__init__("experience")
        self.rows: list[Any] = []

    @classmethod
    def from_config(cls, config: Any, *, name: str, run_dir: Any) -> _ListStorage:
        return cls()

    def put(self, experiences: Any, timeout: float | None = None) -> None:
        self.rows.extend(experiences)

    def get(self, n: int, timeout: float | None = None, *, at_least: int | None = None) -> list[Any]:
        deadline = time.monotonic() + 5
        while len(self.rows) < (at_least or n) and time.monotonic() < deadline:
            time.sleep(0.01)
        taken, self.rows = self.rows[:n], self.rows[n:]
        return taken

    def close(self) -> None:
        return None

    def size(self) -> int:
        return len(self.rows)


def test_a_fresh_run_that_trains_no_step_fails_instead_of_ending_well(monkeypatch: pytest.MonkeyPatch) -> None:
    from trinity.launcher.steps import NothingTrainedError

    parts = Parts(3, all_fail_at=(1, 2, 3))  # every batch's groups dropped: every training batch skipped
    parts.flat = 12
    with pytest.raises(NothingTrainedError, match=r"the run trained no step from its 3 batch\(es\): 0 group\(s\) "
                                                  r"stored, 3 training batch\(es\) skipped.*, 12 experience\(s\) "
                                                  r"dropped in groups whose rewards did not spread"):
        _loop(parts, monkeypatch).run(resumed=False)
    assert not [e for e in parts.events if e[0] == "train"]
