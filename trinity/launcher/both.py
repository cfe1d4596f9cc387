"""Mode ``both``: the explorer rolls out, the trainer steps, the synchronizer pushes weights, concurrently.

The explorer rolls out a batch of ``buffer.batch_size`` tasks on the engines
and the pipeline stores its experiences, each task's as one group however
many there are; the trainer takes a step whenever ``buffer.batch_size`` tasks
are in (with ``buffer.train_batch_size`` set: whole tasks up to that many
experiences, :mod:`trinity.launcher.untaken`); the synchronizer pushes the
new weights every ``sync_interval`` steps. Groups whose rollouts failed
are dropped from their step (it trains on the complete ones; a step left with
none is skipped and logged). Groups the algorithm filters out
(``std_threshold``) do not count: the explorer rolls out more before the
trainer steps. The explorer and the trainer run at the
same time (:mod:`trinity.launcher.both_loop`); with ``sync_offset`` > 0 the
explorer runs that many training batches ahead (its experiences are then that
much off-policy). A rollout engine whose process dies is replaced by a fresh one,
which the trainer's weights reach before it rolls out
(:mod:`trinity.explorer.recovery`). A run is resumable: each checkpoint stores the loop's state
(:meth:`BothLoop.checkpoint_state`: with a persistent buffer the batches
explored ahead stay and are trained after the resume), and the same command
continues after it, training every step once.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from trinity.launcher.both_loop import BothLoop
from trinity.launcher.device_record import write_device_record
from trinity.launcher.placement import place
from trinity.launcher.session import Session
from trinity.launcher.steps import (
    monitor_for,
    pipeline_for,
    recorder_for,
    recovery_for,
    scheduler_for,
    start_engines,
    strategy_for,
    total_train_steps,
    write_ray_timeline,
)

logger = logging.getLogger("trinity.launcher")


class SyncMismatchError(RuntimeError):
    """After a sync, an engine's weights differ from the trainer's."""


def verify_sync(trainer: Any, engines: list[Any], version: int, adapters: bool = False) -> float:
    """Return 1.0 when every engine holds exactly the trainer's weights at ``version``; raise otherwise.

    ``adapters``: the engines serve the trainer's LoRA adapter from a slot
    (:meth:`Synchronizer.takes_adapters`), so the adapters are compared.
    """
    import ray

    expected = trainer.state_dict_checksums(adapter=True) if adapters else trainer.state_dict_checksums()
    if len(set(expected)) != 1:
        raise SyncMismatchError(f"trainer ranks disagree on the weights at step {version}: {expected}")
    from ray.exceptions import RayActorError

    asked = [(e.state_dict_checksum.remote(), e.model_version.remote()) for e in engines]
    found: dict[int, tuple[str, int]] = {}
    for index, (checksum, held) in enumerate(asked):
        try:
            found[index] = (ray.get(checksum), ray.get(held))
        except RayActorError:  # died since the sync: replaced before it rolls out, and checked at that sync
            logger.warning("engine %d died after the sync of step %d; its weights are not checked", index, version)
    bad = [i for i, (c, v) in found.items() if c != expected[0] or v != version]
    if bad:
        raise SyncMismatchError(
            f"after the sync of step {version}, engine(s) {bad} hold other weights than the trainer "
            f"(checksums {[found[i][0][:12] for i in bad]} vs {expected[0][:12]}, "
            f"versions {[found[i][1] for i in bad]})"
        )
    return 1.0


def run_both(session: Session) -> None:
    """Explore and train in one loop on one Ray cluster (see the module docstring)."""
    from trinity.buffer import TaskScheduler, make_storage
    from trinity.launcher.restored_row import logged_before, missing_train_row
    from trinity.synchronizer.synchronizer import Synchronizer, default_shared_path, default_sync_path
    from trinity.trainer.trainer import FSDPTrainer

    plan, layout = session.plan, session.layout
    assert plan.buffer.experience is not None
    tasks = TaskScheduler.for_training(plan.buffer)
    with contextlib.ExitStack() as stack:
        placement = place(plan, layout)
        stack.callback(placement.remove)
        trainer = FSDPTrainer(
            plan,
            world_size=layout.trainers,
            use_torch_compile=layout.use_torch_compile,
            total_steps=total_train_steps(session, tasks.total_batches),
            checkpoint_dir=session.run_dir / "checkpoints",
            placement_group=placement.trainer_group,
            device_share=placement.trainer_device_share,
        )
        stack.callback(trainer.shutdown)
        engines = start_engines(session, placement)
        stack.callback(engines.shutdown)
        write_device_record(session, trainer, engines)
        # the explorer and the trainer are threads of this process: the queue needs no actor in between
        storage = make_storage(plan.buffer.experience, run_dir=session.run_dir, in_process=True)
        stack.callback(storage.close)
        pipeline = pipeline_for(session, storage, trainer.pad_token_id, recorder_for(session), engines)
        stack.callback(pipeline.close)
        stack.callback(pipeline.finish)
        strategy = strategy_for(session, storage)
        resumed = trainer.resume() if plan.config.continue_from_checkpoint else None
        sync = Synchronizer(
            layout.sync_method, trainer, engines.rollout, plan.sync, checkpoint_path=default_sync_path(plan),
            shared_path=default_shared_path(plan),
        )
        stack.callback(sync.close)
        scheduler = scheduler_for(session, engines)
        recovery = recovery_for(session, engines, [scheduler, sync])
        stack.callback(recovery.close)
        monitor = monitor_for(session, total_train_steps(session, tasks.total_batches))
        stack.callback(_close_monitor, monitor)
        stack.callback(write_ray_timeline, session)
        loop = BothLoop(
            session,
            tasks=tasks,
            trainer=trainer,
            engines=engines.rollout,
            pipeline=pipeline,
            strategy=strategy,
            sync=sync,
            scheduler=scheduler,
            monitor=monitor,
            verify=verify_sync,
            storage=storage,
            recovery=recovery,
        )
        if resumed is not None:
            loop.restored_row = missing_train_row(session.run_dir, resumed)
            loop.restore(resumed["extra"] or {})
            logger.info(
                "resumed from %s at step %d; exploring from batch %d",
                resumed["path"],
                resumed["step"],
                tasks.position.step + 1,
            )
            monitor.mark_resume(resumed["step"], {"explore": tasks.position.step})
        else:
            loop.start_afresh()
            if logged_before(session.run_dir):  # a killed run's rows: this run logs their steps again
                monitor.mark_resume(0)
        loop.run(resumed is not None)


def _close_monitor(monitor: Any) -> None:
    plot = monitor.close()
    if plot is not None:
        logger.info("reward curve: %s", plot)
