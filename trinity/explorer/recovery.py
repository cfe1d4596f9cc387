"""Replacing rollout engines whose process died: a fresh engine takes the dead one's place and its weights.

The scheduler learns that an engine died when a call to it fails with
:class:`~trinity.common.models.client.EngineDeadError` (its Ray actor is
gone); a sync learns it when a call to the engine fails. Ray never restarts
an engine by itself (its actors have ``max_restarts: 0``): :class:`EngineRecovery`
starts a fresh engine with the dead one's options (its placement group, so
its devices), waits until it serves, and only then hands it to the engine
list, the scheduler and the synchronizer in place of the dead one
(:meth:`~EngineRecovery.admit`). The fresh engine holds the model folder's
weights; the caller loads the current ones before the next rollout (mode
``both`` syncs the trainer's weights to every engine, mode ``explore`` loads
the published ones).

An engine that dies again before it served a whole rollout step is replaced
at most ``max_restarts`` times in a row; past that, or when a fresh engine
cannot start, :class:`EngineLostError` ends the run with one line naming the
engine, why, and how to resume.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from trinity.common.models.client import is_actor
from trinity.errors import TrinityError
from trinity.utils import stop

logger = logging.getLogger(__name__)

#: Seconds a fresh engine may take to start serving (load its model) before the run ends.
READY_TIMEOUT_S = 600.0
#: Seconds a liveness probe waits for an engine's answer.
PROBE_TIMEOUT_S = 30.0
#: Seconds between the lines saying that the run waits for a fresh engine.
REPORT_EVERY_S = 30.0


class EngineLostError(TrinityError):
    """A dead rollout engine could not be replaced; the run ends (exit status 1)."""


class EngineUser(Protocol):
    """Something that calls the engines and must call a fresh one in place of a dead one."""

    def replace_engine(self, index: int, engine: Any) -> None: ...


class EngineRecovery:
    """Replaces dead rollout engines; see the module docstring.

    Two threads may ask at once (mode both's explorer after a step, its
    trainer when a sync meets a dead engine): each engine slot gets one fresh
    engine at a time, a slot already given a fresh engine is not replaced
    again for the same death, and no lock is held while a fresh engine
    starts, so the other thread is never stuck behind the wait.
    """

    def __init__(
        self,
        engines: list[Any],
        start: Callable[[int], Any] | None,
        *,
        users: Sequence[EngineUser] = (),
        max_restarts: int = 3,
        resume_hint: str = "rerun the same command to resume",
        ready_timeout_s: float = READY_TIMEOUT_S,
        report_every_s: float = REPORT_EVERY_S,
    ) -> None:
        """``engines`` is the run's engine list (changed in place); ``start(index)`` starts a fresh engine.

        ``start`` None: engines cannot be replaced (a dead one ends the run).
        ``users`` get :meth:`EngineUser.replace_engine` calls on admission.
        ``resume_hint`` ends the message of :class:`EngineLostError`; a wait for
        a fresh engine is reported every ``report_every_s`` seconds.
        """
        self.engines = engines
        self.start = start
        self.users = list(users)
        self.max_restarts = max_restarts
        self.resume_hint = resume_hint
        self.ready_timeout_s = ready_timeout_s
        self.report_every_s = report_every_s
        #: Fresh engines started and serving, not yet admitted, by index.
        self.pending: dict[int, Any] = {}
        #: Replacements of each engine since it last served a rollout step whole.
        self.in_a_row: dict[int, int] = {}
        #: Engines replaced so far in this run.
        self.replaced = 0
        #: Slots whose fresh engine is starting now (in some thread).
        self._starting: set[int] = set()
        self._changed = threading.Condition(threading.Lock())

    def prepare(self, dead: Mapping[int, Any] | Iterable[int], *, served: bool = True) -> bool:
        """Start a fresh engine for each ``dead`` engine not replaced yet; return whether any awaits admission.

        ``dead`` maps each dead engine's index to the engine seen dead (a slot
        whose engine is another one by now was replaced already and is left
        alone), or lists indices. With ``served`` (after a rollout step), the
        engines not in ``dead`` served the step: their count of replacements
        in a row starts again. Returns once the fresh engines of ``dead``
        serve (started here or by another thread). Raises
        :class:`EngineLostError` when an engine may not be replaced again or
        its fresh engine does not serve.
        """
        seen = dict(dead) if isinstance(dead, Mapping) else dict.fromkeys(dead)
        if seen and stop.signalled():
            logger.info("rollout engine(s) %s died while the run stops on a signal; not replaced", sorted(seen))
            return False
        mine: list[int] = []
        with self._changed:
            for index in range(len(self.engines) if served else 0):
                if index not in seen and index not in self.pending and index not in self._starting:
                    self.in_a_row[index] = 0
            for index in sorted(seen):
                engine = seen[index]
                if index in self.pending or index in self._starting:
                    continue  # one fresh engine per slot at a time
                if engine is not None and self.engines[index] is not engine:
                    continue  # a fresh engine took this slot since that engine was seen dead
                self._check_limit(index)
                self._starting.add(index)
                mine.append(index)
        try:
            for index in list(mine):
                fresh = self._start(index)
                with self._changed:
                    self._starting.discard(index)
                    mine.remove(index)
                    self.pending[index] = fresh
                    self.in_a_row[index] = self.in_a_row.get(index, 0) + 1
                    self._changed.notify_all()
        finally:
            if mine:  # a start failed: the slots it had not reached are free again
                with self._changed:
                    self._starting.difference_update(mine)
                    self._changed.notify_all()
        self._await_others(set(seen))
        with self._changed:
            return bool(self.pending)

    def _await_others(self, slots: set[int]) -> None:
        """Wait (reporting) while another thread starts a fresh engine for one of ``slots``."""
        begun = time.monotonic()
        with self._changed:
            while slots & self._starting:
                if not self._changed.wait(self.report_every_s):
                    logger.warning("waiting for the fresh rollout engine(s) %s another thread starts (%.0f s so far)",
                                   sorted(slots & self._starting), time.monotonic() - begun)

    def _check_limit(self, index: int) -> None:
        count = self.in_a_row.get(index, 0)
        if self.start is None:
            raise self._lost(index, "it is not replaced: this run's engines cannot be started again")
        if count >= self.max_restarts:
            why = ("explorer.max_engine_restarts is 0" if self.max_restarts == 0 else
                   f"it was replaced {count} time(s) in a row already (explorer.max_engine_restarts = "
                   f"{self.max_restarts}); it dies again before serving a step")
            raise self._lost(index, f"it is not replaced: {why}")

    def _start(self, index: int) -> Any:
        """Start a fresh engine for slot ``index`` and wait until it serves; one whose process dies meanwhile
        counts as another death (started again within the limit); any other failure ends the run."""
        from ray.exceptions import RayActorError

        assert self.start is not None
        while True:
            logger.warning("rollout engine %d died; starting a fresh one in its place (%d of at most %d in a row)",
                           index, self.in_a_row.get(index, 0) + 1, self.max_restarts)
            started = time.monotonic()
            engine = None
            try:
                engine = self.start(index)
                self._wait_until_serving(index, engine)
            except RayActorError as exc:
                if engine is not None:
                    _end(engine)
                if exc.actor_init_failed:  # its constructor raised: starting it again fails the same way
                    raise self._lost(index, f"a fresh engine did not start: {_one_line(exc)}") from exc
                with self._changed:
                    self.in_a_row[index] = self.in_a_row.get(index, 0) + 1
                    self._check_limit(index)
                continue
            except Exception as exc:  # any other failure to start ends the run, with its reason
                if engine is not None:
                    _end(engine)
                raise self._lost(index, f"a fresh engine did not start: {_one_line(exc)}") from exc
            logger.info("a fresh rollout engine %d serves after %.1f s", index, time.monotonic() - started)
            return engine

    def _wait_until_serving(self, index: int, engine: Any) -> None:
        """Wait until ``engine`` answers, saying every ``report_every_s`` what the run waits for."""
        if not is_actor(engine):
            return
        import ray
        from ray.exceptions import GetTimeoutError

        ref = engine.model_version.remote()
        begun = time.monotonic()
        while True:
            left = self.ready_timeout_s - (time.monotonic() - begun)
            if left <= 0:
                raise TimeoutError(
                    f"it did not serve within {self.ready_timeout_s:g} s (its placement group's node may be gone)")
            try:
                ray.get(ref, timeout=min(left, self.report_every_s))
                return
            except GetTimeoutError:
                logger.warning(
                    "waiting for the fresh rollout engine %d to serve: %.0f s so far, at most %g s (it loads its "
                    "model, or Ray has not placed it yet: its placement group bundle must be free)",
                    index, time.monotonic() - begun, self.ready_timeout_s)

    def _lost(self, index: int, why: str) -> EngineLostError:
        return EngineLostError(f"rollout engine {index} died and {why}; the run stopped: {self.resume_hint}")

    def admit(self) -> list[int]:
        """Put every fresh engine in place of its dead one (engine list, then the users); return their indices.

        Call it while no rollout, sync or evaluation runs; the caller then loads
        the current weights into the fresh engines before the next rollout.
        """
        with self._changed:
            admitted = sorted(self.pending)
            swapped = []
            for index in admitted:
                engine = self.pending.pop(index)
                dead, self.engines[index] = self.engines[index], engine
                swapped.append((index, engine, dead))
                self.replaced += 1
            self._changed.notify_all()
        for index, engine, dead in swapped:
            for user in self.users:
                user.replace_engine(index, engine)
            _end(dead)
        if admitted:
            logger.info("rollout engine(s) %s replaced", admitted)
        return admitted

    def find_dead(self) -> list[int]:
        """Return the indices of the engines whose actor is gone (an engine too busy to answer counts as alive)."""
        return sorted(self._dead_engines())

    def _dead_engines(self) -> dict[int, Any]:
        """Return ``{index: engine}`` of the engines whose actor is gone, as probed."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        dead = {}
        probes = {i: (e, e.model_version.remote()) for i, e in enumerate(list(self.engines)) if is_actor(e)}
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        for index, (engine, ref) in probes.items():
            try:
                ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except RayActorError:
                dead[index] = engine
            except GetTimeoutError:
                pass
        return dead

    def sync(self, synchronizer: Any, version: int) -> Any:
        """Admit the fresh engines, then sync ``version`` to every engine; return the sync's report.

        A sync that fails because an engine died replaces that engine at once
        and syncs again, as often as engines die (each death counts toward
        its slot's limit in a row). Raises the sync's error when no engine
        died, and :class:`EngineLostError` when a dead one cannot be replaced.
        """
        from trinity.synchronizer.synchronizer import SyncError

        self.admit()
        while True:
            try:
                return synchronizer.sync(version=version)
            except SyncError:
                dead = self._dead_engines()
                if not dead:
                    raise
                logger.warning("the sync of version %d failed: rollout engine(s) %s died", version, sorted(dead))
            self.prepare(dead, served=False)  # each death counts: past the limit in a row, EngineLostError
            self.admit()

    def close(self) -> None:
        """End the fresh engines that were never admitted (the run is ending)."""
        with self._changed:
            for engine in self.pending.values():
                _end(engine)
            self.pending.clear()


def _end(engine: Any) -> None:
    """End an engine's actor (best effort: it may be dead already)."""
    if not is_actor(engine):
        return
    import ray

    try:
        ray.kill(engine, no_restart=True)
    except Exception as exc:  # noqa: BLE001 - a dead actor may refuse; nothing is left to do
        logger.debug("ending an engine actor: %s", exc)


def _one_line(exc: BaseException) -> str:
    """Return the last ``Type: message`` line of ``exc``'s text (Ray puts the remote traceback first)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in reversed(lines):
        head = line.split(":", 1)[0]
        if head and head.replace(".", "").replace("_", "").isalnum() and head[0].isupper() and ":" in line:
            return line
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
