"""Pieces every mode of ``trinity run`` shares: the pipeline and sample strategy, tasks of a step, metrics."""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from trinity.errors import TrinityError
from trinity.launcher.session import Session
from trinity.utils import stop

logger = logging.getLogger("trinity.launcher")


@dataclasses.dataclass
class EngineSet:
    """The engines of a run: the rollout model's, and each auxiliary model's by name."""

    rollout: list[Any]
    auxiliary: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    #: Starts a fresh rollout engine ``index``, placed as the first one was (to replace a dead one); None: cannot.
    start_rollout: Callable[[int], Any] | None = None

    def shutdown(self) -> None:
        """Shut every engine down (failures are logged, never raised)."""
        from trinity.common.models.engines import shutdown_engines

        shutdown_engines([*self.rollout, *(e for group in self.auxiliary.values() for e in group)])


def start_engines(session: Session, placement: Any = None) -> EngineSet:
    """Start the rollout engines and every auxiliary model's engines (in their placement groups, when given).

    An auxiliary model's ``engine_type: auto`` is decided like the rollout model's (the layout's).
    """
    from trinity.common.models.engines import create_engine, create_engines

    plan, layout = session.plan, session.layout
    options_for = placement.engine_options if placement is not None else None
    engines = EngineSet(create_engines(plan, layout.engine_type, options_for=options_for),
                        start_rollout=functools.partial(create_engine, plan, layout.engine_type,
                                                        options_for=options_for))
    try:
        for aux in plan.explorer.auxiliary:
            if aux.external is not None:
                from trinity.common.models.external import ExternalEndpoint

                engines.auxiliary[aux.name] = [ExternalEndpoint(aux.name, aux.external)]
                continue
            kind = layout.engine_type if aux.engine_type == "auto" else aux.engine_type
            engines.auxiliary[aux.name] = create_engines(
                plan, kind, engine=aux,
                options_for=placement.auxiliary_options(aux.name) if placement is not None else None,
            )
    except BaseException:
        engines.shutdown()
        raise
    return engines


def scheduler_for(session: Session, engines: EngineSet) -> Any:
    """Return the explorer's scheduler over ``engines`` (auxiliary models reachable from every workflow)."""
    from trinity.explorer.scheduler import Scheduler

    return Scheduler.from_plan(engines.rollout, session.plan, engines.auxiliary)


def recovery_for(session: Session, engines: EngineSet, users: Sequence[Any]) -> Any:
    """Return the :class:`~trinity.explorer.recovery.EngineRecovery` replacing dead rollout engines for ``users``."""
    from trinity.explorer.recovery import EngineRecovery

    if session.plan.config.continue_from_checkpoint:
        hint = "rerun the same `trinity run --config` command to continue from the last checkpoint"
    else:
        hint = ("set continue_from_checkpoint: true and rerun the same `trinity run --config` command to continue "
                "from the last checkpoint")
    return EngineRecovery(engines.rollout, engines.start_rollout, users=users,
                          max_restarts=session.plan.explorer.max_engine_restarts, resume_hint=hint)


def monitor_for(session: Session, total_steps: int | None) -> Any:
    """Return the run's monitor."""
    from trinity.monitor import Monitor

    return Monitor.for_run(session.plan, total_steps=total_steps)


def recorder_for(session: Session) -> Any:
    """Return the storage that records every explored experience (``save_input`` / a queue's path), or None."""
    from trinity.buffer import make_storage
    from trinity.common.config.plan.data import StoragePlan

    path = session.plan.buffer.record_path
    if path is None:
        return None
    if path.endswith((".jsonl", ".json")):
        return make_storage(StoragePlan("jsonl", "explorer_output", path, 0, 0.0), run_dir=session.run_dir)
    return make_storage(StoragePlan("sqlite", "explorer_output", path, 0, 0.0), run_dir=session.run_dir)


