"""A run whose Ray actor was SIGKILLed ends with one line naming the actor, not Ray's paragraph.

Real Ray: an actor of the trainer rank's class name is killed by signal, and
the error its caller gets is turned into the run's error by ``run_plan``.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from trinity.launcher.lost_actor import ActorLostError, lost_actor


def _worker_class() -> type:
    """A class named as the trainer rank's (only its name matters), defined here so Ray ships it by value."""

    class FSDPWorker:
        def pid(self) -> int:
            return os.getpid()

        def work(self) -> int:
            return 1

    return FSDPWorker


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _died(ray: Any) -> tuple[BaseException, int]:
    worker = ray.remote(_worker_class()).remote()
    pid = ray.get(worker.pid.remote(), timeout=60)
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(ray.exceptions.RayActorError) as caught:
        ray.get(worker.work.remote(), timeout=60)
    return caught.value, pid


def test_a_killed_actor_becomes_one_line_naming_its_role_and_process(ray_cluster: Any) -> None:
    error, pid = _died(ray_cluster)
    assert len(str(error)) > 300  # Ray's own text: a paragraph
    try:
        raise RuntimeError("the step failed") from error  # found behind the error the mode raised, too
    except RuntimeError as wrapped:
        lost = lost_actor(wrapped)
    assert isinstance(lost, ActorLostError) and lost.exit_code == 1
    message = str(lost)
    assert "\n" not in message and len(message) < 300
    assert f"trainer rank FSDPWorker (pid {pid}) died" in message
    assert message.endswith("run the same command again to resume from the newest checkpoint")


def test_other_errors_are_left_alone(ray_cluster: Any) -> None:
    from trinity.explorer.recovery import EngineLostError

    assert lost_actor(ValueError("bad value")) is None
    error, _ = _died(ray_cluster)
    try:
        raise EngineLostError("rollout engine 0 died and a fresh engine did not start: ...") from error
    except EngineLostError as known:  # a death trinity already explains keeps its own line
        assert lost_actor(known) is None


def test_run_plan_raises_the_one_line_error(ray_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from trinity.launcher import modes

    error, pid = _died(ray_cluster)

    class Session:
        def close(self) -> None:
            pass

    def failing_mode(session: Any) -> None:
        raise error

    monkeypatch.setattr(modes, "open_session", lambda plan: Session())
    monkeypatch.setattr(modes, "_modes", lambda: {"both": failing_mode})
    plan: Any = type("Plan", (), {"mode": "both"})()
    with pytest.raises(ActorLostError, match=rf"trainer rank FSDPWorker \(pid {pid}\) died"):
        modes.run_plan(plan)


def test_a_live_ranks_failure_caused_by_a_dead_peer_is_reported_as_the_death(ray_cluster: Any) -> None:
    """Rank 0's collective fails (its peer is gone) before Ray reports rank 1's death: the death is what surfaces."""
    from trinity.trainer.trainer import FSDPTrainer

    ray = ray_cluster

    def _ranks() -> tuple[type, type]:
        class FSDPWorker:
            def pid(self) -> int:
                return os.getpid()

            def work(self) -> int:
                raise RuntimeError("Connection closed by peer")  # what gloo says when the other rank died

        return FSDPWorker, FSDPWorker

    live_class, dead_class = _ranks()
    live, dead = ray.remote(live_class).remote(), ray.remote(dead_class).remote()
    pid = ray.get(dead.pid.remote(), timeout=60)
    ray.get(live.pid.remote(), timeout=60)
    os.kill(pid, signal.SIGKILL)
    trainer = object.__new__(FSDPTrainer)
    trainer.in_process = False
    trainer.workers = [live, dead]
    with pytest.raises(ray.exceptions.RayActorError) as caught:
        trainer._per_rank("work", [(), ()])
    lost = lost_actor(caught.value)
    assert lost is not None and f"trainer rank FSDPWorker (pid {pid}) died" in str(lost)


def test_a_sync_that_met_a_dead_rank_names_it_in_a_few_words(ray_cluster: Any) -> None:
    from trinity.errors import actor_death
    from trinity.synchronizer.synchronizer import _cause

    error, pid = _died(ray_cluster)
    assert actor_death(RuntimeError("the broadcast failed")) is None
    assert actor_death(error) == f"Ray actor FSDPWorker (pid {pid}) died"
    line = _cause(error)
    assert line.startswith(f"Ray actor FSDPWorker (pid {pid}) died") and len(line) < 200
