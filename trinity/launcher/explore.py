"""Mode ``explore``: roll out the training tasks into a persistent buffer, picking up published weights."""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any

from trinity.launcher.device_record import write_device_record
from trinity.launcher.placement import place
from trinity.launcher.session import Session
from trinity.launcher.steps import (
    EngineSet,
    call_all,
    check_step_failures,
    explore_metrics,
    monitor_for,
    pipeline_for,
    recorder_for,
    recovery_for,
    scheduler_for,
    start_engines,
    training_tasks,
    write_ray_timeline,
)
from trinity.utils import stop

logger = logging.getLogger("trinity.launcher")

#: In the run folder: where mode ``explore`` keeps its task position between jobs.
EXPLORER_STATE_FILE = "explorer_state.json"
#: The storage mark holding the same state, stored with each batch where the storage can (SQLite).
EXPLORER_STATE_MARK = "explorer_state"


def warn_if_not_persistent(session: Session) -> None:
    """Warn when an explore or train job would hand experiences through a queue that dies with it."""
    experience = session.plan.buffer.experience
    if experience is not None and experience.kind == "queue":
        logger.warning(
            "mode %s with a queue experience buffer: the queue lives only as long as this job; use "
            "buffer.trainer_input.experience_buffer.storage_type: sql to hand experiences from an explore job "
            "to a train job",
            session.plan.mode,
        )


def published_weights(sync_path: Path) -> tuple[Path, int] | None:
    """Return ``(versioned folder, version)`` the checkpoint sync path names now (resolved once), or None."""
    from trinity.synchronizer.checkpoint_sync import read_version

    try:
        folder = sync_path.resolve(strict=True)
    except OSError:
        return None
    version = read_version(folder)
    return None if version is None else (folder, version)


def pad_token_id_of(session: Session) -> int:
    """Return the pad token id of the run's tokenizer."""
    from trinity.trainer.trainer import pad_token_id

    return pad_token_id(session.plan.model.path, session.plan.model.trust_remote_code)


def run_explore(session: Session) -> None:
    """Roll out the training tasks into the (persistent) experience buffer, picking up new weights as they appear.

    Before each batch, when the checkpoint sync folder names newer weights than
    the engines hold (a ``train`` job published them), every engine loads them,
    so the batch's experiences carry that ``model_version``. Each batch goes
    through the pipeline and into the buffer in one write, and the task
    position after it goes with it: in the same transaction where the storage
    can (SQLite's mark), and into ``<run>/explorer_state.json`` right after. The
    same command continues after the last stored batch, whichever of the two
    is newer; only with a storage that keeps no mark can a job killed between
    the store and the state's rename explore that batch again. The state
    carries the step's metrics row, logged by the next job when the killed one
    did not live to log it. At the end the buffer is closed: a ``train`` job
    reading it trains on what is left, then stops.
    """
    from trinity.buffer import TaskScheduler, make_storage

    plan = session.plan
    assert plan.buffer.experience is not None
    warn_if_not_persistent(session)
    tasks = TaskScheduler.for_training(plan.buffer)
    state_file = session.run_dir / EXPLORER_STATE_FILE
    storage = make_storage(plan.buffer.experience, run_dir=session.run_dir)
    with contextlib.ExitStack() as stack:
        stack.callback(storage.release)
        state = saved_state(state_file, storage) if plan.config.continue_from_checkpoint else None
        if state is not None:
            tasks.load_state_dict(state[0]["tasks"])
            logger.info("explore resumes after step %d (%s)", tasks.position.step, state[1])
        if tasks.finished:
            logger.info(
                "explore: all %d steps were explored already (%s); nothing to do", tasks.total_batches, state_file
            )
        else:
            _explore(session, tasks, storage, state_file, state[0] if state is not None else None)
        storage.close()  # the writers are done: readers drain the buffer, then stop (a failed job leaves it open)


def saved_state(state_file: Path, storage: Any) -> tuple[dict[str, Any], str] | None:
    """Return the newest saved explorer state and where it was read, from ``state_file`` or the storage's mark.

    The mark is written in the batch's own transaction, the file right after:
    a job killed in between leaves the mark one step ahead. None when
    neither holds a state (a first job).
    """
    found = []
    if state_file.is_file():
        found.append((json.loads(state_file.read_text(encoding="utf-8")), str(state_file)))
    mark = storage.read_mark(EXPLORER_STATE_MARK)
    if mark is not None:
        found.append((json.loads(mark), f"{storage.describe()}, written with the batch"))
    if not found:
        return None
    return max(found, key=lambda item: int(item[0]["row"]["step"]) if item[0].get("row") else 0)


class _StateAfterBatch:
    """Mode explore's state after batch ``step``: the mark stored with the batch, made once the pipeline ran
    (its figures join the step's ``metrics``); :attr:`text` is then what the state file gets."""

    def __init__(self, tasks: Any, pipeline: Any, model_version: int, step: int, metrics: dict[str, float]) -> None:
        self.tasks, self.pipeline, self.model_version, self.step, self.metrics = (
            tasks, pipeline, model_version, step, metrics)
        self.text = ""

    def __call__(self, _stored: list[Any]) -> tuple[str, str]:
        self.metrics.update(self.pipeline.step_metrics())
        state = {"tasks": self.tasks.state_dict(), "model_version": self.model_version,
                 "row": {"step": self.step, "metrics": self.metrics}}
        self.text = json.dumps(state, indent=2, sort_keys=True) + "\n"
        return EXPLORER_STATE_MARK, self.text