def pipeline_for(session: Session, storage: Any, pad_token_id: int, recorder: Any = None,
                 engines: EngineSet | None = None) -> Any:
    """Return the experience pipeline of the run, writing to ``storage``; its operators reach the auxiliary
    models of ``engines`` through async OpenAI clients (upstream's ``self.auxiliary_models``)."""
    from trinity.buffer import pipeline_for_plan

    def auxiliary_models() -> dict[str, list[Any]]:
        from trinity.common.models.client import EngineClient

        groups = engines.auxiliary if engines is not None else {}
        return {name: [EngineClient(e, index=i).get_openai_async_client() for i, e in enumerate(group)]
                for name, group in groups.items()}

    return pipeline_for_plan(session.plan, pad_token_id=pad_token_id, storage=storage, recorder=recorder,
                             auxiliary_models=auxiliary_models)


def strategy_for(session: Session, storage: Any, *, count_dropped: bool = False,
                 replay_when_starved: bool = False) -> Any:
    """Return the sample strategy the trainer draws from ``storage`` with.

    A step takes ``buffer.batch_size`` whole tasks, or, when the config sets
    ``train_batch_size``, whole tasks up to that many experiences. ``mix``
    takes its expert rows from the auxiliary data set it names and the rest
    of the batch from ``storage``. With ``count_dropped`` the groups the
    explorer dropped take their places in the batches (the batch ends with
    the complete groups rather than waiting). With experience replay the
    strategy is wrapped in a :class:`~trinity.buffer.replay.ReplayStrategy`
    (``replay_when_starved``: a read that finds nothing new trains on the pool).
    """
    from trinity.buffer import make_sample_strategy

    plan = session.plan
    group = plan.config.algorithm.repeat_times
    options = dict(plan.buffer.sample_strategy_args)
    rows = plan.buffer.train_batch_rows
    tasks = plan.buffer.batch_size
    if plan.buffer.sample_strategy != "mix":
        strategy = make_sample_strategy(plan.buffer.sample_strategy, storage, batch_size=tasks, group_size=group,
                                        batch_rows=rows, **options)
        strategy.count_dropped = count_dropped
        replay = plan.buffer.experience.replay if plan.buffer.experience is not None else None
        if replay is None:
            return strategy
        from trinity.buffer.replay import ReplayPool, ReplayStrategy, make_priority_function, replay_pool_path

        pool = ReplayPool(replay_pool_path(session.run_dir, plan.buffer.experience.name),  # type: ignore[union-attr]
                          priority_fn=make_priority_function(replay.priority_fn, replay.priority_fn_args),
                          capacity=replay.capacity, cooldown=replay.cooldown)
        return ReplayStrategy(strategy, pool, replay_when_starved=replay_when_starved)
    from trinity.buffer.dataset_source import DatasetSource
    from trinity.buffer.mixing import MixStrategy, expert_rows

    total = plan.buffer.train_batch_size
    experts = expert_rows(total, float(options.get("expert_data_ratio", 0.5)))
    usual_rows = max(1, total - experts) if rows is not None else None
    usual = make_sample_strategy("default", storage, batch_size=max(1, (total - experts) // group),
                                 group_size=group, batch_rows=usual_rows)
    usual.count_dropped = count_dropped
    data = plan.buffer.auxiliary[str(options.get("sft_dataset_name", "sft_dataset"))]
    expert = DatasetSource.for_dataset(plan, data, experts)
    return MixStrategy(usual, expert)


def training_tasks(session: Session, batch: list[tuple[int, Any]], step: int) -> list[Any]:
    """Return the workflow tasks of one explorer step: each record repeated ``algorithm.repeat_times`` times.

    With ``explorer.max_repeat_times_per_runner`` the repeats of one record
    are split over several tasks (runners) that share its group.
    """
    from trinity.common.workflows.base import Task

    plan = session.plan
    taskset = plan.buffer.train_taskset
    assert taskset is not None
    repeats = plan.config.algorithm.repeat_times
    chunk = plan.explorer.max_repeat_times_per_runner or repeats
    tasks = []
    for epoch, record in batch:
        for first in range(0, repeats, chunk):
            task = Task.from_record(record, taskset, repeat_times=min(chunk, repeats - first), epoch=epoch,
                                    step=step)
            tasks.append(dataclasses.replace(task, run_id_offset=first))
    return tasks


class NothingTrainedError(TrinityError):
    """A run that cannot train: every task of a step failed, or the run ended without a trained step (exit 1)."""


def check_step_failures(result: Any, step: int) -> None:
    """Raise NothingTrainedError when every task of explorer step ``step`` (1-based) failed for good.

    Its rollouts will not come: the workflow (or its model) is broken, and a
    run that goes on would train nothing. The line quotes the first error.
    """
    tasks = int(result.metrics.get("tasks", 0))
    if not tasks or len(result.failures) < tasks:
        return
    first = result.failures[0]
    raise NothingTrainedError(
        f"explorer step {step}: every task failed ({tasks} of {tasks}, {int(result.metrics.get('attempts', 0))} "
        f"attempt(s), {int(result.metrics.get('timeouts', 0))} timed out); the first error, task {first.position} "
        f"({first.task.workflow}): {first.error}"
    )


def check_trained(trained: int, explored: int, why: str) -> None:
    """Raise NothingTrainedError when a run that explored (or read) ``explored`` batches trained no step."""
    if trained == 0 and explored > 0:
        raise NothingTrainedError(f"the run trained no step from its {explored} batch(es): {why}")


def explore_metrics(result: Any, experiences: list[Any]) -> dict[str, float]:
    """Return the monitor metrics of one explorer step (workflow metrics averaged over its experiences)."""
    from trinity.launcher.evaluation import workflow_metrics
    from trinity.monitor.keys import REWARD_MEAN, TOKENS_PER_SECOND

    metrics = {f"explore/{k}": float(v) for k, v in result.metrics.items()}
    rewards = [float(e.reward or 0.0) for e in experiences]
    tokens = sum(int(e.response_length) for e in experiences)
    seconds = float(result.metrics.get("time_s", 0.0)) or 1e-9
    metrics[REWARD_MEAN] = sum(rewards) / len(rewards) if rewards else 0.0
    metrics[TOKENS_PER_SECOND] = tokens / seconds
    metrics.update({f"explore/{key}/mean": value for key, value in workflow_metrics(experiences).items()})
    return metrics


def call_all(engines: list[Any], method: str, *args: Any) -> list[Any]:
    """Call ``method(*args)`` on every engine actor and return the results."""
    import ray

    started = time.monotonic()
    out = ray.get([getattr(e, method).remote(*args) for e in engines])
    logger.info("%s on %d engine(s) in %.2f s", method, len(engines), time.monotonic() - started)
    return list(out)


def write_ray_timeline(session: Session) -> None:
    """Write Ray's timeline to ``<run>/monitor/timeline.json`` when ``monitor.enable_ray_timeline`` asks for it."""
    if not session.plan.monitor.enable_ray_timeline:
        return
    import ray

    target = session.run_dir / "monitor" / "timeline.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    ray.timeline(filename=str(target))  # type: ignore[no-untyped-call]
    logger.info("Ray timeline: %s", target)


def save_on_stop(trainer: Any, state: dict[str, Any], *, saved: bool) -> None:
    """Checkpoint the last whole step after a stop request (unless ``saved`` says it has one) and say what was kept."""
    step = int(trainer.step)
    name = stop.terminated().name
    if step == 0:
        logger.warning("%s: stopping before the first step; nothing to save", name)
    elif saved:
        logger.warning("%s: stopping after step %d, whose checkpoint was already saved", name, step)
    else:
        path = trainer.save_checkpoint(state)
        logger.warning("%s: stopping after step %d; saved its checkpoint %s (the same command resumes from it)",
                       name, step, path)


def total_train_steps(session: Session, explore_batches: int | None) -> int | None:
    """Return the steps the trainer will take: the explored batches (per train batch) capped by trainer.total_steps."""
    plan = session.plan
    steps = explore_batches
    if steps is not None and plan.buffer.train_taskset is not None:
        rollout_rows = plan.buffer.train_batch_size
        if plan.buffer.sample_strategy == "mix":  # the expert rows of a step come from the SFT data, not rollouts
            from trinity.buffer.mixing import expert_rows

            ratio = float(plan.buffer.sample_strategy_args.get("expert_data_ratio", 0.5))
            rollout_rows = max(1, rollout_rows - expert_rows(rollout_rows, ratio))
        per_step = rollout_rows / max(1, plan.buffer.batch_size * plan.config.algorithm.repeat_times)
        steps = int(steps / per_step) if per_step > 0 else steps
    cap = plan.trainer.total_steps
    if cap is not None:
        steps = cap if steps is None else min(steps, cap)
    return steps
