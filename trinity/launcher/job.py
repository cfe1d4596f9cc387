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
    from trinity.common.models.engines import create_engines, shutdown_engines
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
        shutdown_engines(engines)
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


#: In the run folder: where mode ``explore`` keeps its task position between jobs.
EXPLORER_STATE_FILE = "explorer_state.json"


def _warn_if_not_persistent(session: Session) -> None:
    if session.config.buffer.experience_buffer.storage_type == "queue":
        logger.warning(
            "mode %s with buffer.experience_buffer.storage_type queue: the queue lives only as long as this job; "
            "use sqlite to hand experiences from an explore job to a train job", session.config.mode,
        )


def _published_weights(sync_path: Path) -> tuple[Path, int] | None:
    """Return ``(versioned folder, version)`` the checkpoint sync path names now (resolved once), or None."""
    from trinity.synchronizer.checkpoint_sync import read_version

    try:
        folder = sync_path.resolve(strict=True)
    except OSError:
        return None
    version = read_version(folder)
    return None if version is None else (folder, version)


def run_explore(session: Session) -> None:
    """Roll out the training tasks into the (persistent) experience buffer, picking up new weights as they appear.

    Before each batch, when the checkpoint sync folder (:func:`default_sync_path`)
    names newer weights than the engines hold (a ``train`` job published them),
    every engine loads them, so the batch's experiences carry that
    ``model_version``. Each batch goes through the pipeline and into the buffer
    in one write; then the task position is saved in ``<run>/explorer_state.json``,
    so the same command continues after the last written batch (a job killed
    between the two re-explores that one batch). At the end the buffer is closed:
    a ``train`` job reading it trains on what is left, then stops.
    """
    import json

    from trinity.buffer import TaskScheduler, make_storage
    from trinity.common.models.engines import create_engines, shutdown_engines
    from trinity.explorer.scheduler import Scheduler
    from trinity.monitor.keys import PHASE_EXPLORE
    from trinity.synchronizer.synchronizer import default_sync_path
    from trinity.utils.fs import write_text_atomic

    cfg = session.config
    _warn_if_not_persistent(session)
    tasks = TaskScheduler.for_training(cfg.buffer, seed=cfg.seed)
    state_file = session.run_dir / EXPLORER_STATE_FILE
    if state_file.is_file():
        tasks.load_state_dict(json.loads(state_file.read_text(encoding="utf-8"))["tasks"])
        logger.info("explore resumes after step %d (%s)", tasks.position.step, state_file)
    storage = make_storage(cfg.buffer.experience_buffer, name="experience", run_dir=session.run_dir)
    if tasks.finished:
        logger.info("explore: all %d steps were explored already (%s); nothing to do", tasks.total_batches,
                    state_file)
        try:
            storage.close()
        finally:
            storage.release()
        return
    engines = create_engines(cfg)
    pipeline, _ = _pipeline_and_strategy(session, storage, _pad_token_id(cfg))
    scheduler = Scheduler.from_config(engines, cfg)
    sync_path = default_sync_path(cfg)
    loaded = 0  # fresh engines hold model.model_path: version 0
    monitor = _monitor(session, total_steps=cfg.buffer.total_steps or None)
    finished = False
    try:
        while True:
            step = tasks.position.step
            batch = tasks.next_batch_with_epochs()
            if batch is None:
                break
            published = _published_weights(sync_path)
            if published is not None and published[1] > loaded:
                folder, version = published
                _call_all(engines, "load_checkpoint_weights", str(folder), version)
                logger.info("explore: engines now hold the published weights of version %d", version)
                loaded = version
            result = scheduler.run(_training_tasks(cfg, batch, step))
            if result.failures:
                logger.warning("step %d: %d task(s) failed: %s", step + 1, len(result.failures),
                               result.failures[0].error)
            # every rollout of the batch is in result: a group the pipeline still holds will never be completed,
            # so it is released with the batch, and the batch is stored in one atomic write
            storage.put(pipeline.process(result.experiences) + pipeline.flush())
            state = {"tasks": tasks.state_dict(), "model_version": loaded}
            write_text_atomic(state_file, json.dumps(state, indent=2, sort_keys=True) + "\n")
            metrics = _explore_metrics(result, result.experiences)
            metrics["explore/model_version"] = float(loaded)
            monitor.log(metrics, step=step + 1, phase=PHASE_EXPLORE)
        finished = True
    finally:
        monitor.close()
        shutdown_engines(engines)
        try:
            if finished:
                storage.close()  # the writers are done: readers drain the buffer, then stop
        finally:
            storage.release()


