"""Dead rollout engines are replaced: the scheduler swaps an engine, and EngineRecovery starts, admits and limits.

The engines here are small real Ray actors answering ``model_version`` (what
the probe workflow calls); one is SIGKILLed as a crashing engine process would
die, and the scheduler meets its death as a real ``ActorDiedError``.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from tests.explorer.flows import probe_tasks
from tests.explorer.test_scheduler import VersionEngine
from tests.plans import make_plan
from trinity.common.config import ConfigError
from trinity.explorer import Scheduler
from trinity.explorer.recovery import EngineLostError, EngineRecovery
from trinity.synchronizer.synchronizer import SyncError


def test_the_scheduler_swaps_an_engine_in_place_of_a_dead_one() -> None:
    scheduler = Scheduler([VersionEngine(0), VersionEngine(1)], runners_per_engine=1, timeout=30,
                          tokenizer_path="/models/tiny")
    scheduler.dead_engines.add(0)
    first = scheduler.run(probe_tasks(4, "swap-before"))
    assert {e.info["engine"] for e in first.experiences} == {1}  # nothing goes to the dead engine

    scheduler.replace_engine(0, VersionEngine(7))
    assert scheduler.dead_engines == set()
    assert scheduler.clients[0].index == 0 and scheduler.clients[0].tokenizer_path == "/models/tiny"
    again = scheduler.run(probe_tasks(4, "swap-after"))
    served = {e.info["engine"]: e.model_version for e in again.experiences}
    assert served == {0: 7, 1: 1}, "the fresh engine serves as engine 0 again"
    assert again.metrics["dead_engines"] == 0
    with pytest.raises(IndexError):
        scheduler.replace_engine(2, VersionEngine(9))


def test_max_engine_restarts_comes_from_the_config_and_is_checked() -> None:
    assert make_plan({}).explorer.max_engine_restarts == 3
    assert make_plan({"explorer.max_engine_restarts": 0}).explorer.max_engine_restarts == 0
    with pytest.raises(ConfigError, match=r"explorer\.max_engine_restarts"):
        make_plan({"explorer.max_engine_restarts": -1})


@pytest.fixture(scope="module")
def engine_class(ray_cluster: Any) -> Any:
    class VersionActor:
        """An engine process: answers its version; fails to start when told to (a model that cannot load)."""

        def __init__(self, version: int, fail: str = "") -> None:
            if fail:
                raise OSError(fail)
            self.version = version

        def model_version(self) -> int:
            return self.version

        def pid(self) -> int:
            return os.getpid()

    return ray_cluster.remote(num_cpus=0, max_restarts=0)(VersionActor)


def _sigkill(ray: Any, actor: Any) -> None:
    os.kill(ray.get(actor.pid.remote()), signal.SIGKILL)


class Users:
    """Records the replacements it is told about (as the synchronizer would)."""

    def __init__(self) -> None:
        self.told: list[tuple[int, Any]] = []

    def replace_engine(self, index: int, engine: Any) -> None:
        self.told.append((index, engine))


def test_a_sigkilled_engine_is_replaced_and_serves_again(ray_cluster: Any, engine_class: Any) -> None:
    engines = [engine_class.remote(0), engine_class.remote(1)]
    try:
        scheduler = Scheduler(engines, runners_per_engine=2, timeout=30, max_retries=1)
        _sigkill(ray_cluster, engines[0])
        hit = scheduler.run(probe_tasks(4, "kill", work_s=0.05))
        assert not hit.failures and scheduler.dead_engines == {0}

        users = Users()
        recovery = EngineRecovery(engines, lambda index: engine_class.remote(100 + index),
                                  users=[scheduler, users], max_restarts=2)
        dead = engines[0]
        assert recovery.prepare(scheduler.dead_engines)
        assert engines[0] is dead, "nothing changes before admission"
        assert recovery.admit() == [0]
        assert engines[0] is not dead and users.told == [(0, engines[0])] and recovery.replaced == 1
        assert not recovery.pending and recovery.in_a_row == {0: 1, 1: 0}

        after = scheduler.run(probe_tasks(4, "after", work_s=0.05))
        assert not after.failures and after.metrics["dead_engines"] == 0
        assert {e.info["engine"]: e.model_version for e in after.experiences} == {0: 100, 1: 1}
        assert recovery.find_dead() == []
        # a step served whole starts the count again
        assert not recovery.prepare(scheduler.dead_engines) and recovery.in_a_row[0] == 0
    finally:
        for actor in engines:
            ray_cluster.kill(actor)


def test_an_engine_dying_more_than_the_limit_in_a_row_ends_the_run(ray_cluster: Any, engine_class: Any) -> None:
    engines = [engine_class.remote(0)]
    recovery = EngineRecovery(engines, lambda index: engine_class.remote(5), max_restarts=2,
                              resume_hint="rerun the same command")
    try:
        for _ in range(2):  # dies again before it served a step: replaced twice in a row
            _sigkill(ray_cluster, engines[0])
            assert recovery.find_dead() == [0]
            assert recovery.prepare([0]) and recovery.admit() == [0]
        _sigkill(ray_cluster, engines[0])
        with pytest.raises(EngineLostError) as lost:
            recovery.prepare([0])
        message = str(lost.value)
        assert "\n" not in message and lost.value.exit_code == 1
        assert message.startswith("rollout engine 0 died and it is not replaced: it was replaced 2 time(s) in a row")
        assert "explorer.max_engine_restarts = 2" in message and message.endswith("rerun the same command")
        with pytest.raises(EngineLostError, match=r"explorer\.max_engine_restarts is 0"):
            EngineRecovery(engines, lambda index: engine_class.remote(5), max_restarts=0).prepare([0])
    finally:
        ray_cluster.kill(engines[0])


def test_a_fresh_engine_that_cannot_start_ends_the_run_with_its_reason(ray_cluster: Any, engine_class: Any) -> None:
    engines = [engine_class.remote(0)]
    recovery = EngineRecovery(engines, lambda index: engine_class.remote(0, fail="/models/tiny: no config.json"),
                              resume_hint="rerun it")
    try:
        with pytest.raises(EngineLostError) as lost:
            recovery.prepare([0])
        assert str(lost.value) == ("rollout engine 0 died and a fresh engine did not start: OSError: /models/tiny: "
                                   "no config.json; the run stopped: rerun it")
        assert not recovery.pending
    finally:
        ray_cluster.kill(engines[0])


class FlakySync:
    """A synchronizer whose first sync fails as one with a dead engine does; records what it synced to."""

    def __init__(self, engines: list[Any]) -> None:
        self.engines = engines
        self.calls: list[list[Any]] = []
        self.replaced: list[int] = []

    def replace_engine(self, index: int, engine: Any) -> None:
        self.replaced.append(index)

    def sync(self, version: int) -> str:
        self.calls.append(list(self.engines))
        if len(self.calls) == 1:
            raise SyncError(f"weight sync of version {version} failed: ActorDiedError")
        return f"synced {version}"


def test_a_sync_that_meets_a_dead_engine_replaces_it_and_syncs_again(ray_cluster: Any, engine_class: Any) -> None:
    engines = [engine_class.remote(0), engine_class.remote(1)]
    sync = FlakySync(engines)
    recovery = EngineRecovery(engines, lambda index: engine_class.remote(50), users=[sync])
    try:
        dead = engines[1]
        _sigkill(ray_cluster, dead)
        assert recovery.sync(sync, 3) == "synced 3"
        assert sync.replaced == [1] and engines[1] is not dead and len(sync.calls) == 2
        # with every engine alive, a failing sync is the sync's own error
        sync.calls.clear()
        with pytest.raises(SyncError):
            recovery.sync(sync, 4)
    finally:
        for actor in engines:
            ray_cluster.kill(actor)


def test_two_threads_finding_one_dead_engine_start_one_fresh_engine() -> None:
    """The explorer thread (after a batch) and the trainer thread (after a failed sync) may both see a death."""
    import threading
    import time

    started: list[int] = []

    def start(index: int) -> VersionEngine:
        started.append(index)
        time.sleep(0.3)  # loading a model takes a while
        return VersionEngine(9)

    recovery = EngineRecovery([VersionEngine(0), VersionEngine(1)], start)
    threads = [threading.Thread(target=recovery.prepare, args=([1],)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert started == [1] and list(recovery.pending) == [1]
    assert recovery.admit() == [1] and recovery.engines[1].version == 9


def test_with_its_only_engine_dead_a_step_waits_for_a_fresh_one_and_loses_no_task(
        ray_cluster: Any, engine_class: Any) -> None:
    """One engine, killed by the third of five tasks: the rest of the step runs on its replacement."""
    engines = [engine_class.remote(0)]
    try:
        scheduler = Scheduler(engines, runners_per_engine=1, timeout=30, max_retries=2)
        tasks = probe_tasks(5, "only-engine", kill_engine_at=2)
        first = scheduler.run(tasks, wait_for_engines=True)
        assert first.unserved == [2, 3, 4] and not first.failures  # nothing spent its retries on the dead engine
        assert [r is not None for r in first.results] == [True, True, False, False, False]
        assert first.metrics["engine_lost_attempts"] == 1 and first.metrics["retries"] == 0

        recovery = EngineRecovery(engines, lambda index: engine_class.remote(8), users=[scheduler])
        assert recovery.prepare(scheduler.dead_engine_handles()) and recovery.admit() == [0]
        done = scheduler.run(tasks, wait_for_engines=True, resume=first)
        assert not done.unserved and not done.failures
        assert [e.model_version for e in done.experiences] == [0, 0, 8, 8, 8]  # the first two kept, in task order
        assert done.metrics["succeeded"] == 5 and done.metrics["attempts"] == 6
    finally:
        for actor in engines:
            ray_cluster.kill(actor)


def test_without_a_way_to_replace_it_a_dead_only_engine_fails_each_task_once(
        ray_cluster: Any, engine_class: Any) -> None:
    engines = [engine_class.remote(0)]
    try:
        _sigkill(ray_cluster, engines[0])
        scheduler = Scheduler(engines, runners_per_engine=2, timeout=30, max_retries=2)
        result = scheduler.run(probe_tasks(4, "no-recovery", work_s=0.05))
        assert len(result.failures) == 4 and not result.unserved
        assert all("no rollout engine lives" in f.error or "EngineDeadError" in f.error for f in result.failures)
        assert result.metrics["attempts"] <= 2  # the two runners' first attempts; no retry went to the dead engine
    finally:
        ray_cluster.kill(engines[0])


def test_a_slot_given_a_fresh_engine_is_not_replaced_again_for_the_same_death() -> None:
    """The trainer thread replaced engine 1 after a failed sync; the explorer then reports the death it saw."""
    started: list[int] = []

    def start(index: int) -> VersionEngine:
        started.append(index)
        return VersionEngine(10 + len(started))

    engines = [VersionEngine(0), VersionEngine(1)]
    seen_dead = engines[1]
    recovery = EngineRecovery(engines, start)
    assert recovery.prepare({1: seen_dead}) and recovery.admit() == [1]
    assert not recovery.prepare({1: seen_dead}) and started == [1]  # stale: that engine is gone already
    assert recovery.in_a_row[1] == 1
    assert recovery.prepare({1: engines[1]}) and started == [1, 1]  # the fresh one died too: a real second death


def test_a_fresh_engine_starting_holds_up_no_other_thread() -> None:
    import threading

    release = threading.Event()

    def start(index: int) -> VersionEngine:
        release.wait(10)
        return VersionEngine(20 + index)

    engines = [VersionEngine(0), VersionEngine(1)]
    recovery = EngineRecovery(engines, start)
    slow = threading.Thread(target=recovery.prepare, args=({0: engines[0]},))
    slow.start()
    try:
        done = threading.Event()
        other = threading.Thread(target=lambda: (recovery.admit(), recovery.find_dead(), done.set()))
        other.start()
        assert done.wait(2), "admit waited for a start in another thread"
    finally:
        release.set()
        slow.join()
    assert recovery.admit() == [0] and engines[0].version == 20


def test_a_fresh_engine_that_does_not_serve_is_reported_while_the_run_waits(
        ray_cluster: Any, engine_class: Any, caplog: pytest.LogCaptureFixture) -> None:
    unplaceable = engine_class.options(resources={"no-such-device": 1})
    engines = [engine_class.remote(0)]
    recovery = EngineRecovery(engines, lambda index: unplaceable.remote(0), ready_timeout_s=1.2, report_every_s=0.4)
    try:
        with caplog.at_level("WARNING", logger="trinity.explorer.recovery"), pytest.raises(EngineLostError) as lost:
            recovery.prepare({0: engines[0]})
    finally:
        ray_cluster.kill(engines[0])
    waits = [r.getMessage() for r in caplog.records if "waiting for the fresh rollout engine 0" in r.getMessage()]
    assert len(waits) >= 2 and "placement group bundle" in waits[0]
    assert "did not serve within 1.2 s" in str(lost.value)


def test_a_fresh_engine_whose_process_dies_while_it_starts_is_started_again(
        ray_cluster: Any, engine_class: Any) -> None:
    starts: list[Any] = []

    def start(index: int) -> Any:
        fresh = engine_class.remote(30 + len(starts))
        if not starts:
            ray_cluster.kill(fresh)  # killed before it served, as an operator's or the OOM killer's kill would
        starts.append(fresh)
        return fresh

    engines = [engine_class.remote(0)]
    recovery = EngineRecovery(engines, start, max_restarts=3)
    try:
        assert recovery.prepare({0: engines[0]}) and recovery.admit() == [0]
        assert len(starts) == 2 and recovery.in_a_row[0] == 2  # two deaths in a row: the first and its fresh one
        assert ray_cluster.get(engines[0].model_version.remote()) == 31
    finally:
        for actor in [*engines, *starts]:
            ray_cluster.kill(actor)


def test_a_sync_that_meets_deaths_one_after_another_replaces_each_and_syncs(
        ray_cluster: Any, engine_class: Any) -> None:
    """A second engine dies while the first one's replacement joins: that sync fails too, and is retried."""
    engines = [engine_class.remote(0), engine_class.remote(1)]
    started: list[Any] = []

    class DyingSync(FlakySync):
        def sync(self, version: int) -> str:
            self.calls.append(list(self.engines))
            if len(self.calls) == 2:  # the retry: the other engine dies now
                _sigkill(ray_cluster, self.engines[1])
            if len(self.calls) <= 2:
                raise SyncError(f"weight sync of version {version} failed: ActorDiedError")
            return f"synced {version}"

    def start(index: int) -> Any:
        started.append(engine_class.remote(70 + index))
        return started[-1]

    sync = DyingSync(engines)
    recovery = EngineRecovery(engines, start, users=[sync])
    try:
        _sigkill(ray_cluster, engines[0])
        assert recovery.sync(sync, 5) == "synced 5"
        assert sync.replaced == [0, 1] and len(sync.calls) == 3
        assert ray_cluster.get([e.model_version.remote() for e in engines]) == [70, 71]
    finally:
        for actor in [*engines, *started]:
            ray_cluster.kill(actor)
