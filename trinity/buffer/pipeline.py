"""The experience pipeline: processors applied, in order, to experiences before they are stored.

Built-in processors:

* :class:`Operators`: applies the configured experience operators
  (:data:`~trinity.buffer.catalog.EXPERIENCE_OPERATORS`) in order to the
  step's experiences: upstream's operator classes (filters, mappers, users'
  ``ExperienceOperatorV1``) on the whole list, reward shaper functions on each
  reward (the reward before shaping kept in ``info["raw_reward"]``).
* :class:`GroupAdvantages`: for algorithms whose advantages are computed in
  the buffer (``grpo``, ``opmd``, ... : the plan's ``advantage_in``), holds
  each group until all its members have arrived (``info["group_size"]``,
  which :meth:`ExperiencePipeline.write_step` writes from the explorer step:
  every experience of the task, whatever the count; else ``group_size``) or
  the explorer step is over, then calls the advantage function of
  :data:`~trinity.algorithm.advantage.ADVANTAGE_FNS` by name on a
  :func:`~trinity.common.experience.make_batch` of the complete groups and
  writes per-token ``advantages`` and ``returns`` into each experience (and
  ``info["group_size"]``, which the sample strategies use); groups the
  plan's group filter skips (``std_threshold``) are dropped.

A group whose members will never all arrive (a failed rollout) stays held
until :meth:`ExperiencePipeline.flush`, which releases it as it is.

Every member of a group must pass through the same pipeline object: run one
pipeline per writer and keep a task's rollouts on one writer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import torch

from trinity.algorithm.advantage import ADVANTAGE_FNS, AdvantageInputs
from trinity.algorithm.options import check_options
from trinity.buffer.catalog import EXPERIENCE_OPERATORS
from trinity.buffer.sampling import GroupAssembler, mark_group_sizes
from trinity.buffer.storage.base import ExperienceStorage
from trinity.common.experience import Experience, make_batch

logger = logging.getLogger(__name__)


def buffer_advantage_fn(training: Any) -> str:
    """Return the advantage function the pipeline computes for a training plan, or ``""`` when the trainer does.

    The algorithm type decides (upstream's ``compute_advantage_in_trainer``):
    ``training.advantage_in`` is ``buffer`` for group advantages (GRPO, OPMD,
    ...), ``trainer`` for those that need the critic, the whole batch or a KL
    penalty from the reference model.
    """
    name = str(getattr(training, "advantage_fn", None) or "")
    return name if name and getattr(training, "advantage_in", "") == "buffer" else ""


class ExperienceProcessor(ABC):
    """One stage of the pipeline."""

    #: Metrics the stage reported since the pipeline last cleared them (``name/metric``: value).
    metrics: dict[str, float]

    def __new__(cls, *args: Any, **kwargs: Any) -> ExperienceProcessor:
        instance = super().__new__(cls)
        instance.metrics = {}
        return instance

    @abstractmethod
    def process(self, experiences: list[Experience]) -> list[Experience]:
        """Return the experiences to pass on (possibly changed, possibly fewer: a stage may hold some)."""

    def flush(self) -> list[Experience]:
        """Return every held experience, processed as far as possible; nothing is held afterwards."""
        return []

    def held(self) -> int:
        """Return the number of experiences this stage holds."""
        return 0

    def close(self) -> None:  # noqa: B027 - most stages hold nothing to release
        """Release what the stage holds, when the run ends."""


class Operators(ExperienceProcessor):
    """Applies the configured experience operators in order; see the module docstring."""

    def __init__(self, operators: Sequence[tuple[str, Mapping[str, Any]]],
                 auxiliary_models: Callable[[], Mapping[str, list[Any]]] | None = None) -> None:
        """Check and build each ``(name, args)``; raises UnknownNameError / UnknownOptionError (one line).

        ``auxiliary_models`` returns the run's auxiliary models as upstream's
        operators get them, ``{name: [openai.AsyncOpenAI, ...]}``; it is called
        once, before the first ``process`` of an ``ExperienceOperatorV1``.
        """
        self.auxiliary_models = auxiliary_models
        self._loop: asyncio.AbstractEventLoop | None = None
        self.stages: list[tuple[str, Any, dict[str, Any]]] = []
        for name, options in operators:
            entry = EXPERIENCE_OPERATORS.get(name)
            check_options(EXPERIENCE_OPERATORS.kind, name, entry, dict(options))
            if isinstance(entry, type):  # an operator class (upstream's shape), built once
                self.stages.append((name, entry(**dict(options)), {}))
            else:
                self.stages.append((name, entry, dict(options)))
        #: Experiences the operators dropped so far.
        self.dropped = 0

    def process(self, experiences: list[Experience]) -> list[Experience]:
        """Return what the operators keep of ``experiences``, group sizes counted again when one dropped some.

        Operators' metrics are added to :attr:`metrics` as ``<operator>/<metric>``.
        """
        out = list(experiences)
        for name, stage, options in self.stages:
            if hasattr(stage, "process"):
                out, metrics = run_operator(stage, out, self._run, self._auxiliary)
                for key, value in (metrics or {}).items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        self.metrics[f"{name}/{key}"] = float(value)
            else:
                out = [self._shape(stage, options, exp) for exp in out]
        if len(out) != len(experiences):
            self.dropped += len(experiences) - len(out)
            mark_group_sizes(out)
        return out

    @staticmethod
    def _shape(fn: Any, options: Mapping[str, Any], exp: Experience) -> Experience:
        """Return ``exp`` with its reward shaped by the shaper function ``fn`` (unchanged without a reward)."""
        if exp.reward is None:
            return exp
        reward = float(fn(float(exp.reward), exp, **options))
        info = {**exp.info, "raw_reward": exp.info.get("raw_reward", exp.reward)}
        return dataclasses.replace(exp, reward=reward, info=info)

    def _auxiliary(self) -> dict[str, list[Any]]:
        return dict(self.auxiliary_models()) if self.auxiliary_models is not None else {}

    def _run(self, coroutine: Any) -> Any:
        """Run ``coroutine`` on the stage's own event loop (one for the run, so async clients outlive a step)."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="experience-operators", daemon=True).start()
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def close(self) -> None:
        """Close every operator that holds something, then the stage's event loop."""
        for _, stage, _ in self.stages:
            closing = getattr(stage, "close", None)
            if closing is not None:
                result = closing()
                if inspect.isawaitable(result):
                    self._run(result)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop = None


def run_operator(operator: Any, experiences: list[Experience], run: Callable[[Any], Any],
                 auxiliary: Callable[[], dict[str, list[Any]]]) -> tuple[list[Experience], dict[str, Any]]:
    """Return ``operator.process(experiences)``, a coroutine (``ExperienceOperatorV1``) awaited with ``run``.

    An ``ExperienceOperatorV1`` is prepared before its first call: given the
    run's auxiliary models (``set_auxiliary_model(auxiliary())``), then its
    ``prepare()``. Raises TypeError (one line) when it does not return ``(experiences, metrics)``.
    """
    if not getattr(operator, "_trinity_prepared", False):
        if hasattr(operator, "set_auxiliary_model"):
            operator.set_auxiliary_model(auxiliary())
        if hasattr(operator, "prepare") and inspect.iscoroutinefunction(operator.prepare):
            run(operator.prepare())
        operator._trinity_prepared = True
    result = operator.process(experiences)
    if inspect.isawaitable(result):
        result = run(result)
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], list)):
        raise TypeError(f"experience operator {type(operator).__name__}.process must return (list of experiences, "
                        f"metrics dict), got {type(result).__name__}")
    return result[0], dict(result[1] or {})