def run_train(session: Session) -> None:
    """Train on experiences from the (persistent) buffer; publish weights to the checkpoint sync folder.

    Steps run until ``buffer.total_steps`` (0: no limit) or until the buffer is
    exhausted: closed by its explore job and fully read. Then the job stops
    cleanly: the last step is checkpointed and published (nothing is saved when
    no step was taken). While the buffer is open but empty it waits up to
    ``buffer.read_timeout`` seconds, then saves and publishes its progress the
    same way and fails with the storage's timeout error.

    Every ``synchronizer.sync_interval`` steps (and after the last one) the
    weights are published to :func:`default_sync_path` with the step as their
    version, whatever ``synchronizer.sync_method`` says: an explore job picks
    them up from there. A checkpoint stores the buffer's read position; the same
    command resumes after the latest checkpoint (a run without one reads the
    buffer from its first experience).
    """
    from trinity.buffer import BufferExhaustedError, StorageTimeoutError, make_storage
    from trinity.common.constants import SyncMethod
    from trinity.monitor.keys import PHASE_TRAIN, SYNC_SECONDS
    from trinity.synchronizer.checkpoint_sync import read_version
    from trinity.synchronizer.synchronizer import Synchronizer, default_sync_path
    from trinity.trainer.trainer import FSDPTrainer

    cfg = session.config
    _warn_if_not_persistent(session)
    trainer = FSDPTrainer(cfg, checkpoint_dir=session.run_dir / "checkpoints")
    storage: Any = None
    publish: Any = None
    monitor: Any = None
    try:
        storage = make_storage(cfg.buffer.experience_buffer, name="experience", run_dir=session.run_dir)
        _, strategy = _pipeline_and_strategy(session, storage, trainer.pad_token_id)
        resumed = trainer.resume()
        sampler = (resumed["extra"] or {}).get("sampler") if resumed is not None else None
        if sampler:
            strategy.load_state_dict(sampler)
        elif resumed is None and storage.state_dict().get("read_offset"):
            # no checkpoint: the weights are the starting model's, so every experience is still to be trained on
            logger.info("train: no checkpoint in %s; reading %s from its first experience",
                        trainer.checkpoint_dir, storage.describe())
            strategy.load_state_dict({"storage": {"read_offset": 0}})
        if resumed is not None:
            logger.info("train resumes from %s at step %d", resumed["path"], resumed["step"])
        sync_path = default_sync_path(cfg)
        publish = Synchronizer(SyncMethod("checkpoint"), trainer, [], cfg.synchronizer, checkpoint_path=sync_path)
        monitor = _monitor(session, total_steps=cfg.buffer.total_steps or None)
        saved = published = trainer.step
        if trainer.step and read_version(sync_path) != trainer.step:  # stopped between its checkpoint and publishing
            publish.sync(version=trainer.step)
        total = cfg.buffer.total_steps
        interval = cfg.trainer.save_interval
        waited: StorageTimeoutError | None = None
        while not total or trainer.step < total:
            try:
                experiences = strategy.sample(trainer_version=trainer.step, timeout=cfg.buffer.read_timeout)
            except BufferExhaustedError:
                logger.info("train: %s is closed and fully read; stopping after step %d", storage.describe(),
                            trainer.step)
                break
            except StorageTimeoutError as exc:
                waited = exc
                break
            metrics = trainer.train_step(experiences, checkpoint_extra={"sampler": strategy.state_dict()})
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
            trainer.save_checkpoint({"sampler": strategy.state_dict()})
        if trainer.step != published:
            publish.sync(version=trainer.step)
        if waited is not None:
            raise waited
    finally:
        if monitor is not None:
            monitor.close()
        if publish is not None:
            publish.close()
        if storage is not None:
            storage.release()  # a reader never closes the buffer: that is for its writers
        trainer.shutdown()


def run_bench(session: Session) -> None:
    """Evaluate the starting model and every saved checkpoint of the run on the evaluation task sets.

    The engines start with ``model.model_path`` (logged as step 0); then each
    complete checkpoint under ``<run>/checkpoints``, in step order, is exported
    to ``<run>/bench/step-N`` (kept, and refreshed when the checkpoint is newer),
    loaded by every engine as version N and evaluated (logged as step N).
    Each record of phase ``eval`` carries ``bench/model_version``, the version
    the engines held. Mode bench without ``buffer.eval_tasks`` is a ConfigError.
    """
    from trinity.common.config import ConfigError

    cfg = session.config
    if not cfg.buffer.eval_tasks:
        raise ConfigError("buffer.eval_tasks: mode bench needs at least one evaluation task set")

    from trinity.common.models.engines import create_engines, shutdown_engines
    from trinity.explorer.scheduler import Scheduler
    from trinity.manager.checkpoint_converter import ConversionError
    from trinity.monitor.keys import PHASE_EVAL
    from trinity.trainer.checkpoint import CheckpointDir

    checkpoints = CheckpointDir(session.run_dir / "checkpoints")
    steps = [step for step in checkpoints.complete_steps() if step > 0]
    if not steps:
        logger.warning("bench: no checkpoint in %s; evaluating the starting model only", checkpoints.root)
    engines = create_engines(cfg)
    scheduler = Scheduler.from_config(engines, cfg)
    monitor = _monitor(session, total_steps=None)

    def evaluate_now(step: int) -> None:
        metrics = evaluate(cfg, scheduler, step)
        metrics["bench/model_version"] = float(min(_call_all(engines, "model_version")))
        monitor.log(metrics, step=step, phase=PHASE_EVAL)

    try:
        evaluate_now(0)
        for step in steps:
            try:
                folder = _export_for_engines(checkpoints.step_path(step), session.run_dir / "bench" / f"step-{step}")
            except ConversionError:
                if not checkpoints.step_path(step).is_dir():  # pruned by a train job since it was listed
                    logger.warning("bench: checkpoint step-%d was removed before it could be evaluated", step)
                    continue
                raise
            _call_all(engines, "load_checkpoint_weights", str(folder), step)
            evaluate_now(step)
    finally:
        monitor.close()
        shutdown_engines(engines)


def _export_for_engines(checkpoint: Path, folder: Path) -> Path:
    """Return a Hugging Face export of ``checkpoint`` at ``folder``, converting when it is missing or older."""
    from trinity.manager.checkpoint_converter import convert_checkpoint
    from trinity.trainer.checkpoint import STATE_FILE

    exported = folder / "config.json"
    state = checkpoint / STATE_FILE
    if not exported.is_file() or (state.is_file() and exported.stat().st_mtime_ns < state.stat().st_mtime_ns):
        convert_checkpoint(checkpoint, folder, overwrite=True)
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
