"""The job loop of ``trinity run`` for each mode.

``both``: the explorer rolls out a batch of tasks on the engines, the pipeline
stores the experiences, the trainer takes a step on them, and the synchronizer
pushes the new weights to the engines every ``sync_interval`` steps. With
``sync_offset`` > 0 the explorer runs that many batches ahead (its
experiences are then that much off-policy). ``explore`` and ``train`` run one
side each, meeting in a persistent buffer (SQLite) and the checkpoint sync
folder; ``bench`` evaluates the model and each saved checkpoint.

A run is resumable: each checkpoint stores the task position of the batch it
trained on, and the same command continues after the last checkpoint.
"""

from __future__ import annotations

import collections
import logging
import time
from pathlib import Path
from typing import Any

from trinity.common.config import load_config
from trinity.common.config.schema import Config
from trinity.launcher.evaluation import evaluate
from trinity.launcher.placement import place
from trinity.launcher.session import Session, open_session

logger = logging.getLogger("trinity.launcher")


def run_job(config_path: str | Path, overrides: dict[str, Any] | None = None) -> int:
    """Load ``config_path`` (with dotted-path ``overrides``) and run it; return the exit status."""
    return run_config(load_config(config_path, overrides))


def run_config(config: Config) -> int:
    """Run an already-loaded config; return the exit status."""
    session = open_session(config)
    try:
        runner = {"both": run_both, "explore": run_explore, "train": run_train, "bench": run_bench}[config.mode]
        runner(session)
    finally:
        session.close()
    return 0


def _monitor(session: Session, total_steps: int | None) -> Any:
    from trinity.monitor import Monitor

    return Monitor.for_run(session.config, total_steps=total_steps)


def _pipeline_and_strategy(session: Session, storage: Any, pad_token_id: int) -> tuple[Any, Any]:
    from trinity.buffer import make_sample_strategy, pipeline_for_algorithm

    cfg = session.config
    pipeline = pipeline_for_algorithm(
        cfg.algorithm, reward_shaping=cfg.buffer.reward_shaping, pad_token_id=pad_token_id, storage=storage
    )
    strategy = make_sample_strategy(
        cfg.buffer.sample_strategy, storage, batch_size=cfg.buffer.batch_size,
        group_size=cfg.algorithm.repeat_times, **cfg.buffer.sample_strategy_args,
    )
    return pipeline, strategy


def _training_tasks(cfg: Config, batch: list[tuple[int, Any]], step: int) -> list[Any]:
    from trinity.common.workflows.base import Task

    return [
        Task.from_record(record, cfg.buffer.train_tasks, repeat_times=cfg.algorithm.repeat_times, epoch=epoch,
                         step=step)
        for epoch, record in batch
    ]


def _explore_metrics(result: Any, experiences: list[Any]) -> dict[str, float]:
    from trinity.monitor.keys import REWARD_MEAN, TOKENS_PER_SECOND

    metrics = {f"explore/{k}": float(v) for k, v in result.metrics.items()}
    rewards = [float(e.reward or 0.0) for e in experiences]
    tokens = sum(int(e.response_length) for e in experiences)
    seconds = float(result.metrics.get("time_s", 0.0)) or 1e-9
    metrics[REWARD_MEAN] = sum(rewards) / len(rewards) if rewards else 0.0
    metrics[TOKENS_PER_SECOND] = tokens / seconds
    return metrics


