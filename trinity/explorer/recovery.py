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
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from trinity.common.models.client import is_actor
from trinity.errors import TrinityError

logger = logging.getLogger(__name__)

#: Seconds a fresh engine may take to start serving (load its model) before the run ends.
READY_TIMEOUT_S = 600.0
#: Seconds a liveness probe waits for an engine's answer.
PROBE_TIMEOUT_S = 30.0


class EngineLostError(TrinityError):
    """A dead rollout engine could not be replaced; the run ends (exit status 1)."""


class EngineUser(Protocol):
    """Something that calls the engines and must call a fresh one in place of a dead one."""

    def replace_engine(self, index: int, engine: Any) -> None: ...


class EngineRecovery:
    """Replaces dead rollout engines; see the module docstring."""

    def __init__(
        self,
        engines: list[Any],
        start: Callable[[int], Any] | None,
        *,
        users: Sequence[EngineUser] = (),
        max_restarts: int = 3,
        resume_hint: str = "rerun the same command to resume",
        ready_timeout_s: float = READY_TIMEOUT_S,
    ) -> None:
        """``engines`` is the run's engine list (changed in place); ``start(index)`` starts a fresh engine.

        ``start`` None: engines cannot be replaced (a dead one ends the run).
        ``users`` get :meth:`EngineUser.replace_engine` calls on admission.
        ``resume_hint`` ends the message of :class:`EngineLostError`.
        """
        self.engines = engines
        self.start = start
        self.users = list(users)
        self.max_restarts = max_restarts
        self.resume_hint = resume_hint
        self.ready_timeout_s = ready_timeout_s
        #: Fresh engines started and serving, not yet admitted, by index.
        self.pending: dict[int, Any] = {}
        #: Replacements of each engine since it last served a rollout step whole.
        self.in_a_row: dict[int, int] = {}
        #: Engines replaced so far in this run.
        self.replaced = 0
        # the explorer thread prepares while the trainer thread may sync: one start per dead engine
        self._lock = threading.RLock()

    def prepare(self, dead: Iterable[int]) -> bool:
        """Start a fresh engine for each ``dead`` engine not replaced yet; return whether any awaits admission.

        Engines not in ``dead`` served the step: their count of replacements in a
        row starts again. Raises :class:`EngineLostError` when an engine may not
        be replaced again or its fresh engine does not serve.
        """
        dead = set(dead)
        with self._lock:
            for index in range(len(self.engines)):
                if index not in dead and index not in self.pending:
                    self.in_a_row[index] = 0
            for index in sorted(dead - set(self.pending)):
                self.pending[index] = self._start(index)
            return bool(self.pending)

    def _start(self, index: int) -> Any:
        count = self.in_a_row.get(index, 0)
        if self.start is None:
            raise self._lost(index, "it is not replaced: this run's engines cannot be started again")
        if count >= self.max_restarts:
            why = ("explorer.max_engine_restarts is 0" if self.max_restarts == 0 else
                   f"it was replaced {count} time(s) in a row already (explorer.max_engine_restarts = "
                   f"{self.max_restarts}); it dies again before serving a step")
            raise self._lost(index, f"it is not replaced: {why}")
        logger.warning("rollout engine %d died; starting a fresh one in its place (%d of at most %d in a row)",
                       index, count + 1, self.max_restarts)
        started = time.monotonic()
        engine = None
        try:
            engine = self.start(index)
            self._wait_until_serving(engine)
        except Exception as exc:  # any failure to start ends the run, with its reason
            if engine is not None:
                _end(engine)
            raise self._lost(index, f"a fresh engine did not start: {_one_line(exc)}") from exc
        self.in_a_row[index] = count + 1
        logger.info("a fresh rollout engine %d serves after %.1f s", index, time.monotonic() - started)
        return engine

    def _wait_until_serving(self, engine: Any) -> None:
        if not is_actor(engine):
            return
        import ray
        from ray.exceptions import GetTimeoutError

        try:
            ray.get(engine.model_version.remote(), timeout=self.ready_timeout_s)
        except GetTimeoutError:
            raise TimeoutError(
                f"it did not serve within {self.ready_timeout_s:g} s (its placement group's node may be gone)"
            ) from None

    def _lost(self, index: int, why: str) -> EngineLostError:
        return EngineLostError(f"rollout engine {index} died and {why}; the run stopped: {self.resume_hint}")

    def admit(self) -> list[int]:
        """Put every fresh engine in place of its dead one (engine list, then the users); return their indices.

        Call it while no rollout, sync or evaluation runs; the caller then loads
        the current weights into the fresh engines before the next rollout.
        """
        with self._lock:
            admitted = sorted(self.pending)
            for index in admitted:
                engine = self.pending.pop(index)
                dead, self.engines[index] = self.engines[index], engine
                for user in self.users:
                    user.replace_engine(index, engine)
                _end(dead)
                self.replaced += 1
        if admitted:
            logger.info("rollout engine(s) %s replaced", admitted)
        return admitted

    def find_dead(self) -> list[int]:
        """Return the indices of the engines whose actor is gone (an engine too busy to answer counts as alive)."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        dead = []
        probes = {i: e.model_version.remote() for i, e in enumerate(self.engines) if is_actor(e)}
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        for index, ref in probes.items():
            try:
                ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except RayActorError:
                dead.append(index)
            except GetTimeoutError:
                pass
        return dead

    def sync(self, synchronizer: Any, version: int) -> Any:
        """Admit the fresh engines, then sync ``version`` to every engine; return the sync's report.

        A sync that fails because an engine died replaces that engine at once
        and syncs again. Raises the sync's error when no engine died, and
        :class:`EngineLostError` when a dead one cannot be replaced.
        """
        from trinity.synchronizer.synchronizer import SyncError

        self.admit()
        try:
            return synchronizer.sync(version=version)
        except SyncError:
            dead = self.find_dead()
            if not dead:
                raise
            logger.warning("the sync of version %d failed: rollout engine(s) %s died", version, dead)
        self.prepare(dead)
        self.admit()
        return synchronizer.sync(version=version)

    def close(self) -> None:
        """End the fresh engines that were never admitted (the run is ending)."""
        with self._lock:
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
