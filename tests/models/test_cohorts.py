"""Cohorts: the first calls of attempts started together are served as one batch, however spread their arrival."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.models.tiny_fixtures import record_batches
from trinity.common.models.client import EngineClient
from trinity.common.models.cohorts import Cohorts
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import EngineError, HFEngine

PARAMS = SamplingParams(n=2, max_tokens=3)


def conv(letter: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Repeat the letter {letter}."}]


def test_a_cohort_waits_for_its_missing_members_until_its_wait_runs_out() -> None:
    cohorts = Cohorts(wait_s=0.2)
    assert not cohorts.waiting()
    cohorts.arrived("a", 3)
    cohorts.arrived("a", 3)
    assert cohorts.waiting()
    cohorts.arrived("a", 3)
    assert not cohorts.waiting(), "a complete cohort waits for nobody"
    cohorts.arrived("b", 1)
    assert not cohorts.waiting(), "a cohort of one is complete on arrival"
    cohorts.arrived("c", 2)
    assert cohorts.waiting()
    time.sleep(0.25)
    assert not cohorts.waiting(), "a member that never comes holds the cohort no longer than its wait"


def test_membership_belongs_to_the_calling_thread_and_counts_once() -> None:
    cohorts = Cohorts()
    cohorts.enter("a", 2)
    seen: list[Any] = []
    other = threading.Thread(target=lambda: seen.append(cohorts.take_current()))
    other.start()
    other.join()
    assert seen == [None]
    assert cohorts.take_current() == ("a", 2)
    assert cohorts.take_current() is None


def staggered(engine: HFEngine, calls: list[Any], gap_s: float) -> list[Any]:
    """Call ``calls[i]()`` on thread i, ``gap_s * i`` after a common start; return the results in order."""
    results: list[Any] = [None] * len(calls)
    start = time.monotonic()

    def run(i: int) -> None:
        time.sleep(max(0.0, start + gap_s * i - time.monotonic()))
        results[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


@pytest.fixture
def spied(tiny_model: Path) -> tuple[HFEngine, list[int]]:
    """A fresh engine (batches of at most 16 rows) and the row count of each generate call it makes."""
    engine = HFEngine(str(tiny_model), max_batch_size=16, torch_threads=1)
    return engine, record_batches(engine)


def test_spread_arrivals_of_a_cohort_are_one_generate_call(spied: tuple[HFEngine, list[int]]) -> None:
    engine, sizes = spied
    engine._cohorts.wait_s = 2.0
    # 40 ms apart: far beyond the engine's 5 ms batch wait
    results = staggered(engine, [
        lambda letter=letter: engine.in_cohort("step-1", 3, "chat", [conv(letter)], PARAMS) for letter in "abc"
    ], 0.04)
    assert sizes == [6], "the three members were not served as one batch"
    for letter, result in zip("abc", results, strict=True):
        [per_prompt] = result
        assert len(per_prompt) == 2
        assert per_prompt[0].prompt_tokens.tolist() == engine.chat_prompt_tokens(conv(letter))

    sizes.clear()
    staggered(engine, [lambda letter=letter: engine.chat([conv(letter)], PARAMS) for letter in "abc"], 0.04)
    assert len(sizes) > 1, "without a cohort the first arrival is served before the others come"


def test_a_member_that_never_comes_costs_one_bounded_wait(spied: tuple[HFEngine, list[int]]) -> None:
    engine, sizes = spied
    engine._cohorts.wait_s = 0.3
    started = time.monotonic()
    staggered(engine, [
        lambda letter=letter: engine.in_cohort("step-2", 3, "chat", [conv(letter)], PARAMS) for letter in "ab"
    ], 0.0)
    took = time.monotonic() - started
    assert sizes == [4]
    assert 0.25 <= took < 10, f"served after {took:.2f} s: the wait for the third member is bounded by 0.3 s"


def test_a_full_batch_does_not_wait_for_the_rest(tiny_model: Path) -> None:
    engine = HFEngine(str(tiny_model), max_batch_size=4, torch_threads=1)
    engine._cohorts.wait_s = 30.0
    started = time.monotonic()
    staggered(engine, [
        lambda letter=letter: engine.in_cohort("step-3", 5, "chat", [conv(letter)], PARAMS) for letter in "ab"
    ], 0.0)
    assert time.monotonic() - started < 10, "two members fill a batch of 4 rows: no wait for the other three"


def test_in_cohort_takes_only_sampling_calls(shared_engine: HFEngine) -> None:
    with pytest.raises(EngineError, match="in_cohort takes one of chat, generate, generate_tokens"):
        shared_engine.in_cohort("x", 1, "load_checkpoint_weights", "/tmp", 1)
    with pytest.raises(EngineError, match="size of at least 1"):
        shared_engine.in_cohort("x", 0, "chat", [conv("a")], PARAMS)


class Recorder:
    """An in-process engine that records the cohort joins of the calls it passes on."""

    def __init__(self, inner: HFEngine) -> None:
        self.inner = inner
        self.joins: list[tuple[str, int, str]] = []

    def in_cohort(self, cohort: str, size: int, method: str, *args: Any) -> Any:
        self.joins.append((cohort, size, method))
        return getattr(self.inner, method)(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_only_the_first_sampling_call_of_a_bound_client_joins(shared_engine: HFEngine) -> None:
    recorder = Recorder(shared_engine)
    client = EngineClient(recorder).bind(None, cohort=("step-4", 1))
    client.chat([conv("a")], PARAMS)
    client.generate_tokens([[1, 2, 3]], PARAMS)
    assert recorder.joins == [("step-4", 1, "chat")]
    assert EngineClient(recorder).bind(None).cohort is None
    fork = EngineClient(recorder).bind(None, cohort=("step-5", 1)).fork()
    fork.chat([conv("b")], PARAMS)
    assert recorder.joins == [("step-4", 1, "chat")], "a fork is not the attempt's first call"