def _explore(session: Session, tasks: Any, storage: Any, state_file: Path, state: dict[str, Any] | None) -> None:
    """Place and start the engines, pipeline and monitor, explore every batch, and tear them down in reverse order."""
    with contextlib.ExitStack() as stack:
        stack.callback(write_ray_timeline, session)
        pad_token_id = pad_token_id_of(session)  # a model folder that cannot load fails before the engines start
        placement = place(session.plan, session.layout)
        stack.callback(placement.remove)
        engines = start_engines(session, placement)
        stack.callback(engines.shutdown)
        pipeline = pipeline_for(session, storage, pad_token_id, recorder_for(session), engines)
        stack.callback(pipeline.close)
        scheduler = scheduler_for(session, engines)
        monitor = monitor_for(session, session.plan.buffer.total_steps)
        stack.callback(monitor.close)
        from trinity.launcher.restored_row import logged_before, missing_explore_row
        from trinity.monitor.keys import PHASE_EVAL, PHASE_EXPLORE

        # a train job may log into the same file: a marker supersedes the explorer's rows only
        if tasks.position.step:  # continuing after the explorer state of an earlier run
            monitor.mark_resume(tasks.position.step, scope=(PHASE_EXPLORE, PHASE_EVAL))
            missing = missing_explore_row(session.run_dir, state)
            if missing is not None:  # the earlier job stored its last batch and died before logging it
                monitor.log(missing[1], step=missing[0], phase=PHASE_EXPLORE)
        elif logged_before(session.run_dir, (PHASE_EXPLORE, PHASE_EVAL)):  # a killed run's rows, explored again
            monitor.mark_resume(0, scope=(PHASE_EXPLORE, PHASE_EVAL))
        write_device_record(session, engines=engines)
        _explore_batches(
            session,
            tasks,
            engines=engines,
            scheduler=scheduler,
            pipeline=pipeline,
            monitor=monitor,
            state_file=state_file,
        )


def _explore_batches(
    session: Session, tasks: Any, *, engines: EngineSet, scheduler: Any, pipeline: Any, monitor: Any, state_file: Path
) -> None:
    """Explore batch after batch until the tasks run out, loading newly published weights before each batch."""
    from trinity.monitor.keys import PHASE_EXPLORE
    from trinity.synchronizer.synchronizer import default_sync_path
    from trinity.utils.fs import write_text_atomic

    sync_path = default_sync_path(session.plan)
    recovery = recovery_for(session, engines, [scheduler])
    loaded = 0  # fresh engines hold model.model_path: version 0
    while True:
        if stop.requested():  # SIGUSR1: every stored batch is kept already; stop before the next one
            raise stop.terminated()
        step = tasks.position.step
        batch = tasks.next_batch_with_epochs()
        if batch is None:
            return
        published = published_weights(sync_path)
        if published is not None and published[1] > loaded:
            folder, version = published
            call_all(engines.rollout, "load_checkpoint_weights", str(folder), version)
            logger.info("explore: engines now hold the published weights of version %d", version)
            loaded = version
        batch_tasks = training_tasks(session, batch, step)
        result = scheduler.run(batch_tasks, wait_for_engines=True)
        while result.unserved:  # no engine lives: fresh ones with the published weights run the rest of the batch
            if stop.signalled():  # the run stops: the batch is not stored, and the next run explores it again
                raise stop.terminated()
            recovery.prepare(scheduler.dead_engine_handles())
            recovery.admit()
            published = published_weights(sync_path)
            loaded = 0
            if published is not None:  # the fresh engines hold model.model_path: give them the published weights
                call_all(engines.rollout, "load_checkpoint_weights", str(published[0]), published[1])
                loaded = published[1]
            result = scheduler.run(batch_tasks, wait_for_engines=True, resume=result)
        if result.failures:
            logger.warning("step %d: %d task(s) failed: %s", step + 1, len(result.failures), result.failures[0].error)
            check_step_failures(result, step + 1)
        dropped = int(result.metrics.get("dropped_groups", 0) + result.metrics.get("abandoned_groups", 0))
        if not result.experiences:
            logger.warning(
                "step %d: no group completed (%d dropped); nothing stored, the step is skipped", step + 1, dropped
            )
        # every rollout of the batch is in result: a group the pipeline still holds will never be completed,
        # so it is released with the batch, and the batch is stored in one atomic write that says it is final
        tasks.feedback(result.experiences)  # a selector learns how its tasks went before it picks the next ones
        metrics = explore_metrics(result, result.experiences)
        metrics["explore/model_version"] = float(loaded)
        # the position after the batch, stored with it, so a killed job never explores a stored batch again;
        # it carries the step's row, which a job killed before logging it leaves for the next one to log
        state = _StateAfterBatch(tasks, pipeline, loaded, step + 1, metrics)
        pipeline.write_step(result.experiences, batch=step, dropped_groups=dropped, mark=state)
        write_text_atomic(state_file, state.text)
        monitor.log(metrics, step=step + 1, phase=PHASE_EXPLORE)
        monitor.flush()
        if recovery.prepare(scheduler.dead_engine_handles()):
            recovery.admit()
            loaded = 0  # a fresh engine holds model.model_path: every engine loads the published weights again
