"""Mode ``both``: the explorer rolls out, the trainer steps, the synchronizer pushes weights, in one loop.

The explorer rolls out a batch of ``buffer.batch_size`` tasks on the engines
and the pipeline stores its experiences; the trainer takes a step whenever
``buffer.train_batch_size`` experiences (whole groups of ``repeat_times``) are
in; the synchronizer pushes the new weights every ``sync_interval`` steps.
Groups the algorithm drops (``std_threshold``) or whose rollouts failed do not
count: the explorer rolls out more before the trainer steps. With ``sync_offset`` > 0 the explorer
runs that many training batches ahead (its experiences are then that much
off-policy). A run is resumable: each checkpoint stores the task position of
the last batch it trained on, and the same command continues after it.
"""

from __future__ import annotations

import collections
import contextlib
import logging
from typing import Any

from trinity.launcher.device_record import write_device_record
from trinity.launcher.evaluation import evaluate
from trinity.launcher.placement import place
from trinity.launcher.session import Session
from trinity.launcher.steps import (
    explore_metrics,
    monitor_for,
    pipeline_for,
    recorder_for,
    scheduler_for,
    start_engines,
    strategy_for,
    total_train_steps,
    training_tasks,
    write_ray_timeline,
)

logger = logging.getLogger("trinity.launcher")


class SyncMismatchError(RuntimeError):
    """After a sync, an engine's weights differ from the trainer's."""


def verify_sync(trainer: Any, engines: list[Any], version: int) -> float:
    """Return 1.0 when every engine holds exactly the trainer's weights at ``version``; raise otherwise."""
    import ray

    expected = trainer.state_dict_checksums()
    if len(set(expected)) != 1:
        raise SyncMismatchError(f"trainer ranks disagree on the weights at step {version}: {expected}")
    found = ray.get([e.state_dict_checksum.remote() for e in engines])
    versions = ray.get([e.model_version.remote() for e in engines])
    bad = [i for i, (c, v) in enumerate(zip(found, versions, strict=True)) if c != expected[0] or v != version]
    if bad:
        raise SyncMismatchError(
            f"after the sync of step {version}, engine(s) {bad} hold other weights than the trainer "
            f"(checksums {[found[i][:12] for i in bad]} vs {expected[0][:12]}, versions {[versions[i] for i in bad]})"
        )
    return 1.0


def run_both(session: Session) -> None:
    """Explore and train in one loop on one Ray cluster (see the module docstring)."""
    from trinity.buffer import TaskScheduler, make_storage
    from trinity.synchronizer.synchronizer import Synchronizer, default_sync_path
    from trinity.trainer.trainer import FSDPTrainer

    plan, layout = session.plan, session.layout
    assert plan.buffer.experience is not None
    tasks = TaskScheduler.for_training(plan.buffer)
    with contextlib.ExitStack() as stack:
        placement = place(plan, layout)
        stack.callback(placement.remove)
        trainer = FSDPTrainer(plan, world_size=layout.trainers, use_torch_compile=layout.use_torch_compile,
                              total_steps=total_train_steps(session, tasks.total_batches),
                              checkpoint_dir=session.run_dir / "checkpoints", placement_group=placement.trainer_group)
        stack.callback(trainer.shutdown)
        engines = start_engines(session, placement)
        stack.callback(engines.shutdown)
        write_device_record(session, trainer, engines)
        storage = make_storage(plan.buffer.experience, run_dir=session.run_dir)
        stack.callback(storage.close)
        pipeline = pipeline_for(session, storage, trainer.pad_token_id, recorder_for(session))
        stack.callback(pipeline.close)
        stack.callback(pipeline.finish)
        strategy = strategy_for(session, storage)
        resumed = trainer.resume() if plan.config.continue_from_checkpoint else None
        if resumed is not None:
            tasks.load_state_dict((resumed["extra"] or {})["tasks"])
            logger.info("resumed from %s at step %d", resumed["path"], resumed["step"])
        sync = Synchronizer(layout.sync_method, trainer, engines.rollout, plan.sync,
                            checkpoint_path=default_sync_path(plan))
        stack.callback(sync.close)
        scheduler = scheduler_for(session, engines)
        monitor = monitor_for(session, total_train_steps(session, tasks.total_batches))
        stack.callback(_close_monitor, monitor)
        stack.callback(write_ray_timeline, session)
        _Loop(session, tasks=tasks, trainer=trainer, engines=engines.rollout, pipeline=pipeline, strategy=strategy,
              sync=sync,
              scheduler=scheduler, monitor=monitor).run(resumed is not None)


def _close_monitor(monitor: Any) -> None:
    plot = monitor.close()
    if plot is not None:
        logger.info("reward curve: %s", plot)


