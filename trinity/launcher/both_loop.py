"""The loop of mode both: an explorer thread rolls out while the driver's main thread trains and syncs.

Both threads only drive Ray actors, so they overlap for real: while the
trainer steps, the explorer rolls the next batch out. What makes one wait for
the other is the sync policy alone:

* backlog: the explorer runs at most ``sync_offset + 1`` batches ahead of
  what the trainer has trained (and synced). Batches are counted in *places*:
  every task of an explorer step is one place, whether its group was stored
  or dropped because its rollouts failed, so a training step takes the
  groups that completed and never waits for those that will not come (a step
  whose places were all dropped is skipped and logged);
* ``fixed``: explorer step ``k`` also waits until the engines hold version
  ``SyncPolicy.required_version(k)``; the trainer syncs after every
  ``sync_interval`` steps. With ``sync_offset: 0, sync_interval: 1`` this is
  strict alternation: the same batches on the same weights as a serial loop;
* ``trainer_driven``: the trainer syncs after every ``sync_interval`` steps;
  the explorer never waits for weights, only for the backlog;
* ``explorer_driven``: after every ``sync_interval`` of its steps the explorer
  asks for a sync and waits until the trainer has pushed its current weights.

A sync never happens while a batch is rolled out (one lock covers a rollout
batch, a sync and an evaluation), so every experience of a batch carries the
same model version. Groups the sample strategy drops (``staleness_control``)
count as consumed, and a trainer waiting for data lets the explorer past the
version gate, so neither kind of drop deadlocks the run; once the tasks run
out the explorer closes the buffer, so a trainer whose last groups were
dropped as stale stops instead of waiting for more.

Each training step's record splits its wall time (:mod:`trinity.monitor.step_clock`):
rollout batches, the trainer's update, checkpoint saves, syncs and
evaluations are timed as spans, and the step, from the previous step's end to
its own, is divided among them, the trainer's work first where a rollout
overlaps it; what none covers is the driver's share. The trainer's wait for
its batch is logged beside (``time/explore_wait_s``).

A checkpoint stores :meth:`BothLoop.checkpoint_state`, taken when the
trainer saves it (after the step's batch was read, before the next). With a
persistent buffer (SQLite) the batches already stored stay: the
checkpoint keeps where the buffer's data ends, the sample strategy's state
(read position, held experiences), the loop's place counters and the task
position after the last stored batch; :meth:`BothLoop.restore` cuts what was
stored after the checkpoint and continues from there, so every batch is
explored once and every group trained once, whatever the offset and however
the steps split the batches. A queue buffer dies with the run: the
checkpoint keeps the task position after the last batch wholly trained, and
the batches after it are explored again (a batch a step took only part of is
explored again whole, and that part trained twice; :meth:`BothLoop.restore`
warns).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from typing import Any

from trinity.buffer.errors import BufferExhaustedError, StorageError
from trinity.buffer.sampling import group_sizes
from trinity.launcher.evaluation import evaluate
from trinity.launcher.session import Session
from trinity.launcher.steps import check_step_failures, check_trained, explore_metrics, training_tasks
from trinity.launcher.untaken import UntakenBatches
from trinity.monitor import step_clock
from trinity.monitor.keys import EXPLORE_WAIT_SECONDS, SAVE_SECONDS
from trinity.utils import stop

logger = logging.getLogger("trinity.launcher")

#: What :meth:`BothLoop._wait_for_batch` returns for a step of replayed groups alone.
_REPLAY_ONLY = -1
#: Seconds the explorer thread gets to finish its batch when the run stops on an error.
_STOP_GRACE_S = 30.0
#: Seconds between the lines saying what a waiting thread waits for.
_REPORT_EVERY_S = 30.0


class _Unstored(Exception):
    """The explorer thread ends with its batch (numbered in ``args[0]``) not stored, because the run stops."""


class BothLoop:
    """Explorer thread plus trainer (main thread), meeting in the buffer and the synchronizer."""

    def __init__(
        self,
        session: Session,
        *,
        tasks: Any,
        trainer: Any,
        engines: list[Any],
        pipeline: Any,
        strategy: Any,
        sync: Any,
        scheduler: Any,
        monitor: Any,
        verify: Any = None,
        storage: Any = None,
        recovery: Any = None,
    ) -> None:
        """Drive the given parts; ``storage`` is the experience storage the pipeline writes to, if known."""
        self.session = session
        self.storage = storage
        self.plan = session.plan
        self.tasks = tasks
        self.trainer = trainer
        self.engines = engines
        self.pipeline = pipeline
        self.strategy = strategy
        self.sync = sync
        self.scheduler = scheduler
        self.monitor = monitor
        self.verify = verify
        #: Replaces dead engines (:class:`~trinity.explorer.recovery.EngineRecovery`); None: they stay dead.
        self.recovery = recovery
        #: Metrics of the resumed checkpoint's step when its run did not log them (logged after the first sync).
        self.restored_row: dict[str, float] | None = None
        self.style = getattr(self.plan.sync, "style", "fixed")
        #: Rollout groups one training step takes (the strategy's batch; ``mix`` adds its expert rows to it).
        self.groups_per_step = int(strategy.batch_size)
        #: ``(places explored so far, task position after them)`` per batch not wholly consumed, oldest first.
        self.explored: collections.deque[tuple[int, dict[str, Any]]] = collections.deque()
        #: Task position after the last stored batch, and after the last batch wholly consumed.
        self.stored_position: dict[str, Any] = tasks.state_dict()
        self.consumed_position: dict[str, Any] = self.stored_position
        #: Places explored up to ``consumed_position``.
        self.consumed_places = 0
        #: Each explored batch not yet wholly taken (its stored groups' sizes and dropped groups), oldest first.
        self.untaken = UntakenBatches(self.groups_per_step, getattr(strategy, "batch_rows", None))
        self.explored_places = 0
        self.explored_groups = 0
        #: Places and stored groups the trainer has taken for its steps so far.
        self.taken_places = 0
        self.taken_groups = 0
        #: Places whose step has been trained (and synced, when due): what the backlog counts from.
        self.released_places = 0
        #: Whether the trainer is idle until more places are explored (it lets the explorer past the version gate).
        self.trainer_waiting = False
        self.skipped_batches = 0
        #: Stale-dropped groups already counted as consumed places (see :meth:`_absorb_stale_drops`).
        self.absorbed = 0
        self.exhausted = False
        self.synced_version = int(trainer.step)
        #: The trainer's step when this run started, the training steps and explorer batches it has done since.
        self.started_at = int(trainer.step)
        self.trained_here = 0
        self.explored_here = 0
        self.sync_requested = False
        self.stopping = False
        self.error: BaseException | None = None
        self.cond = threading.Condition()
        #: Held while a batch is rolled out, the weights are synced or an evaluation runs.
        self.engine_lock = threading.Lock()
        #: Held while a batch is stored and counted, so a checkpoint sees the buffer and the counters agree.
        self._store_lock = threading.Lock()
        self._monitor_lock = threading.Lock()
        #: Splits each training step's wall time into rollout, training, saving, syncing, evaluation and the rest.
        self.clock = step_clock.StepClock()
        #: Seconds the trainer has waited for its next batch since the last training step (main thread only).
        self._batch_wait_s = 0.0

    # -- the run ------------------------------------------------------------------------------------------

    def run(self, resumed: bool) -> None:
        """Run until the tasks run out or the trainer reaches its step limit; then evaluate and checkpoint."""
        from trinity.monitor.keys import PHASE_EVAL

        plan = self.plan
        if resumed:  # fresh engines load model_path; after a resume they need the trained weights
            report = self.sync.sync(version=self.trainer.step)
            if self.restored_row is not None:
                self._log_restored_row(self.restored_row, report)
        if plan.buffer.eval_tasksets and plan.explorer.eval_on_startup and not resumed:
            self._log(evaluate(plan, self.scheduler, self.trainer.step), self.trainer.step, PHASE_EVAL)
        self.clock.restart()  # the first step's window opens with the loop, after start-up work
        explorer = threading.Thread(target=self._explorer_main, name="trinity-explorer", daemon=True)
        explorer.start()
        try:
            with stop.deferred() if getattr(plan.trainer, "save_on_stop", False) else contextlib.nullcontext():
                self._trainer_main()
        except BaseException:
            self._stop()
            explorer.join(_STOP_GRACE_S)
            raise
        self._stop()
        explorer.join()
        if self.error is not None:
            raise self.error
        self._finish()

    def _stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()

    # -- the explorer thread ------------------------------------------------------------------------------

    def _explorer_main(self) -> None:
        try:
            while self._wait_until_explorer_may_go():
                if not self._explore():
                    if self.storage is not None:  # no more batches: the trainer reads what is left, then stops
                        self.storage.close()
                    break
                if self.style == "explorer_driven":
                    self._request_sync()
        except _Unstored as unstored:
            logger.info("the explorer stops: batch %d is not stored (no engine to finish it while the run stops)",
                        unstored.args[0])
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
            with self.cond:
                self.error = exc
                self.cond.notify_all()
        finally:
            with self.cond:
                self.exhausted = True
                self.cond.notify_all()

    def _dropped(self) -> int:
        return int(self.strategy.stats.get("stale_dropped_groups", 0)) if hasattr(self.strategy, "stats") else 0

    def _wait_until_explorer_may_go(self) -> bool:
        """Block until the sync policy lets the next batch start; False when the run is stopping."""
        lead = self.plan.sync.offset
        with self.cond:
            while not self.stopping:
                dropped = self._dropped()
                self._absorb_stale_drops()
                short = self.untaken.next_step() is None
                starving = (self.trainer_waiting and short) or self.explored_groups - dropped < self.taken_groups
                in_training = 1 if self.taken_places > self.released_places else 0
                backlog_ok = in_training + self.untaken.full_steps() <= lead
                if starving or (backlog_ok and self._version_ok()):
                    return True
                self.cond.wait(0.2)  # drops happen inside the strategy, which does not notify
            return False

    def _version_ok(self) -> bool:
        if self.style != "fixed":
            return True
        step = self.tasks.position.step + 1
        return bool(self.sync.policy.can_explore(step, self.synced_version))

    def _explore(self) -> bool:
        """Roll one batch out and store it; False when the tasks ran out."""
        from trinity.monitor.keys import PHASE_EXPLORE

        step = self.tasks.position.step
        batch = self.tasks.next_batch_with_epochs()
        if batch is None:
            return False
        position = self.tasks.state_dict()
        tasks = training_tasks(self.session, batch, step)
        waits = self.recovery is not None
        with self.engine_lock, self.clock.span(step_clock.EXPLORE):
            result = self.scheduler.run(tasks, wait_for_engines=waits)
        while result.unserved:  # no engine lives: fresh ones, with the trainer's weights, run the rest of the batch
            if not self._replace_dead_engines():
                raise _Unstored(step + 1)  # the run stops: a resumed run explores this batch again
            with self.engine_lock, self.clock.span(step_clock.EXPLORE):
                result = self.scheduler.run(tasks, wait_for_engines=True, resume=result)
        experiences = result.experiences
        if result.failures:
            logger.warning("step %d: %d task(s) failed: %s", step + 1, len(result.failures), result.failures[0].error)
            check_step_failures(result, step + 1)
        dropped = int(result.metrics.get("dropped_groups", 0) + result.metrics.get("abandoned_groups", 0))
        if not experiences:
            logger.warning(
                "step %d: no group completed (%d dropped); the step adds nothing to train on", step + 1, dropped
            )
        self.tasks.feedback(experiences)  # a selector learns how its tasks went before it picks the next ones
        position = self.tasks.state_dict()
        with self._store_lock:
            stored = self.pipeline.write_step(experiences, batch=step, dropped_groups=dropped)
            pipeline_metrics = self.pipeline.step_metrics()
            sizes = group_sizes(stored)
            groups = len(sizes)
            with self.cond:
                self.untaken.add(sizes, dropped)
                self.explored_groups += groups
                self.explored_places += groups + dropped
                self.explored.append((self.explored_places, position))
                self.stored_position = position
                self.explored_here += 1
                self.cond.notify_all()
        metrics = explore_metrics(result, experiences)
        metrics["explore/stored_experiences"] = float(len(stored))
        metrics.update(pipeline_metrics)
        versions = [int(e.model_version) for e in experiences]
        if versions:
            metrics["explore/model_version"] = float(min(versions))
        self._log(metrics, step + 1, PHASE_EXPLORE)
        self._replace_dead_engines()
        return True

    def _replace_dead_engines(self) -> bool:
        """Start a fresh engine for each that died; wait until the trainer admits them with a sync of its weights.

        Returns False when the run stops meanwhile (a run stopping on a signal replaces no engine).
        """
        if stop.signalled():
            return False
        if self.recovery is None or not self.recovery.prepare(self.scheduler.dead_engine_handles()):
            return not self.stopping
        begun = reported = time.monotonic()
        with self.cond:
            self.sync_requested = True
            self.cond.notify_all()
            while self.recovery.pending and not self.stopping:
                self.cond.wait(0.2)
                if time.monotonic() - reported >= _REPORT_EVERY_S:
                    reported = time.monotonic()
                    logger.warning("the explorer waits for the trainer to load its weights into the fresh rollout "
                                   "engine(s) %s (%.0f s so far; the trainer syncs after its current step)",
                                   sorted(self.recovery.pending), reported - begun)
            return not self.stopping

    def _request_sync(self) -> None:
        """``explorer_driven``: every ``sync_interval`` explorer steps, wait for a sync of the trainer's weights."""
        if self.tasks.position.step % self.plan.sync.interval:
            return
        with self.cond:
            if self.trainer.step == self.synced_version:
                return  # nothing new to load
            self.sync_requested = True
            self.cond.notify_all()
            while self.sync_requested and not self.stopping:
                self.cond.wait()

    # -- the trainer (main thread) ------------------------------------------------------------------------

    def _trainer_main(self) -> None:
        while not self._trainer_done() and not stop.requested():
            groups = self._wait_for_batch()
            if groups is None:
                break  # the tasks ran out (or a stop was requested)
            if groups == _REPLAY_ONLY:
                self._train(0, replay_only=True)
            elif not groups:
                self._skip()
            elif not self._train(groups):
                break  # the strategy dropped every group left as stale, and no more will come
        if stop.requested():
            self._save_on_stop()
            raise stop.terminated()

    def _save_on_stop(self) -> None:
        """Checkpoint the last whole step (unless it has one already) and log what the stop kept."""
        from trinity.launcher.steps import save_on_stop
        from trinity.trainer.checkpoint import CheckpointDir

        saved = int(self.trainer.step) in CheckpointDir(self.trainer.checkpoint_dir).complete_steps()
        save_on_stop(self.trainer, self.checkpoint_state(), saved=saved)

    def _trainer_done(self) -> bool:
        limit = self.plan.trainer.total_steps
        return limit is not None and self.trainer.step >= limit

    def _wait_for_batch(self) -> int | None:
        """Take the next step's places once explored; return its stored groups (None: no more will come)."""
        with self.cond:
            try:
                while True:
                    if self.error is not None:
                        raise self.error
                    if stop.requested():
                        return None
                    if self.sync_requested:
                        self.cond.release()
                        try:
                            self._sync_now(self.trainer.step)
                        finally:
                            self.cond.acquire()
                        continue
                    self._absorb_stale_drops()
                    step = self.untaken.next_step(final=self.exhausted)  # the last step may be smaller
                    if step is not None:
                        return self._take(step.places)
                    if self.exhausted:
                        return None
                    if self._may_replay():
                        return _REPLAY_ONLY
                    self.trainer_waiting = True
                    self.cond.notify_all()
                    asleep = time.monotonic()
                    self.cond.wait(0.2)
                    self._batch_wait_s += time.monotonic() - asleep
            finally:
                self.trainer_waiting = False

    def _may_replay(self) -> bool:
        """Whether the trainer may train on replayed groups alone while no fresh batch is there.

        Only with experience replay and ``sync_style: explorer_driven``, where
        the trainer need not keep pace with the explorer (as upstream).
        """
        can_replay = getattr(self.strategy, "can_replay", None)
        return self.style == "explorer_driven" and can_replay is not None and bool(can_replay())

    def _absorb_stale_drops(self) -> None:
        """Count the groups the strategy dropped as stale as consumed places of the oldest batches not yet taken.

        A step that drops stale groups reads as many more from the batches
        after its own, so those groups are gone when their batch's turn comes.
        """
        extra = self._dropped() - self.absorbed
        if extra:
            self.absorbed += extra
            self.untaken.absorb(extra)

    def _take(self, places: int) -> int:
        """Take ``places`` from the oldest explored batches (a batch's stored groups first); return the groups."""
        groups, _ = self.untaken.take(places)
        self.taken_places += places
        self.taken_groups += groups
        return groups

    def _release(self) -> None:
        """Let the backlog count from the places taken so far."""
        with self.cond:
            while self.explored and self.explored[0][0] <= self.taken_places + self._dropped():
                self.consumed_places, self.consumed_position = self.explored.popleft()
            self.released_places = self.taken_places
            self.cond.notify_all()

    def _skip(self) -> None:
        """A step whose places the explorer dropped entirely: nothing to train on, so it is skipped."""
        self.skipped_batches += 1
        logger.warning(
            "a training batch of %d groups is skipped: the explorer dropped every one of them "
            "(their rollouts failed); %d batch(es) skipped so far",
            self.groups_per_step,
            self.skipped_batches,
        )
        self._release()

    def _train(self, groups: int, *, replay_only: bool = False) -> bool:
        """Train one step on ``groups`` fresh groups (or on replayed ones alone); False when none were left."""
        from trinity.monitor.keys import PHASE_TRAIN

        plan = self.plan
        timeout = plan.buffer.experience.read_timeout if plan.buffer.experience else None
        version = self.trainer.step
        try:
            if replay_only:
                experiences = self.strategy.sample_replay(version)
                if not experiences:
                    return True
            else:
                experiences = self.strategy.sample(trainer_version=version, timeout=timeout, groups=groups)
        except BufferExhaustedError:
            logger.info("the explorer is done and the sample strategy dropped every group left; training stops")
            return False
        logger.info(
            "train step %d: %d experiences of groups %s, model versions %s",
            version + 1,
            len(experiences),
            " ".join(dict.fromkeys(str(e.group_id) for e in experiences)),
            sorted({int(e.model_version) for e in experiences}),
        )
        metrics = self._timed_train_step(experiences)
        self.trained_here += 1
        metrics.update(self._strategy_metrics())
        if self.skipped_batches:
            metrics["buffer/skipped_batches"] = float(self.skipped_batches)
        if experiences:
            metrics["buffer/trained_staleness"] = float(version - min(int(e.model_version) for e in experiences))
        step = self.trainer.step
        if self.style != "explorer_driven" and self.sync.policy.should_sync(step):
            metrics.update(self._sync_now(step))
        metrics.update(self.clock.close_step())  # closed before the explorer may start the next batch
        metrics[EXPLORE_WAIT_SECONDS], self._batch_wait_s = self._batch_wait_s, 0.0
        self._release()
        self._log(metrics, step, PHASE_TRAIN)
        interval = plan.explorer.eval_interval
        if plan.buffer.eval_tasksets and interval and step % interval == 0:
            self._evaluate(step)
        return True

    def _timed_train_step(self, experiences: list[Any]) -> dict[str, float]:
        """Run the trainer's step, counting its update as training and the checkpoint it saved (if any) as saving."""
        started = time.monotonic()
        if self.plan.explorer.rollout.sleep_mode:  # colocated: the engine hands the device to the trainer
            with self.engine_lock:  # between rollout batches; the next use (the sync's load) wakes it
                self._call_engines("sleep")
        version = self.trainer.step + 1
        publish = self._publish_target(version)
        if publish is None:
            metrics: dict[str, float] = self.trainer.train_step(experiences, checkpoint_extra=self.checkpoint_state)
        else:
            metrics = self.trainer.train_step(experiences, checkpoint_extra=self.checkpoint_state, publish=publish)
            if self.trainer.last_publication is not None:
                self.sync.note_published(version, self.trainer.last_publication)
        self.clock.add_training(started, time.monotonic(), float(metrics.get(SAVE_SECONDS, 0.0)))
        return metrics

    def _publish_target(self, version: int) -> tuple[str, int] | None:
        """Where the trainer writes ``version``'s weights within its step, when the sync after it allows that.

        Only the serial loop (``sync_offset: 0``): no rollout runs between the
        step and its sync there, so an engine reading the shared file cannot
        take the new weights before the sync hands them over.
        """
        if self.plan.sync.offset != 0 or self.style == "explorer_driven" or not self.sync.policy.should_sync(version):
            return None
        target: tuple[str, int] | None = self.sync.publish_target(version)
        return target

    def _call_engines(self, method: str) -> None:
        """Call ``method`` on every rollout engine (Ray actors or in-process); a dead one is left to the sync.

        The sync that follows finds a dead engine and replaces it (see :mod:`trinity.explorer.recovery`).
        """
        import ray
        from ray.exceptions import RayActorError

        from trinity.common.models.client import is_actor

        calls = [(index, getattr(e, method).remote()) for index, e in enumerate(self.engines) if is_actor(e)]
        for engine in self.engines:
            if not is_actor(engine):
                getattr(engine, method)()
        for index, call in calls:
            try:
                ray.get(call)
            except RayActorError:
                logger.warning("engine %d died before it could %s; the next sync replaces it", index, method)

    def _log_restored_row(self, row: dict[str, float], report: Any) -> None:
        """Log the resumed checkpoint's step row its run did not log, with the resumed run's first sync's metrics."""
        from trinity.monitor.keys import PHASE_TRAIN, SYNC_SECONDS

        step = self.trainer.step
        metrics = {**row, **report.metrics(), SYNC_SECONDS: report.seconds}
        if self.plan.sync.verify_checksums and self.verify is not None:
            metrics["sync/checksum_match"] = self.verify(self.trainer, self.engines, step, self.sync.takes_adapters())
        logger.info("train step %d: its row was not logged before the run stopped; logged from its checkpoint", step)
        self._log(metrics, step, PHASE_TRAIN)

    def _strategy_metrics(self) -> dict[str, float]:
        stats = getattr(self.strategy, "stats", None) or {}
        keys = ("stale_dropped_groups", "stale_weighted_groups", "max_seen_staleness")
        metrics = {f"buffer/{key}": float(stats[key]) for key in keys if key in stats}
        metrics.update({key: float(value) for key, value in stats.items() if key.startswith("replay/")})
        return metrics

    def _sync_now(self, version: int) -> dict[str, float]:
        """Push the trainer's weights to the engines between two rollout batches; return the sync's metrics."""
        from trinity.monitor.keys import SYNC_SECONDS, SYNC_WAIT_SECONDS

        asked = time.monotonic()
        with self.engine_lock, self.clock.span(step_clock.SYNC):  # a rollout batch in flight finishes first
            waited = time.monotonic() - asked
            # fresh engines replacing dead ones join here, and an engine found dead by the sync is replaced
            report = (
                self.recovery.sync(self.sync, version) if self.recovery is not None else self.sync.sync(version=version)
            )
            metrics: dict[str, float] = dict(report.metrics())
            metrics[SYNC_SECONDS] = report.seconds
            metrics[SYNC_WAIT_SECONDS] = waited
            if self.plan.sync.verify_checksums and self.verify is not None:
                metrics["sync/checksum_match"] = self.verify(self.trainer, self.engines, version,
                                                             self.sync.takes_adapters())
        with self.cond:
            self.synced_version = version
            self.sync_requested = False
            self.cond.notify_all()
        return metrics

    def _evaluate(self, step: int) -> None:
        from trinity.monitor.keys import PHASE_EVAL

        with self.engine_lock, self.clock.span(step_clock.EVAL):
            metrics = evaluate(self.plan, self.scheduler, step)
        self._log(metrics, step, PHASE_EVAL)

    def _log(self, metrics: dict[str, float], step: int, phase: str) -> None:
        with self._monitor_lock:
            self.monitor.log(metrics, step=step, phase=phase)

    def _finish(self) -> None:
        plan = self.plan
        final = self.trainer.step
        if self.started_at == 0:
            why = (f"{self.explored_groups} group(s) stored, {self.skipped_batches} training batch(es) skipped "
                   f"because the explorer dropped every group of them, {self._dropped()} group(s) dropped as stale")
            if filtered := self.pipeline.operator_dropped():
                why += f", {filtered} experience(s) dropped by the experience operators"
            if flat := self.pipeline.group_filter_dropped():
                why += (f", {flat} experience(s) dropped in groups whose rewards did not spread more than "
                        "algorithm.advantage_fn_args.std_threshold")
            check_trained(self.trained_here, self.explored_here, why)
        interval = plan.explorer.eval_interval
        if plan.buffer.eval_tasksets and not (interval and final % interval == 0):
            if self.synced_version != final:
                self._sync_now(final)
            self._evaluate(final)
        if not plan.trainer.save_interval or final % plan.trainer.save_interval:
            self.trainer.save_checkpoint(self.checkpoint_state(), final=True)
        elif plan.trainer.save_hf == "last":
            self.trainer.export_hf()

    # -- checkpoints ----------------------------------------------------------------------------------------

    def _storages(self) -> dict[str, Any]:
        """Return the storages whose write end a checkpoint keeps, by name: the experience buffer and the recorder."""
        found = {"experience": self.storage, "recorded": getattr(self.pipeline, "recorder", None)}
        return {name: storage for name, storage in found.items() if storage is not None}

    def checkpoint_state(self) -> dict[str, Any]:
        """Return what a checkpoint taken now stores for :meth:`restore` (JSON-serialisable).

        Call it from the trainer thread between reading a step's batch and the
        next read. ``tasks`` is the task position the explorer continues from
        and ``written`` where each persistent storage's data ends. With a
        persistent experience buffer also ``strategy`` (the sample strategy's
        state) and ``loop`` (the place counters); with a queue,
        ``retrained_places``: places before the checkpoint that a resumed run
        explores and trains again.
        """
        with self._store_lock, self.cond:
            written = {name: storage.end_position() for name, storage in self._storages().items()}
            written = {name: position for name, position in written.items() if position}
            if "experience" not in written:
                position, retrained = self._consumed()
                state = {"tasks": dict(position), "written": written, "retrained_places": retrained}
                pool = getattr(self.strategy, "pool", None)
                if pool is not None:  # the replay pool outlives a queue buffer: its file keeps every group
                    state["replay_tick"] = pool.tick
                return state
            loop = {
                "explored_places": self.explored_places,
                "explored_groups": self.explored_groups,
                "taken_places": self.taken_places,
                "taken_groups": self.taken_groups,
                "skipped_batches": self.skipped_batches,
                "absorbed": self.absorbed,
                "untaken": self.untaken.state(),
                "explored": [[places, dict(position)] for places, position in self.explored],
                "consumed": [self.consumed_places, dict(self.consumed_position)],
            }
            return {
                "tasks": dict(self.stored_position),
                "written": written,
                "strategy": self.strategy.state_dict(),
                "loop": loop,
            }

    def _consumed(self) -> tuple[dict[str, Any], int]:
        """Return the task position after the last batch wholly consumed, and the places consumed beyond it."""
        consumed = self.taken_places + self._dropped()
        places, position = self.consumed_places, self.consumed_position
        for after, state in self.explored:
            if after > consumed:
                break
            places, position = after, state
        return position, max(0, consumed - places)

    def start_afresh(self) -> int:
        """Empty the persistent storages before a run that loads no checkpoint; return how many experiences it cut.

        What they hold was written by an earlier run of this folder whose work
        no checkpoint kept (it was killed before its first save, or the user
        set ``continue_from_checkpoint: false``): this run explores every batch
        again, so keeping those rows would train their groups twice.
        """
        cut = 0
        for storage in self._storages().values():
            end = storage.end_position()
            if not any(end.values()):
                continue
            dropped = storage.truncate(dict.fromkeys(end, 0))
            if dropped:
                logger.warning(
                    "%s: dropped %d experience(s) of an earlier run that saved no checkpoint; this run "
                    "explores from the first batch",
                    storage.describe(),
                    dropped,
                )
            cut += dropped
        return cut

    def restore(self, extra: dict[str, Any]) -> None:
        """Continue from a checkpoint's :meth:`checkpoint_state` (call before :meth:`run`).

        Drops what each storage stored after the checkpoint, restores the
        sample strategy and the counters. Raises StorageError when the
        checkpoint kept batches in a persistent buffer that this run does not
        have (or that was replaced), and TaskPositionError when the task set changed.
        """
        self.tasks.load_state_dict(extra["tasks"])
        self.stored_position = self.consumed_position = self.tasks.state_dict()
        storages = self._storages()
        for name, position in (extra.get("written") or {}).items():
            storage = storages.get(name)
            if storage is None or not storage.end_position():
                if name != "experience":
                    continue  # the recorder was switched off or moved: nothing of it to cut
                raise StorageError(
                    "the checkpoint kept batches explored ahead in a persistent experience buffer, but this run's "
                    f"buffer is {storage.describe() if storage is not None else 'absent'}; resume with the same "
                    "buffer settings, or set continue_from_checkpoint: false to start afresh"
                )
            cut = storage.truncate(position)
            if cut:
                logger.info(
                    "%s: dropped %d experience(s) stored after the checkpoint; their batches are explored again",
                    storage.describe(),
                    cut,
                )
        loop = extra.get("loop")
        if loop is None:
            if "replay_tick" in extra and hasattr(self.strategy, "restore_pool"):
                self.strategy.restore_pool(int(extra["replay_tick"]))
            retrained = int(extra.get("retrained_places", 0))
            if retrained:
                logger.warning(
                    "the checkpoint was taken in the middle of an explorer batch: %d group(s) consumed "
                    "before it are explored and trained again, because a queue buffer does not outlive "
                    "the run; use a persistent buffer (storage_type: sql) to resume exactly",
                    retrained,
                )
            return
        self.strategy.load_state_dict(extra["strategy"])
        self.explored_places = int(loop["explored_places"])
        self.explored_groups = int(loop["explored_groups"])
        self.taken_places = self.released_places = int(loop["taken_places"])
        self.taken_groups = int(loop["taken_groups"])
        self.skipped_batches = int(loop["skipped_batches"])
        self.absorbed = int(loop.get("absorbed", 0))
        usual = getattr(self.strategy, "usual", self.strategy)  # mix: its rollout strategy
        self.untaken.load(loop["untaken"], int(getattr(getattr(usual, "assembler", None), "group_size", 1)))
        self.explored = collections.deque((int(places), dict(position)) for places, position in loop["explored"])
        self.consumed_places, self.consumed_position = int(loop["consumed"][0]), dict(loop["consumed"][1])