def run_both(session: Session) -> None:
    """Explore and train in one loop on one Ray cluster (see the module docstring)."""
    from trinity.buffer import TaskScheduler, make_storage
    from trinity.common.models.engines import create_engines
    from trinity.explorer.scheduler import Scheduler
    from trinity.monitor.keys import PHASE_EVAL, PHASE_EXPLORE, PHASE_TRAIN, SYNC_SECONDS
    from trinity.synchronizer.synchronizer import Synchronizer, default_sync_path
    from trinity.trainer.trainer import FSDPTrainer

    cfg = session.config
    tasks = TaskScheduler.for_training(cfg.buffer, seed=cfg.seed)
    placement = place(cfg, session.layout)
    engines = create_engines(cfg, options_for=placement.engine_options)
    trainer = FSDPTrainer(cfg, checkpoint_dir=session.run_dir / "checkpoints", placement_group=placement.trainer_group)
    storage = make_storage(cfg.buffer.experience_buffer, name="experience", run_dir=session.run_dir)
    pipeline, strategy = _pipeline_and_strategy(session, storage, trainer.pad_token_id)
    resumed = trainer.resume()
    if resumed is not None:
        extra = resumed["extra"] or {}
        tasks.load_state_dict(extra["tasks"])
        logger.info("resumed from %s at step %d", resumed["path"], resumed["step"])
    sync = Synchronizer(session.layout.sync_method, trainer, engines, cfg.synchronizer,
                        checkpoint_path=default_sync_path(cfg))
    scheduler = Scheduler.from_config(engines, cfg)
    monitor = _monitor(session, total_steps=cfg.buffer.total_steps or None)
    try:
        if resumed is not None:  # fresh engines load model_path; after a resume they need the trained weights
            sync.sync(version=trainer.step)
        if cfg.buffer.eval_tasks and cfg.explorer.eval_on_start and resumed is None:
            monitor.log(evaluate(cfg, scheduler, trainer.step), step=trainer.step, phase=PHASE_EVAL)
        ahead: collections.deque[dict[str, Any]] = collections.deque()
        lead = cfg.synchronizer.sync_offset

        def explore_one() -> bool:
            step = tasks.position.step
            batch = tasks.next_batch_with_epochs()
            if batch is None:
                return False
            result = scheduler.run(_training_tasks(cfg, batch, step))
            experiences = result.experiences
            if result.failures:
                logger.warning("step %d: %d task(s) failed: %s", step + 1, len(result.failures),
                               result.failures[0].error)
            pipeline.write(experiences)
            monitor.log(_explore_metrics(result, experiences), step=step + 1, phase=PHASE_EXPLORE)
            ahead.append(tasks.state_dict())
            return True

        while len(ahead) < lead + 1 and explore_one():
            pass
        while ahead:
            position = ahead.popleft()
            experiences = strategy.sample(trainer_version=trainer.step, timeout=cfg.buffer.read_timeout)
            metrics = trainer.train_step(experiences, checkpoint_extra={"tasks": position})
            step = trainer.step
            if sync.policy.should_sync(step):
                report = sync.sync(version=step)
                metrics.update(report.metrics())
                metrics[SYNC_SECONDS] = report.seconds
                if cfg.synchronizer.verify_checksums:
                    metrics["sync/checksum_match"] = verify_sync(trainer, engines, step)
            monitor.log(metrics, step=step, phase=PHASE_TRAIN)
            interval = cfg.explorer.eval_interval
            if cfg.buffer.eval_tasks and interval and step % interval == 0:
                monitor.log(evaluate(cfg, scheduler, step), step=step, phase=PHASE_EVAL)
            explore_one()
        final = trainer.step
        if cfg.buffer.eval_tasks and not (cfg.explorer.eval_interval and final % cfg.explorer.eval_interval == 0):
            if not sync.policy.should_sync(final):
                sync.sync(version=final)
            monitor.log(evaluate(cfg, scheduler, final), step=final, phase=PHASE_EVAL)
        if not cfg.trainer.save_interval or final % cfg.trainer.save_interval:
            trainer.save_checkpoint({"tasks": tasks.state_dict()})
    finally:
        plot = monitor.close()
        if plot is not None:
            logger.info("reward curve: %s", plot)
        pipeline.finish()
        storage.close()
        sync.close()
        trainer.shutdown()
        placement.remove()


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


def run_explore(session: Session) -> None:
    """Roll out the training tasks into the (persistent) experience buffer, picking up new weights as they appear."""
    from trinity.buffer import TaskScheduler, make_storage
    from trinity.common.models.engines import create_engines
    from trinity.explorer.scheduler import Scheduler
    from trinity.monitor.keys import PHASE_EXPLORE
    from trinity.synchronizer.checkpoint_sync import read_version
    from trinity.synchronizer.synchronizer import default_sync_path

    cfg = session.config
    tasks = TaskScheduler.for_training(cfg.buffer, seed=cfg.seed)
    engines = create_engines(cfg)
    storage = make_storage(cfg.buffer.experience_buffer, name="experience", run_dir=session.run_dir)
    pipeline, _ = _pipeline_and_strategy(session, storage, _pad_token_id(cfg))
    scheduler = Scheduler.from_config(engines, cfg)
    sync_path = default_sync_path(cfg)
    loaded = 0
    monitor = _monitor(session, total_steps=cfg.buffer.total_steps or None)
    try:
        while True:
            version = read_version(sync_path) if Path(sync_path).exists() else None
            if version is not None and version > loaded:
                _call_all(engines, "load_checkpoint_weights", str(sync_path), version)
                loaded = version
            step = tasks.position.step
            batch = tasks.next_batch_with_epochs()
            if batch is None:
                break
            result = scheduler.run(_training_tasks(cfg, batch, step))
            pipeline.write(result.experiences)
            monitor.log(_explore_metrics(result, result.experiences), step=step + 1, phase=PHASE_EXPLORE)
    finally:
        monitor.close()
        pipeline.finish()
        storage.close()