class _Loop:
    """The explore-train-sync loop of mode both, one small step per method."""

    def __init__(self, session: Session, *, tasks: Any, trainer: Any, engines: list[Any], pipeline: Any,
                 strategy: Any, sync: Any, scheduler: Any, monitor: Any) -> None:
        self.session = session
        self.plan = session.plan
        self.tasks = tasks
        self.trainer = trainer
        self.engines = engines
        self.pipeline = pipeline
        self.strategy = strategy
        self.sync = sync
        self.scheduler = scheduler
        self.monitor = monitor
        #: Rollout groups one training step takes (the strategy's batch; ``mix`` adds its expert rows to it).
        self.groups_per_step = int(strategy.batch_size)
        #: ``(groups stored so far, task position after them)`` per explored batch, oldest first.
        self.explored: collections.deque[tuple[int, dict[str, Any]]] = collections.deque()
        self.explored_total = 0
        self.trained_total = 0
        self.exhausted = False

    def run(self, resumed: bool) -> None:
        """Run until the tasks run out or the trainer reaches its step limit; then evaluate and checkpoint."""
        from trinity.monitor.keys import PHASE_EVAL

        plan = self.plan
        if resumed:  # fresh engines load model_path; after a resume they need the trained weights
            self.sync.sync(version=self.trainer.step)
        if plan.buffer.eval_tasksets and plan.explorer.eval_on_startup and not resumed:
            self.monitor.log(evaluate(plan, self.scheduler, self.trainer.step), step=self.trainer.step,
                             phase=PHASE_EVAL)
        lead = plan.sync.offset
        while not self._trainer_done():
            while not self.exhausted and self.explored_total - self.trained_total < self.groups_per_step * (lead + 1):
                self._explore()
            waiting = self.explored_total - self.trained_total
            if waiting <= 0:
                break  # the tasks ran out
            self._train(min(waiting, self.groups_per_step))  # the last batch may be smaller
        self._finish()

    def _trainer_done(self) -> bool:
        limit = self.plan.trainer.total_steps
        return limit is not None and self.trainer.step >= limit

    def _explore(self) -> None:
        from trinity.monitor.keys import PHASE_EXPLORE

        step = self.tasks.position.step
        batch = self.tasks.next_batch_with_epochs()
        if batch is None:
            self.exhausted = True
            return
        result = self.scheduler.run(training_tasks(self.session, batch, step))
        experiences = result.experiences
        if result.failures:
            logger.warning("step %d: %d task(s) failed: %s", step + 1, len(result.failures), result.failures[0].error)
        dropped = int(result.metrics.get("dropped_groups", 0) + result.metrics.get("abandoned_groups", 0))
        if not experiences:
            logger.warning("step %d: no group completed (%d dropped); the step adds nothing to train on", step + 1,
                           dropped)
        stored = self.pipeline.write_step(experiences, batch=step, dropped_groups=dropped)
        metrics = explore_metrics(result, experiences)
        metrics["explore/stored_experiences"] = float(len(stored))
        self.monitor.log(metrics, step=step + 1, phase=PHASE_EXPLORE)
        self.explored_total += len({e.group_id for e in stored})
        self.explored.append((self.explored_total, self.tasks.state_dict()))

    def _train(self, groups: int) -> None:
        from trinity.monitor.keys import PHASE_TRAIN, SYNC_SECONDS

        plan = self.plan
        timeout = plan.buffer.experience.read_timeout if plan.buffer.experience else None
        experiences = self.strategy.sample(trainer_version=self.trainer.step, timeout=timeout, groups=groups)
        self.trained_total += groups
        position = None
        while self.explored and self.explored[0][0] <= self.trained_total:
            position = self.explored.popleft()[1]
        metrics = self.trainer.train_step(experiences, checkpoint_extra={"tasks": position or self.tasks.state_dict()})
        step = self.trainer.step
        if self.sync.policy.should_sync(step):
            report = self.sync.sync(version=step)
            metrics.update(report.metrics())
            metrics[SYNC_SECONDS] = report.seconds
            if plan.sync.verify_checksums:
                metrics["sync/checksum_match"] = verify_sync(self.trainer, self.engines, step)
        self.monitor.log(metrics, step=step, phase=PHASE_TRAIN)
        interval = plan.explorer.eval_interval
        if plan.buffer.eval_tasksets and interval and step % interval == 0:
            self._evaluate(step)

    def _evaluate(self, step: int) -> None:
        from trinity.monitor.keys import PHASE_EVAL

        self.monitor.log(evaluate(self.plan, self.scheduler, step), step=step, phase=PHASE_EVAL)

    def _finish(self) -> None:
        plan = self.plan
        final = self.trainer.step
        interval = plan.explorer.eval_interval
        if plan.buffer.eval_tasksets and not (interval and final % interval == 0):
            if not self.sync.policy.should_sync(final):
                self.sync.sync(version=final)
            self._evaluate(final)
        if not plan.trainer.save_interval or final % plan.trainer.save_interval:
            self.trainer.save_checkpoint({"tasks": self.tasks.state_dict()}, final=True)
        elif plan.trainer.save_hf == "last":
            self.trainer.export_hf()