class GroupAdvantages(ExperienceProcessor):
    """Computes group advantages once groups are complete; see the module docstring."""

    def __init__(
        self,
        advantage_fn: str,
        options: Mapping[str, Any] | None = None,
        *,
        group_size: int,
        pad_token_id: int = 0,
        group_filter: Any = None,
    ) -> None:
        """Raises UnknownNameError / UnknownOptionError (one line) for a bad function or option name.

        ``group_filter`` (a plan's ``GroupFilter``) drops the rows of groups the
        advantage function skips (``std_threshold``), refilling with copies of
        kept groups when it says so.
        """
        fn = ADVANTAGE_FNS.get(advantage_fn)
        self.group_filter = group_filter
        self.options = dict(options or {})
        check_options(ADVANTAGE_FNS.kind, advantage_fn, fn, self.options)
        #: Whether ``fn`` is an advantage class (upstream's shape), called on the experiences themselves.
        self.on_experiences = isinstance(fn, type)
        self.fn = fn
        self.name = advantage_fn
        #: Rows dropped by the group filter so far.
        self.dropped = 0
        self.pad_token_id = pad_token_id
        self.assembler = GroupAssembler(group_size)

    def _complete(self) -> list[list[Experience]]:
        groups = []
        while (group := self.assembler.pop()) is not None:
            groups.append(group)
        return groups

    def _compute(self, groups: list[list[Experience]]) -> list[Experience]:
        """Return the members of ``groups`` with advantages and returns filled in (one batch for all groups)."""
        members = [e for g in groups for e in g]
        if not members:
            return []
        missing = next((e for e in members if e.reward is None), None)
        if missing is not None:
            raise ValueError(
                f"experience {missing.run_id} of group {missing.group_id!r} has no reward; "
                f"advantage function {self.name!r} needs every reward (does the workflow set one?)"
            )
        if self.on_experiences:
            from trinity.algorithm.class_adapters import run_advantage

            with torch.no_grad():
                computed, metrics = run_advantage(cast(type, self.fn), self.name, self.options, members)
            self.metrics.update({f"{self.name}/{key}": value for key, value in metrics.items()})
            mark_group_sizes(computed)  # a group is what the class returned of it
            return computed
        batch = make_batch(members, self.pad_token_id)
        with torch.no_grad():
            advantages, returns = self.fn(AdvantageInputs.from_batch(batch), **self.options)
        sizes = [len(group) for group in groups for _ in group]
        out = []
        for row, exp in enumerate(members):
            start, stop = exp.prompt_length - 1, len(exp.tokens) - 1
            out.append(dataclasses.replace(
                exp,
                advantages=advantages[row, start:stop].clone(),
                returns=returns[row, start:stop].clone(),
                info={**exp.info, "group_size": sizes[row]},
            ))
        return self._filter(out, batch)

    def _filter(self, out: list[Experience], batch: Any) -> list[Experience]:
        """Drop (and refill) rows by the plan's group filter; the input when there is none."""
        rule = self.group_filter
        if rule is None or not out:
            return out
        from trinity.algorithm.group_filter import kept_rows

        keep = kept_rows(batch.rewards, batch.group_index, std_threshold=rule.std_threshold,
                         duplicate_experiences=rule.duplicate_experiences,
                         run_index=batch.run_index if rule.by_episode else None)
        self.dropped += len(out) - len(set(keep.tolist()))
        kept = []
        times: dict[int, int] = {}
        for index in keep.tolist():
            exp = out[index]
            times[index] = times.get(index, 0) + 1
            if times[index] > 1:  # the n-th copy of a group is a group of its own, shared by its members
                exp = dataclasses.replace(exp, group_id=f"{exp.group_id}/copy-{times[index] - 1}")
            kept.append(exp)
        return kept

    def process(self, experiences: list[Experience]) -> list[Experience]:
        """Hold ``experiences`` by group and return the members of every group now complete, with advantages."""
        self.assembler.feed(experiences)
        return self._compute(self._complete())

    def flush(self) -> list[Experience]:
        """Release every incomplete group as it is, with advantages computed over the members present."""
        self.assembler.release_incomplete()
        return self._compute(self._complete())

    def held(self) -> int:
        """Return the number of experiences of incomplete groups."""
        return len(self.assembler.held())


