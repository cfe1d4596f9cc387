"""The two threads of mode both's loop, with stand-in parts: who waits for whom, and how a failure ends both.

The tasks, scheduler, pipeline, strategy, trainer and synchronizer are small
stand-ins that record what happened in which order and with which weights
version; the real parts run in ``test_both_loop.py``.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

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

    # tasks
    def next_batch_with_epochs(self) -> list[int] | None:
        if self.position.step >= self.batches:
            return None
        self.position.step += 1
        return [self.position.step]

    def state_dict(self) -> dict[str, int]:
        return {"step": self.position.step}

    # scheduler
    def run(self, tasks: list[int]) -> Any:
        if tasks[0] == self.fail_explore_at:
            raise RuntimeError(f"rollout of step {tasks[0]} failed")
        time.sleep(0.02)
        self.events.append(("explore", tasks[0], self.engine_version))
        if tasks[0] in self.all_fail_at:  # the batch's only group failed: the scheduler dropped it
            return SimpleNamespace(experiences=[], failures=[], metrics={"dropped_groups": 1})
        exp = SimpleNamespace(group_id=f"g{tasks[0]}", model_version=self.engine_version)
        return SimpleNamespace(experiences=[exp], failures=[], metrics={})

    # pipeline
    def write_step(self, experiences: list[Any], *, batch: int, dropped_groups: int) -> list[Any]:
        self.stored.extend(experiences)
        return experiences

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


def _loop(parts: Parts, monkeypatch: pytest.MonkeyPatch, **sync: Any) -> BothLoop:
    monkeypatch.setattr(both_loop, "training_tasks", lambda session, batch, step: batch)
    monkeypatch.setattr(both_loop, "explore_metrics", lambda result, experiences: {})
    settings = {"interval": 1, "offset": 0, "style": "fixed", **sync}
    plan = SimpleNamespace(
        sync=SimpleNamespace(verify_checksums=False, **settings),
        buffer=SimpleNamespace(experience=None, eval_tasksets=[]),
        explorer=SimpleNamespace(eval_on_startup=False, eval_interval=0),
        trainer=SimpleNamespace(total_steps=None, save_interval=0, save_hf=None),
    )
    trainer = SimpleNamespace(step=0, train_step=parts.train_step, save_checkpoint=parts.save_checkpoint)
    trainer_proxy = _Live(parts, trainer)
    policy = SyncPolicy(interval=settings["interval"], offset=settings["offset"])
    return BothLoop(SimpleNamespace(plan=plan), tasks=parts, trainer=trainer_proxy, engines=[], pipeline=parts,
                    strategy=parts, sync=SimpleNamespace(policy=policy, sync=parts.sync), scheduler=parts,
                    monitor=SimpleNamespace(log=lambda *a, **k: None))


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

    def half_dropped(tasks: list[int]) -> Any:
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
