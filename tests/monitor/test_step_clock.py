"""The step clock splits a step's wall time among overlapping spans, counting every instant once."""

from __future__ import annotations

import threading

import pytest

from trinity.monitor.step_clock import EXPLORE, SAVE, SYNC, TRAIN, StepClock


class FakeTime:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_serial_step_splits_into_its_spans_and_the_rest() -> None:
    t = FakeTime()
    clock = StepClock(now=t)
    clock.add(EXPLORE, 100.0, 103.0)
    clock.add(TRAIN, 103.5, 105.0)
    clock.add(SAVE, 105.0, 105.5)
    clock.add(SYNC, 105.5, 106.0)
    t.now = 106.25
    split = clock.close_step()
    assert split == {
        "time/step_s": 6.25,
        "time/train_s": 1.5,
        "time/save_s": 0.5,
        "time/sync_s": 0.5,
        "time/explore_s": 3.0,
        "time/driver_s": 0.75,
        "time/rollout_s": 3.0,
    }


def test_overlapped_rollout_counts_for_the_trainer_and_only_the_exposed_part_as_exploring() -> None:
    t = FakeTime()
    clock = StepClock(now=t)
    clock.add(EXPLORE, 100.0, 104.0)
    clock.add(TRAIN, 101.0, 103.0)
    t.now = 105.0
    split = clock.close_step()
    assert split["time/train_s"] == 2.0 and split["time/explore_s"] == 2.0 and split["time/driver_s"] == 1.0
    assert split["time/rollout_s"] == 4.0
    assert "time/save_s" not in split and "time/eval_s" not in split


def test_a_span_open_at_the_close_counts_in_both_windows() -> None:
    t = FakeTime()
    clock = StepClock(now=t)
    spans = clock.span(EXPLORE)
    t.now = 101.0
    spans.__enter__()
    t.now = 104.0
    first = clock.close_step()
    t.now = 106.0
    spans.__exit__(None, None, None)
    t.now = 107.0
    second = clock.close_step()
    assert (first["time/explore_s"], first["time/driver_s"]) == (3.0, 1.0)
    assert (second["time/explore_s"], second["time/driver_s"], second["time/step_s"]) == (2.0, 1.0, 3.0)


def test_restart_forgets_what_came_before() -> None:
    t = FakeTime()
    clock = StepClock(now=t)
    clock.add(TRAIN, 100.0, 102.0)
    t.now = 102.0
    clock.restart()
    t.now = 103.0
    assert clock.close_step()["time/train_s"] == 0.0


def test_parts_add_up_for_spans_from_many_threads() -> None:
    clock = StepClock()

    def work(kind: str) -> None:
        for _ in range(50):
            with clock.span(kind):
                pass

    threads = [threading.Thread(target=work, args=(kind,)) for kind in (EXPLORE, TRAIN, SYNC)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    split = clock.close_step()
    parts = sum(v for k, v in split.items() if k not in ("time/step_s", "time/rollout_s"))
    assert parts == pytest.approx(split["time/step_s"], abs=1e-9)
    assert min(split.values()) >= 0


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown span kind 'nap'"):
        StepClock().add("nap", 0.0, 1.0)
