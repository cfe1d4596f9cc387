"""The explorer's scheduler: runs a step's tasks on a pool of workflow runners bound to engines.

There are ``runners_per_engine`` runners per engine, numbered so that
consecutive runners use consecutive engines (round-robin): with engines A, B
and two runners each, tasks 0, 1, 2, 3 start on A, B, A, B. Each runner runs
one task at a time, in a thread of this process; workflows call their engine
through an :class:`~trinity.common.models.client.EngineClient`, which works
the same for Ray actor engines (``engine.generate.remote``) and in-process
engines. The attempts started together form a cohort per engine (see
:mod:`trinity.common.models.cohorts`): the engine serves their first calls as one batch.

Every task attempt has a deadline (``timeout`` seconds). An attempt that
raises, or outlives its deadline, is retried up to ``max_retries`` times
(a workflow that cannot even be built — unknown name, bad arguments — is not),
on another engine whenever there is one (the retry waits for a runner of
another engine rather than going back to the one it failed on); a timed-out
attempt is abandoned (its engine calls are cancelled or refused, its result
discarded) and its runner takes the next task at once. A task that fails
every attempt is reported in :attr:`StepResult.failures`, never dropped
silently. Results come back in task order.

An attempt whose engine died is not the task's failure: the engine is marked
dead (no attempt goes to it again until a fresh engine takes its place) and
the task runs again on a live engine without spending a retry. When no engine
lives, the step either waits for fresh ones (``wait_for_engines``: it ends
with the tasks not yet run in :attr:`StepResult.unserved`, keeping what the
others produced, and :meth:`Scheduler.run` with ``resume`` runs them once
fresh engines were swapped in) or, without a way to replace engines, fails
those tasks.

Tasks sharing a ``group_id`` form a group (the repeats of one record, possibly
split over several tasks). A group trains whole or not at all: once one of its
tasks fails for good, its other tasks are cancelled and the group is dropped
from the step (``dropped_groups`` / ``dropped_rollouts`` in the metrics); only
complete groups' experiences are returned. With over-rollout (``min_groups``
fewer than the step's groups) the step ends once that many groups are complete
and ``wait_after_min`` more seconds have passed, or earlier when every group is
resolved; groups still running then are abandoned (``abandoned_groups``).
"""

from __future__ import annotations

import itertools
import logging
import math
import queue
import threading
import time
import traceback
import uuid
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trinity.common.config.plan.run import RunPlan
from trinity.common.experience import Experience
from trinity.common.models.client import (
    EngineClient,
    EngineDeadError,
    TaskCancelledError,
    TaskTimeoutError,
)
from trinity.common.models.engine import SamplingParams
from trinity.common.workflows.base import Task, Workflow, make_workflow, sampling_from_model
from trinity.utils import stop as stop_signals

logger = logging.getLogger(__name__)

WorkflowFactory = Callable[[Task], Workflow]
#: What a runner thread reports: attempt id, experiences, error, whether a failure may be retried.
_Outcome = tuple[int, list[Experience] | None, BaseException | None, bool]


@dataclass
class TaskFailure:
    """A task that failed every attempt."""

    #: Position of the task in the step's task list.
    position: int
    task: Task
    #: Attempts made (``1 + max_retries``).
    attempts: int
    #: The last attempt's error, one line (``TypeError: ...``).
    error: str
    #: Whether the last attempt timed out.
    timed_out: bool


@dataclass
class StepResult:
    """What one step's tasks produced."""

    #: Per task, in task order: its experiences, or None when it failed.
    results: list[list[Experience] | None]
    #: Tasks that failed every attempt, in task order.
    failures: list[TaskFailure] = field(default_factory=list)
    #: Counters and timings of the step (``tasks``, ``failed``, ``retries``, ``timeouts``, ``time_s``, ...).
    metrics: dict[str, float] = field(default_factory=dict)
    #: Positions of the tasks not run because no engine lived (``wait_for_engines``); run them with ``resume``.
    unserved: list[int] = field(default_factory=list)

    @property
    def experiences(self) -> list[Experience]:
        """Every experience, task by task in task order."""
        return [e for r in self.results if r is not None for e in r]


@dataclass
class _Attempt:
    position: int
    number: int  # 0 for the first attempt
    slot: int
    engine: int
    deadline: float
    cancelled: threading.Event


def _engine_died(error: BaseException | None) -> bool:
    """Whether ``error``, or an error it was raised from, says the attempt's engine is dead."""
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, EngineDeadError):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


