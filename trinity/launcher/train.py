"""Mode ``train``: train on experiences from a persistent buffer, or on an SFT/DPO data set."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from trinity.launcher.device_record import write_device_record
from trinity.launcher.explore import warn_if_not_persistent
from trinity.launcher.placement import place
from trinity.launcher.session import Session
from trinity.launcher.steps import NothingTrainedError, monitor_for, save_on_stop, strategy_for, write_ray_timeline
from trinity.utils import stop

logger = logging.getLogger("trinity.launcher")

#: Longest wait for a batch between two looks at a deferred SIGTERM (``trainer.save_on_stop``).
STOP_POLL_S = 0.5


def _experience_source(session: Session, stack: contextlib.ExitStack) -> tuple[Any, Any]:
    """Return ``(source, storage)``: where the trainer's batches come from (storage None for a data set)."""
    from trinity.buffer import make_storage

    plan = session.plan
    if plan.buffer.dataset is not None:
        from trinity.buffer.dataset_source import DatasetSource

        return DatasetSource.for_plan(plan), None
    assert plan.buffer.experience is not None
    warn_if_not_persistent(session)
    storage = make_storage(plan.buffer.experience, run_dir=session.run_dir)
    stack.callback(storage.release)  # a reader never closes the buffer: that is for its writers
    return strategy_for(session, storage, count_dropped=True, replay_when_starved=True), storage


def sample_until_stopped(source: Any, trainer_version: int, timeout: float | None) -> Any:
    """Return the next batch of ``source`` like ``source.sample``, or None once a deferred SIGTERM arrived.

    The wait is cut into slices of :data:`STOP_POLL_S` so that a stop
    requested while the buffer is empty is seen at once; a source keeps what
    it read between slices. Raises StorageTimeoutError after ``timeout``
    seconds in all.
    """
    from trinity.buffer import StorageTimeoutError

    begin = time.monotonic()
    while True:
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - begin))
        try:
            return source.sample(
                trainer_version=trainer_version, timeout=STOP_POLL_S if left is None else min(STOP_POLL_S, left)
            )
        except StorageTimeoutError:
            if stop.requested():
                return None
            if timeout is not None and time.monotonic() - begin >= timeout:
                raise StorageTimeoutError(
                    f"{source.describe()}: waited {timeout:g} s for a batch; is the explorer running?"
                ) from None
        if stop.requested():
            return None


def train_steps(session: Session, source: Any) -> int | None:
    """Return the steps this train job will take when known (a data set's epochs, or the step limit)."""
    plan = session.plan
    limit = plan.trainer.total_steps or plan.buffer.total_steps
    total = getattr(source, "total_batches", None)
    if total is None:
        return limit
    return min(int(total), limit) if limit else int(total)