def run_train(session: Session) -> None:
    """Train on experiences from the (persistent) buffer; publish weights to the checkpoint sync folder."""
    from trinity.buffer import BufferExhaustedError, make_storage
    from trinity.common.constants import SyncMethod
    from trinity.monitor.keys import PHASE_TRAIN
    from trinity.synchronizer.synchronizer import Synchronizer, default_sync_path
    from trinity.trainer.trainer import FSDPTrainer

    cfg = session.config
    trainer = FSDPTrainer(cfg, checkpoint_dir=session.run_dir / "checkpoints")
    storage = make_storage(cfg.buffer.experience_buffer, name="experience", run_dir=session.run_dir)
    _, strategy = _pipeline_and_strategy(session, storage, trainer.pad_token_id)
    resumed = trainer.resume()
    if resumed is not None and (resumed["extra"] or {}).get("sampler"):
        strategy.load_state_dict(resumed["extra"]["sampler"])
    monitor = _monitor(session, total_steps=cfg.buffer.total_steps or None)
    publish = Synchronizer(SyncMethod("checkpoint"), trainer, [], cfg.synchronizer,
                           checkpoint_path=default_sync_path(cfg))
    try:
        while not cfg.buffer.total_steps or trainer.step < cfg.buffer.total_steps:
            try:
                experiences = strategy.sample(trainer_version=trainer.step, timeout=cfg.buffer.read_timeout)
            except BufferExhaustedError:
                break
            metrics = trainer.train_step(experiences, checkpoint_extra={"sampler": strategy.state_dict()})
            if publish.policy.should_sync(trainer.step):
                metrics.update(publish.sync(version=trainer.step).metrics())
            monitor.log(metrics, step=trainer.step, phase=PHASE_TRAIN)
        trainer.save_checkpoint({"sampler": strategy.state_dict()})
    finally:
        monitor.close()
        storage.close()
        trainer.shutdown()


def run_bench(session: Session) -> None:
    """Evaluate the starting model and every saved checkpoint of the run on the evaluation task sets."""
    from trinity.common.models.engines import create_engines
    from trinity.explorer.scheduler import Scheduler
    from trinity.monitor.keys import PHASE_EVAL
    from trinity.trainer.checkpoint import CheckpointDir

    cfg = session.config
    if not cfg.buffer.eval_tasks:
        from trinity.common.config import ConfigError

        raise ConfigError("buffer.eval_tasks: mode bench needs at least one evaluation task set")
    engines = create_engines(cfg)
    scheduler = Scheduler.from_config(engines, cfg)
    monitor = _monitor(session, total_steps=None)
    checkpoints = CheckpointDir(session.run_dir / "checkpoints")
    try:
        monitor.log(evaluate(cfg, scheduler, 0), step=0, phase=PHASE_EVAL)
        for step in checkpoints.complete_steps():
            folder = _export_for_engines(checkpoints.step_path(step), session.run_dir / "bench" / f"step-{step}")
            _call_all(engines, "load_checkpoint_weights", str(folder), step)
            monitor.log(evaluate(cfg, scheduler, step), step=step, phase=PHASE_EVAL)
    finally:
        monitor.close()


def _export_for_engines(checkpoint: Path, folder: Path) -> Path:
    from trinity.manager.checkpoint_converter import convert_checkpoint

    if not (folder / "config.json").is_file():
        convert_checkpoint(checkpoint, folder)
    return folder


def _pad_token_id(cfg: Config) -> int:
    from trinity.trainer.trainer import pad_token_id

    return pad_token_id(cfg)


def _call_all(engines: list[Any], method: str, *args: Any) -> list[Any]:
    import ray

    started = time.monotonic()
    out = ray.get([getattr(e, method).remote(*args) for e in engines])
    logger.info("%s on %d engine(s) in %.2f s", method, len(engines), time.monotonic() - started)
    return list(out)