class ExperiencePipeline:
    """A chain of processors, optionally writing its output to a storage."""

    def __init__(self, processors: Sequence[ExperienceProcessor] = (), storage: ExperienceStorage | None = None):
        #: Where every experience is also stored as explored, before the processors (None: nowhere).
        self.recorder: ExperienceStorage | None = None
        self.processors = list(processors)
        self.storage = storage
        #: Dropped groups of explorer steps that stored nothing, told with the next step that stores something.
        self._carried_dropped = 0

    def process(self, experiences: Sequence[Experience]) -> list[Experience]:
        """Record ``experiences`` (when there is a recorder), run them through every processor; return the output."""
        if self.recorder is not None and experiences:
            self.recorder.put(list(experiences))
        out = list(experiences)
        for processor in self.processors:
            out = processor.process(out)
        return out

    def flush(self) -> list[Experience]:
        """Flush every processor in order (each flush output passes through the later ones) and return the lot."""
        out: list[Experience] = []
        for processor in self.processors:
            out = (processor.process(out) if out else []) + processor.flush()
        return out

    def close(self) -> None:
        """Close the operators, then close and release the recorder (the experience storage is the launcher's)."""
        for processor in self.processors:
            processor.close()
        if self.recorder is not None:
            try:
                self.recorder.close()
            finally:
                self.recorder.release()
                self.recorder = None

    def held(self) -> int:
        """Return the number of experiences held by the processors."""
        return sum(p.held() for p in self.processors)

    def write_step(self, experiences: Sequence[Experience], timeout: float | None = None, *,
                   batch: int | None = None, dropped_groups: int = 0,
                   mark: Callable[[list[Experience]], tuple[str, str]] | None = None) -> list[Experience]:
        """Process every experience of an explorer step, release what is still held, store it all in one call.

        A step's results hold every experience of its tasks, so each group's
        size is what the step holds of it (:func:`~trinity.buffer.sampling.mark_group_sizes`:
        a multi-step workflow's task is one group whatever its count), and a
        group still incomplete afterwards never completes: it is released as it
        is. Returns what was stored (groups a filter dropped are not).

        With ``batch`` (the explorer step), every stored experience says that the
        step is final: ``info["batch_id"]``, ``info["batch_groups"]`` (groups
        stored for it) and ``info["batch_dropped"]`` (its ``dropped_groups``, the
        groups whose rollouts failed, plus those of earlier steps that stored
        nothing), so a reader counting dropped groups never waits for them.

        ``mark``, when given, is called with what is about to be stored (the
        stages have run: :meth:`step_metrics` holds the step's figures) and
        returns ``(key, text)``: the writer's mark, stored in the same write
        where the storage can (``ExperienceStorage.put_marked``).
        """
        experiences = list(experiences)
        mark_group_sizes(experiences)
        for processor in self.processors:
            processor.metrics = {}
        before = self.operator_dropped()
        stored = self.process(experiences) + self.flush()
        if experiences and self.operator_dropped() - before == len(experiences):
            logger.warning("the experience operators dropped all %d experience(s) of the step: %s",
                           len(experiences), self.step_metrics())
        if batch is not None:
            dropped = dropped_groups + self._carried_dropped
            self._carried_dropped = 0 if stored else dropped
            count = len({e.group_id for e in stored if e.group_id}) + sum(1 for e in stored if not e.group_id)
            for e in stored:  # a new dict, as mark_group_sizes does: no new Experience (its checks cost ~10 us)
                e.info = {**e.info, "batch_id": batch, "batch_groups": count, "batch_dropped": dropped}
        if mark is None:
            self._put(stored, timeout)
        elif self.storage is None:
            raise ValueError("this experience pipeline has no storage to write to")
        else:
            self.storage.put_marked(stored, *mark(stored), timeout=timeout)
        return stored

    def operator_dropped(self) -> int:
        """Return how many experiences the experience operators dropped so far."""
        return sum(p.dropped for p in self.processors if isinstance(p, Operators))

    def group_filter_dropped(self) -> int:
        """Return how many experiences the group filter dropped so far (groups whose rewards did not spread)."""
        return sum(p.dropped for p in self.processors if isinstance(p, GroupAdvantages))

    def step_metrics(self) -> dict[str, float]:
        """Return what the stages reported during the last :meth:`write_step`, as ``pipeline/<name>/<metric>``."""
        return {f"pipeline/{key}": value for p in self.processors for key, value in p.metrics.items()}

    def write(self, experiences: Sequence[Experience], timeout: float | None = None) -> int:
        """Process ``experiences`` and put the result into the storage in one call; returns how many were stored.

        Raises ValueError without a storage, and whatever the storage's ``put`` raises.
        """
        return self._put(self.process(experiences), timeout)

    def finish(self, timeout: float | None = None) -> int:
        """Flush and store what was held (call before closing the storage); returns how many were stored."""
        return self._put(self.flush(), timeout)

    def _put(self, experiences: list[Experience], timeout: float | None) -> int:
        if self.storage is None:
            raise ValueError("this experience pipeline has no storage to write to")
        if experiences:
            self.storage.put(experiences, timeout=timeout)
        return len(experiences)