def run_train(session: Session) -> None:
    """Train until the step limit or until the data runs out; publish weights to the checkpoint sync folder.

    Steps run until ``trainer.total_steps`` / ``buffer.total_steps`` (none: no
    limit) or until the source is exhausted: a buffer closed by its explore job
    and fully read, or a data set's ``total_epochs`` passes. Then the job stops
    cleanly: the last step is checkpointed and published (nothing is saved when
    no step was taken). While a buffer is open but empty it waits up to its
    ``max_read_timeout`` seconds, then saves and publishes its progress the same
    way and fails with the storage's timeout error.

    Every ``synchronizer.sync_interval`` steps (and after the last one) the
    weights are published to the checkpoint sync folder with the step as their
    version, whatever ``synchronizer.sync_method`` says: an explore job picks
    them up from there. A checkpoint stores the read position; the same
    command resumes after the latest checkpoint.

    With ``trainer.save_on_stop`` a SIGTERM lets the step in flight finish,
    checkpoints it and then stops the job (:class:`~trinity.utils.stop.Terminated`);
    without it SIGTERM stops at once, like Ctrl-C. SIGUSR1 (the early warning
    of a batch scheduler) always does the former.

    Each step's record splits its wall time as mode both does
    (:mod:`trinity.monitor.step_clock`); rollouts run in another job, so
    ``time/explore_s`` is 0, and ``time/explore_wait_s`` is the time spent
    reading (and waiting for) the step's batch, which counts as driver time.
    """
    from trinity.buffer import BufferExhaustedError, StorageTimeoutError
    from trinity.common.constants import SyncMethod
    from trinity.launcher.restored_row import logged_before, missing_train_row
    from trinity.monitor.keys import EXPLORE_WAIT_SECONDS, PHASE_TRAIN, SAVE_SECONDS, SYNC_SECONDS
    from trinity.monitor.step_clock import SYNC, StepClock
    from trinity.synchronizer.checkpoint_sync import read_version
    from trinity.synchronizer.synchronizer import Synchronizer, default_sync_path
    from trinity.trainer.trainer import FSDPTrainer

    plan, layout = session.plan, session.layout
    with contextlib.ExitStack() as stack:
        source, storage = _experience_source(session, stack)
        steps = train_steps(session, source)
        placement = place(plan, layout)
        stack.callback(placement.remove)
        trainer = FSDPTrainer(
            plan,
            world_size=layout.trainers,
            use_torch_compile=layout.use_torch_compile,
            total_steps=steps,
            checkpoint_dir=session.run_dir / "checkpoints",
            placement_group=placement.trainer_group,
        )
        stack.callback(trainer.shutdown)
        write_device_record(session, trainer)
        resumed = trainer.resume() if plan.config.continue_from_checkpoint else None
        sampler = (resumed["extra"] or {}).get("sampler") if resumed is not None else None
        if sampler:
            source.load_state_dict(sampler)
        elif resumed is None and storage is not None and storage.state_dict().get("read_offset"):
            # no checkpoint: the weights are the starting model's, so every experience is still to be trained on
            logger.info(
                "train: no checkpoint in %s; reading %s from its first experience",
                trainer.checkpoint_dir,
                storage.describe(),
            )
            source.load_state_dict({"storage": {"read_offset": 0}})
        if resumed is not None:
            logger.info("train resumes from %s at step %d", resumed["path"], resumed["step"])
        sync_path = default_sync_path(plan)
        publish = Synchronizer(SyncMethod("checkpoint"), trainer, [], plan.sync, checkpoint_path=sync_path)
        stack.callback(publish.close)
        monitor = monitor_for(session, steps)
        stack.callback(monitor.close)
        if resumed is not None:
            restored_row = missing_train_row(session.run_dir, resumed)
            # an explore job may log into the same file: this marker supersedes the trainer's rows only
            monitor.mark_resume(resumed["step"], scope=(PHASE_TRAIN,))
            if restored_row is not None:
                logger.info(
                    "train step %d: its row was not logged before the run stopped; logged from its checkpoint",
                    resumed["step"],
                )
                monitor.log(restored_row, step=resumed["step"], phase=PHASE_TRAIN)
        elif logged_before(session.run_dir, (PHASE_TRAIN,)):  # a killed run's rows: this run logs their steps again
            monitor.mark_resume(0, scope=(PHASE_TRAIN,))
        stack.callback(write_ray_timeline, session)
        saved = published = trainer.step
        if trainer.step and read_version(sync_path) != trainer.step:  # stopped between its checkpoint and publishing
            publish.sync(version=trainer.step)
        limit = plan.trainer.total_steps or plan.buffer.total_steps
        interval = plan.trainer.save_interval
        timeout = plan.buffer.experience.read_timeout if plan.buffer.experience is not None else None
        waited: StorageTimeoutError | None = None
        if plan.trainer.save_on_stop:
            stack.enter_context(stop.deferred())
        clock = StepClock()  # no rollouts in this job: a step is reading, training, saving, publishing
        while not limit or trainer.step < limit:
            reading = time.monotonic()
            try:
                experiences = sample_until_stopped(source, trainer.step, timeout)  # None: asked to save and stop
                if experiences is None:
                    break
            except BufferExhaustedError:
                logger.info("train: %s is exhausted; stopping after step %d", source.describe(), trainer.step)
                break
            except StorageTimeoutError as exc:
                waited = exc
                break
            logger.info(
                "train step %d: %d experiences of groups %s, model versions %s",
                trainer.step + 1,
                len(experiences),
                " ".join(dict.fromkeys(str(e.group_id) for e in experiences)),
                sorted({int(e.model_version) for e in experiences}),
            )
            started = time.monotonic()
            metrics = trainer.train_step(experiences, checkpoint_extra={"sampler": source.state_dict()})
            clock.add_training(started, time.monotonic(), float(metrics.get(SAVE_SECONDS, 0.0)))
            step = trainer.step
            if interval > 0 and step % interval == 0:
                saved = step
            if publish.policy.should_sync(step):
                with clock.span(SYNC):
                    report = publish.sync(version=step)
                metrics.update(report.metrics())
                metrics[SYNC_SECONDS] = report.seconds
                published = step
            metrics.update(clock.close_step())
            metrics[EXPLORE_WAIT_SECONDS] = started - reading
            monitor.log(metrics, step=step, phase=PHASE_TRAIN)
            if stop.requested():
                break
        if stop.requested():
            save_on_stop(trainer, {"sampler": source.state_dict()}, saved=trainer.step == saved)
            raise stop.terminated()
        if resumed is None and trainer.step == 0 and waited is None:
            raise NothingTrainedError(f"the run trained no step: {source.describe()} held no batch to train on; "
                                      "check the data set's path, or that an explore job stored experiences there")
        if trainer.step != saved:
            trainer.save_checkpoint({"sampler": source.state_dict()}, final=True)
        elif trainer.step and plan.trainer.save_hf == "last":
            trainer.export_hf()
        if trainer.step != published:
            publish.sync(version=trainer.step)
        if waited is not None:
            raise waited