class _Groups:
    """Which tasks make up each group (the repeats of one record may be split over tasks) and how each fares."""

    def __init__(self, tasks: Sequence[Task]) -> None:
        self.members: dict[str, list[int]] = {}
        for position, task in enumerate(tasks):
            self.members.setdefault(task.group_id, []).append(position)
        self.group_of = [task.group_id for task in tasks]
        self._left = {group: len(positions) for group, positions in self.members.items()}
        self._failed: set[str] = set()
        #: Groups whose every task succeeded.
        self.complete = 0

    @property
    def total(self) -> int:
        """Number of groups."""
        return len(self.members)

    @property
    def failed(self) -> int:
        """Number of groups with a task that failed every attempt."""
        return len(self._failed)

    def succeed(self, position: int) -> None:
        """Record that the task at ``position`` succeeded."""
        group = self.group_of[position]
        self._left[group] -= 1
        if self._left[group] == 0 and group not in self._failed:
            self.complete += 1

    def fail(self, position: int) -> set[int]:
        """Record that the task at ``position`` failed for good; return the positions of its group."""
        group = self.group_of[position]
        self._failed.add(group)
        return set(self.members[group])

    def failed_names(self) -> set[str]:
        """Return the groups with a task that failed every attempt."""
        return set(self._failed)

    def positions_of_failed(self) -> list[int]:
        """Return the positions of every task of a failed group."""
        return [p for group in self._failed for p in self.members[group]]

    def incomplete_positions(self) -> list[int]:
        """Return the positions of every task of a group that is not complete (failed or unfinished)."""
        return [p for group, positions in self.members.items()
                if group in self._failed or self._left[group] > 0 for p in positions]