def build_pipeline(
    *,
    reward_shaping: Sequence[Mapping[str, Any]] = (),
    advantage_fn: str = "",
    advantage_options: Mapping[str, Any] | None = None,
    group_size: int = 1,
    pad_token_id: int = 0,
    storage: ExperienceStorage | None = None,
    group_filter: Any = None,
    auxiliary_models: Callable[[], Mapping[str, list[Any]]] | None = None,
) -> ExperiencePipeline:
    """Return the pipeline for a run (``auxiliary_models``: see :class:`Operators`).

    ``reward_shaping`` is a list of ``{"name": <shaper>, "args": {...}}``
    (applied in order). ``advantage_fn``, when set, adds group advantages
    (only group-local functions: the training plan checks that; others need what only the
    trainer has). Raises ValueError (one line) for a malformed shaping
    entry, UnknownNameError / UnknownOptionError for unknown names or options.
    """
    processors: list[ExperienceProcessor] = []
    if reward_shaping:
        specs = []
        for number, entry in enumerate(reward_shaping, start=1):
            extra = set(entry) - {"name", "args"}
            if "name" not in entry or extra or not isinstance(entry.get("args", {}), Mapping):
                raise ValueError(
                    f"reward shaping entry {number} {dict(entry)!r} must be {{'name': <shaper>, 'args': {{...}}}} "
                    f"(operators: {', '.join(EXPERIENCE_OPERATORS.names())})"
                )
            specs.append((str(entry["name"]), entry.get("args", {})))
        processors.append(Operators(specs, auxiliary_models))
    if advantage_fn:
        processors.append(GroupAdvantages(advantage_fn, advantage_options, group_size=group_size,
                                          pad_token_id=pad_token_id, group_filter=group_filter))
    return ExperiencePipeline(processors, storage)


