"""Mode ``train``: train on experiences from a persistent buffer, or on an SFT/DPO data set."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from trinity.launcher.device_record import write_device_record
from trinity.launcher.explore import warn_if_not_persistent
from trinity.launcher.placement import place
from trinity.launcher.session import Session
from trinity.launcher.steps import monitor_for, strategy_for, write_ray_timeline

logger = logging.getLogger("trinity.launcher")


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
    return strategy_for(session, storage, count_dropped=True), storage


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
    """
    from trinity.buffer import BufferExhaustedError, StorageTimeoutError
    from trinity.common.constants import SyncMethod
    from trinity.monitor.keys import PHASE_TRAIN, SYNC_SECONDS
    from trinity.synchronizer.checkpoint_sync import read_version
    from trinity.synchronizer.synchronizer import Synchronizer, default_sync_path
    from trinity.trainer.trainer import FSDPTrainer

    plan, layout = session.plan, session.layout
    with contextlib.ExitStack() as stack:
        source, storage = _experience_source(session, stack)
        steps = train_steps(session, source)
        placement = place(plan, layout)
        stack.callback(placement.remove)
        trainer = FSDPTrainer(plan, world_size=layout.trainers, use_torch_compile=layout.use_torch_compile,
                              total_steps=steps, checkpoint_dir=session.run_dir / "checkpoints",
                              placement_group=placement.trainer_group)
        stack.callback(trainer.shutdown)
        write_device_record(session, trainer)
        resumed = trainer.resume() if plan.config.continue_from_checkpoint else None
        sampler = (resumed["extra"] or {}).get("sampler") if resumed is not None else None
        if sampler:
            source.load_state_dict(sampler)
        elif resumed is None and storage is not None and storage.state_dict().get("read_offset"):
            # no checkpoint: the weights are the starting model's, so every experience is still to be trained on
            logger.info("train: no checkpoint in %s; reading %s from its first experience",
                        trainer.checkpoint_dir, storage.describe())
            source.load_state_dict({"storage": {"read_offset": 0}})
        if resumed is not None:
            logger.info("train resumes from %s at step %d", resumed["path"], resumed["step"])
        sync_path = default_sync_path(plan)
        publish = Synchronizer(SyncMethod("checkpoint"), trainer, [], plan.sync, checkpoint_path=sync_path)
        stack.callback(publish.close)
        monitor = monitor_for(session, steps)
        stack.callback(monitor.close)
        if resumed is not None:
            monitor.mark_resume(resumed["step"])
        stack.callback(write_ray_timeline, session)
        saved = published = trainer.step
        if trainer.step and read_version(sync_path) != trainer.step:  # stopped between its checkpoint and publishing
            publish.sync(version=trainer.step)
        limit = plan.trainer.total_steps or plan.buffer.total_steps
        interval = plan.trainer.save_interval
        timeout = plan.buffer.experience.read_timeout if plan.buffer.experience is not None else None
        waited: StorageTimeoutError | None = None
        while not limit or trainer.step < limit:
            try:
                experiences = source.sample(trainer_version=trainer.step, timeout=timeout)
            except BufferExhaustedError:
                logger.info("train: %s is exhausted; stopping after step %d", source.describe(), trainer.step)
                break
            except StorageTimeoutError as exc:
                waited = exc
                break
            metrics = trainer.train_step(experiences, checkpoint_extra={"sampler": source.state_dict()})
            step = trainer.step
            if interval > 0 and step % interval == 0:
                saved = step
            if publish.policy.should_sync(step):
                report = publish.sync(version=step)
                metrics.update(report.metrics())
                metrics[SYNC_SECONDS] = report.seconds
                published = step
            monitor.log(metrics, step=step, phase=PHASE_TRAIN)
        if trainer.step != saved:
            trainer.save_checkpoint({"sampler": source.state_dict()}, final=True)
        elif trainer.step and plan.trainer.save_hf == "last":
            trainer.export_hf()
        if trainer.step != published:
            publish.sync(version=trainer.step)
        if waited is not None:
            raise waited