class Scheduler:
    """Runs tasks over engines with retries and timeouts; see the module docstring."""

    def __init__(
        self,
        engines: Sequence[Any],
        *,
        runners_per_engine: int = 2,
        timeout: float = 300.0,
        max_retries: int = 2,
        sampling: SamplingParams | None = None,
        tokenizer_path: str = "",
        workflow_factory: WorkflowFactory | None = None,
        auxiliary: Sequence[tuple[str, Sequence[Any], str]] = (),
        over_rollout_ratio: float = 0.0,
        wait_after_min: float = 30.0,
    ) -> None:
        """``engines``: Ray actor handles or in-process engines; ``workflow_factory`` builds a task's workflow.

        The default factory is ``make_workflow(task.workflow, sampling, task.workflow_args)``.
        ``auxiliary`` lists the other models workflows may call, as ``(name, engines, tokenizer folder)``
        in config order: each workflow gets ``auxiliary_models`` (one client per model, bound to the
        attempt's deadline) and ``auxiliary`` (the same by name) before it runs.
        ``over_rollout_ratio``: the fraction of a training step's groups :meth:`run` does not wait for;
        ``wait_after_min``: the seconds it still waits once the others are complete.
        Raises ValueError for no engines, ``runners_per_engine < 1``, ``timeout <= 0``, ``max_retries < 0``,
        an over-rollout ratio outside [0, 1) or a negative ``wait_after_min``.
        """
        if not engines:
            raise ValueError("the scheduler needs at least one engine")
        if runners_per_engine < 1 or timeout <= 0 or max_retries < 0:
            raise ValueError(
                f"need runners_per_engine >= 1, timeout > 0, max_retries >= 0; got {runners_per_engine}, "
                f"{timeout}, {max_retries}"
            )
        if not 0.0 <= over_rollout_ratio < 1.0 or wait_after_min < 0:
            raise ValueError(f"need 0 <= over_rollout_ratio < 1 and wait_after_min >= 0; got {over_rollout_ratio}, "
                             f"{wait_after_min}")
        self.clients = [EngineClient(e, tokenizer_path=tokenizer_path, index=i) for i, e in enumerate(engines)]
        #: ``(name, clients)`` of every auxiliary model, in config order.
        self.auxiliary = [(name, [EngineClient(e, tokenizer_path=path, index=i) for i, e in enumerate(group)])
                          for name, group, path in auxiliary]
        for name, clients in self.auxiliary:
            if not clients:
                raise ValueError(f"auxiliary model {name!r} has no engine")
        self.runners_per_engine = runners_per_engine
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.sampling = sampling or SamplingParams()
        self.workflow_factory = workflow_factory or self._default_factory
        self.over_rollout_ratio = float(over_rollout_ratio)
        self.wait_after_min = float(wait_after_min)
        self._lock = threading.Lock()
        self._ids = itertools.count()
        #: Engines whose actor died: no attempt goes to them until a fresh engine takes their place.
        self.dead_engines: set[int] = set()

    @classmethod
    def from_plan(cls, engines: Sequence[Any], plan: RunPlan,
                  auxiliary: Mapping[str, Sequence[Any]] | None = None) -> Scheduler:
        """Return a scheduler with a run's explorer settings and its model's sampling defaults.

        ``auxiliary`` maps each auxiliary model's name to its engines.
        """
        groups = auxiliary or {}
        return cls(
            engines,
            runners_per_engine=plan.explorer.runners_per_engine,
            timeout=plan.explorer.timeout,
            max_retries=plan.explorer.max_retries,
            sampling=sampling_from_model(plan.model),
            tokenizer_path=plan.model.path,
            auxiliary=[(aux.name, groups[aux.name], aux.model_path) for aux in plan.explorer.auxiliary
                       if aux.name in groups],
            over_rollout_ratio=plan.explorer.over_rollout_ratio,
            wait_after_min=plan.explorer.wait_after_min,
        )

    def replace_engine(self, index: int, engine: Any) -> None:
        """Put ``engine`` in place of engine ``index`` (a fresh one for a dead one): its runners use it from now on.

        Waits for a step in progress to end. Raises IndexError for an index
        outside the pool.
        """
        with self._lock:
            old = self.clients[index]
            self.clients[index] = EngineClient(engine, tokenizer_path=old.tokenizer_path, index=index)
            self.dead_engines.discard(index)

    def dead_engine_handles(self) -> dict[int, Any]:
        """Return ``{index: engine}`` of every dead engine, read together (a replaced index is not in it)."""
        with self._lock:
            return {index: self.clients[index].engine for index in sorted(self.dead_engines)}

    def _default_factory(self, task: Task) -> Workflow:
        return make_workflow(task.workflow, self.sampling, task.workflow_args)

    @property
    def num_runners(self) -> int:
        """Runners in the pool (engines x runners per engine)."""
        return len(self.clients) * self.runners_per_engine

    def run(self, tasks: Sequence[Task], *, min_groups: int | None = None,
            wait_after_min: float | None = None, wait_for_engines: bool = False,
            resume: StepResult | None = None) -> StepResult:
        """Run ``tasks`` and return their results in task order; see the module docstring for groups.

        ``min_groups``: stop once this many groups are complete and ``wait_after_min``
        seconds have passed since (or every group is resolved); the groups still
        running are abandoned. None: the scheduler's over-rollout setting for a
        training step (every group when ``over_rollout_ratio`` is 0), every group
        for evaluation tasks. ``wait_for_engines``: when no engine lives, end with
        the tasks not run in ``unserved`` instead of failing them. ``resume``: an
        earlier result of the same ``tasks`` whose ``unserved`` tasks are run now;
        the result returned holds both.
        """
        tasks = list(tasks)
        if min_groups is None:
            min_groups = self.min_groups(tasks)
        with self._lock:
            return self._run(tasks, min_groups, self.wait_after_min if wait_after_min is None else wait_after_min,
                             wait_for_engines, resume)

    def min_groups(self, tasks: Sequence[Task]) -> int:
        """Return the complete groups a step of ``tasks`` waits for: all but the over-rollout fraction.

        Evaluation tasks are always waited for.
        """
        groups = len({t.group_id for t in tasks})
        if not self.over_rollout_ratio or any(t.is_eval for t in tasks):
            return groups
        return max(1, math.ceil(groups * (1.0 - self.over_rollout_ratio)))

    def _run(self, tasks: list[Task], min_groups: int, wait_after_min: float, wait_for_engines: bool,
             resume: StepResult | None) -> StepResult:
        started = time.monotonic()
        results: list[list[Experience] | None] = [None] * len(tasks)
        failures: list[TaskFailure] = []
        counts = {"attempts": 0, "retries": 0, "timeouts": 0, "succeeded": 0, "engine_lost_attempts": 0}
        groups = _Groups(tasks)
        engines = len(self.clients)
        free: deque[int] = deque(range(self.num_runners))  # runner r uses engine r % engines
        pending: deque[tuple[int, int, int | None]] = deque((i, 0, None) for i in range(len(tasks)))
        if resume is not None:
            started -= float(resume.metrics.get("time_s", 0.0))
            results = list(resume.results)
            failures = list(resume.failures)
            counts.update({key: int(resume.metrics.get(key, 0)) for key in counts})
            for position, result in enumerate(results):
                if result is not None:
                    groups.succeed(position)
            for failure in failures:
                groups.fail(failure.position)
            pending = deque((position, 0, None) for position in resume.unserved)
        unserved: list[int] = []
        running: dict[int, _Attempt] = {}
        done: queue.Queue[_Outcome] = queue.Queue()
        enough_at: float | None = None  # when min_groups groups were first complete

        def fail(attempt: _Attempt, error: BaseException | str, timed_out: bool, retryable: bool = True) -> None:
            text = error if isinstance(error, str) else "".join(traceback.format_exception_only(error)).strip()
            counts["timeouts"] += int(timed_out)
            if retryable and attempt.number < self.max_retries:
                counts["retries"] += 1
                logger.info("task %d attempt %d failed (%s); retrying", attempt.position, attempt.number + 1, text)
                pending.appendleft((attempt.position, attempt.number + 1, attempt.engine))
                return
            failures.append(TaskFailure(attempt.position, tasks[attempt.position], attempt.number + 1, text, timed_out))
            logger.warning("task %d failed after %d attempts: %s", attempt.position, attempt.number + 1, text)
            # the group can no longer be complete: its other tasks are not worth running
            siblings = groups.fail(attempt.position)
            for entry in [p for p in pending if p[0] in siblings]:
                pending.remove(entry)
            for attempt_id, other in list(running.items()):
                if other.position in siblings:
                    stop(attempt_id)

        def stop(attempt_id: int) -> None:
            attempt = running.pop(attempt_id)
            attempt.cancelled.set()
            free.append(attempt.slot)

        while pending or running:
            if enough_at is not None and time.monotonic() - enough_at >= wait_after_min:
                break  # over-rollout: the groups still running are abandoned
            if pending and not running and len(self.dead_engines) == engines:
                if wait_for_engines:
                    unserved = sorted(position for position, _, _ in pending)
                    logger.warning("no rollout engine lives: %d task(s) wait for fresh engines", len(unserved))
                    break
                while pending:  # nothing can replace the engines: the tasks fail, and are reported
                    position, number, _ = pending.popleft()
                    fail(_Attempt(position, number, -1, -1, 0.0, threading.Event()),
                         "EngineDeadError: no rollout engine lives to run it", False, retryable=False)
                continue
            burst: list[tuple[int, _Attempt]] = []
            while pending and free:
                picked = self._pick(pending, free)
                if picked is None:
                    break  # every waiting retry wants another engine than the free runners use
                (position, number, _), slot = picked
                attempt = _Attempt(position, number, slot, slot % engines, time.monotonic() + self.timeout,
                                   threading.Event())
                attempt_id = next(self._ids)
                running[attempt_id] = attempt
                counts["attempts"] += 1
                burst.append((attempt_id, attempt))
            # the attempts started together form one cohort per engine, which the engine serves as one batch
            sizes = Counter(attempt.engine for _, attempt in burst)
            names = {engine: uuid.uuid4().hex for engine in sizes}
            for attempt_id, attempt in burst:
                client = self.clients[attempt.engine].bind(
                    attempt.deadline, attempt.cancelled, cohort=(names[attempt.engine], sizes[attempt.engine]))
                threading.Thread(
                    target=self._attempt, args=(attempt_id, tasks[attempt.position], client, done),
                    name=f"trinity-runner-{attempt.slot}", daemon=True,
                ).start()
            horizon = float("inf") if enough_at is None else enough_at + wait_after_min
            wait = max(0.0, min(min((a.deadline for a in running.values()), default=horizon), horizon)
                       - time.monotonic())
            try:
                attempt_id, experiences, error, retryable = done.get(timeout=wait)
            except queue.Empty:
                pass
            else:
                finished = running.pop(attempt_id, None)
                if finished is not None:  # else: a late answer of an abandoned attempt
                    free.append(finished.slot)
                    if error is None and experiences is not None:
                        results[finished.position] = experiences
                        counts["succeeded"] += 1
                        groups.succeed(finished.position)
                    elif _engine_died(error):  # not the task's failure: it runs again elsewhere, no retry spent
                        if finished.engine not in self.dead_engines:  # (expected while the run stops on a signal)
                            logger.log(logging.INFO if stop_signals.signalled() else logging.WARNING,
                                       "engine %d is dead; no more tasks go to it", finished.engine)
                        self.dead_engines.add(finished.engine)
                        counts["engine_lost_attempts"] += 1
                        pending.appendleft((finished.position, finished.number, None))
                    else:
                        timed_out = isinstance(error, (TaskTimeoutError, TaskCancelledError))
                        fail(finished, error or "workflow returned nothing", timed_out, retryable)
            now = time.monotonic()
            for attempt_id, attempt in list(running.items()):
                if now >= attempt.deadline:
                    stop(attempt_id)
                    fail(attempt, f"TaskTimeoutError: no result within {self.timeout:g}s", True)
            if enough_at is None and groups.complete >= min_groups:
                enough_at = time.monotonic()
        for attempt_id in list(running):
            stop(attempt_id)
        failures.sort(key=lambda f: f.position)
        waiting = {groups.group_of[position] for position in unserved}
        dropped = [p for p in groups.incomplete_positions() if groups.group_of[p] not in waiting]
        for position in dropped:
            results[position] = None  # a group trains whole or not at all (a group waiting for engines: later)
        experiences = [e for r in results if r is not None for e in r]
        rewards = [e.reward for e in experiences if e.reward is not None]
        failed_groups = groups.failed
        abandoned_groups = groups.total - groups.complete - groups.failed - len(waiting - groups.failed_names())
        metrics = {
            "tasks": float(len(tasks)),
            "succeeded": float(counts["succeeded"]),
            "failed": float(len(failures)),
            "attempts": float(counts["attempts"]),
            "retries": float(counts["retries"]),
            "engine_lost_attempts": float(counts["engine_lost_attempts"]),
            "timeouts": float(counts["timeouts"]),
            "experiences": float(len(experiences)),
            "groups": float(groups.total),
            "complete_groups": float(groups.complete),
            "dropped_groups": float(failed_groups),
            "dropped_rollouts": float(sum(tasks[p].repeat_times for p in groups.positions_of_failed())),
            "abandoned_groups": float(abandoned_groups),
            "dead_engines": float(len(self.dead_engines)),
            "time_s": time.monotonic() - started,
        }
        if rewards:
            metrics["reward_mean"] = sum(rewards) / len(rewards)
        if failed_groups or abandoned_groups:
            logger.info("step: %d of %d groups complete, %d dropped (failed), %d abandoned (over-rollout)",
                        groups.complete, groups.total, failed_groups, abandoned_groups)
        return StepResult(results=results, failures=failures, metrics=metrics, unserved=unserved)

    def _pick(self, pending: deque[tuple[int, int, int | None]],
              free: deque[int]) -> tuple[tuple[int, int, int | None], int] | None:
        """Take the first pending attempt that a free runner may run, and that runner; None when there is none.

        A retry runs on another engine than the one it failed on whenever another
        one lives: it waits for a runner of one rather than going back. No
        attempt goes to a dead engine.
        """
        engines = len(self.clients)
        candidates = [slot for slot in free if slot % engines not in self.dead_engines]
        live = engines - len(self.dead_engines)
        for entry in pending:
            avoid = entry[2]
            for slot in candidates:
                if avoid is None or live == 1 or slot % engines != avoid:
                    pending.remove(entry)
                    free.remove(slot)
                    return entry, slot
        return None

    def _attempt(
        self,
        attempt_id: int,
        task: Task,
        client: EngineClient,
        done: queue.Queue[_Outcome],
    ) -> None:
        """Run one attempt of ``task`` in a runner thread and report its experiences or error to ``done``.

        A task whose workflow cannot be built (unknown name, bad arguments) is not retried.
        """
        try:
            workflow = self.workflow_factory(task)
        except Exception as exc:  # noqa: BLE001 - a configuration error: reported, not retried
            done.put((attempt_id, None, exc, False))
            return
        bound: dict[str, EngineClient] = {}
        if self.auxiliary:
            bound = {
                name: clients[attempt_id % len(clients)].bind(client.deadline, client.cancelled)
                for name, clients in self.auxiliary
            }
            workflow.auxiliary = dict(bound)
            workflow.auxiliary_models = list(bound.values())
        try:
            experiences = workflow.run(client, task)
            if not isinstance(experiences, list) or not all(isinstance(e, Experience) for e in experiences):
                raise TypeError(f"workflow {task.workflow!r} returned {type(experiences).__name__}, not experiences")
            if task.run_id_offset:
                for experience in experiences:
                    experience.run_id += task.run_id_offset
            done.put((attempt_id, experiences, None, True))
        except BaseException as exc:  # reported to the scheduler, which retries or records it
            logger.debug("task attempt %d raised", attempt_id, exc_info=True)
            done.put((attempt_id, None, exc, True))
        finally:
            for used in (client, *bound.values()):
                used.drop_history()  # what the attempt's OpenAI clients left unextracted