def pipeline_for_plan(
    plan: Any,
    *,
    pad_token_id: int = 0,
    storage: ExperienceStorage | None = None,
    recorder: ExperienceStorage | None = None,
    auxiliary_models: Callable[[], Mapping[str, list[Any]]] | None = None,
) -> ExperiencePipeline:
    """Return the pipeline of a run (a ``RunPlan``): its operators, then group advantages when the buffer computes them.

    A group is every experience its task produced in an explorer step
    (``algorithm.repeat_times`` members when ``write_step`` did not size it);
    the advantage options are the training plan's. ``recorder``, when given, also stores every experience as
    explored, before any operator (``experience_pipeline.save_input``). Raises as
    :func:`build_pipeline`.
    """
    training = plan.algorithm
    name = buffer_advantage_fn(training)
    pipeline = build_pipeline(
        reward_shaping=[{"name": op.name, "args": dict(op.args)} for op in plan.buffer.operators],
        advantage_fn=name,
        advantage_options=dict(getattr(training, "advantage_options", {}) or {}) if name else None,
        group_size=plan.config.algorithm.repeat_times,
        pad_token_id=pad_token_id,
        storage=storage,
        group_filter=getattr(training, "group_filter", None) if name else None,
        auxiliary_models=auxiliary_models,
    )
    pipeline.recorder = recorder
    return pipeline
