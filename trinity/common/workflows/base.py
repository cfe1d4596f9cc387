"""Tasks, the workflow base class and the workflow registry.

A :class:`Task` is one record of a task set made ready to run: prompt,
reference answer, which workflow and reward function run it, how many
rollouts (``repeat_times``) and any sampling overrides. A :class:`Workflow`
turns a task into experiences by calling an engine (through
:class:`~trinity.common.models.client.EngineClient`):
``workflow.run(engine, task) -> list[Experience]``, ``repeat_times`` of them,
sharing ``group_id`` (the GRPO group) with ``run_id`` 0..n-1.

Workflows are registered by name in :data:`WORKFLOWS`; :func:`make_workflow`
builds one from its name, the task set's ``workflow_args`` and the default
sampling settings.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from trinity.common.config.plan.data import TasksetPlan
from trinity.common.config.plan.model import ModelPlan
from trinity.common.config.schema import FormatConfig
from trinity.common.experience import Experience
from trinity.common.models.client import RolloutModel
from trinity.common.models.engine import Completion, SamplingParams
from trinity.common.workflows.catalog import WORKFLOWS

#: SamplingParams fields a task (or task set) may override.
SAMPLING_FIELDS = frozenset(f.name for f in dataclasses.fields(SamplingParams)) - {"n"}


class WorkflowError(RuntimeError):
    """A workflow cannot run a task (bad arguments, malformed task, engine misbehaviour)."""


@dataclass
class Task:
    """One task, ready for a workflow.

    Upstream Trinity-RFT's names of the same data work too: ``raw_task``
    (``raw``), ``format_args`` (``format``), ``rollout_args`` (the sampling, as
    upstream's generation settings, ``n`` being ``repeat_times``),
    ``task_desc`` and ``truth``; a task built as upstream builds one
    (``Task(workflow=MyWorkflow, raw_task={...}, format_args=...)``) finds its
    prompt and answer through the format's keys. For a workflow written for
    upstream, ``workflow`` and ``reward_fn`` are the classes (see
    :mod:`trinity.common.workflows.upstream`).
    """

    #: The prompt (value of the task set's ``prompt_key``).
    prompt: Any = None
    #: The reference answer (value of ``answer_key``); None when there is none.
    answer: Any = None
    #: The whole record as read from the task file.
    raw: dict[str, Any] = field(default_factory=dict)
    #: Position of the record in its task set.
    index: int = 0
    #: Epoch the task is served in.
    epoch: int = 0
    #: Explorer step the task belongs to (part of the group id).
    step: int = 0
    #: Rollouts to produce (the GRPO group size).
    repeat_times: int = 1
    #: Workflow registry name.
    workflow: str = "math"
    #: Reward function registry name; empty: the workflow's default.
    reward_fn: str = ""
    #: Extra keyword arguments of the workflow.
    workflow_args: dict[str, Any] = field(default_factory=dict)
    #: Extra keyword arguments of the reward function.
    reward_fn_args: dict[str, Any] = field(default_factory=dict)
    #: The task set's record layout (keys, chat template, ...); None: defaults.
    format: FormatConfig | None = None
    #: The record's system prompt (the format's ``system_prompt_key`` or ``system_prompt``); None: the workflow's.
    system_prompt: str | None = None
    #: Text the assistant's reply starts with (the format's ``reply_prefix``), or None.
    reply_prefix: str | None = None
    #: Overrides of :class:`SamplingParams` fields (``temperature``, ``max_tokens``, ...).
    sampling: dict[str, Any] = field(default_factory=dict)
    #: Name of the task set (``train``, ``eval/gsm8k``).
    task_set: str = "train"
    #: Whether this is an evaluation task (no training on it).
    is_eval: bool = False
    #: Added to the run ids of its experiences: the first repeat it covers when a task's repeats are split.
    run_id_offset: int = 0
    #: Upstream's names (kept in step with ``raw`` and ``format``); ``rollout_args``: upstream's generation settings.
    raw_task: dict[str, Any] | None = None
    format_args: FormatConfig | None = None
    rollout_args: Any = None

    def __post_init__(self) -> None:
        if self.repeat_times is None:
            self.repeat_times = 1
        if self.repeat_times < 1:
            raise ValueError(f"repeat_times must be at least 1, got {self.repeat_times}")
        if self.raw_task is not None and not self.raw:
            self.raw = self.raw_task
        self.raw_task = self.raw
        if self.format is None and self.format_args is not None:
            self.format = self.format_args
        self.format_args = self.format if self.format is not None else FormatConfig()
        if self.prompt is None:
            self.prompt = self.raw.get(self.format_args.prompt_key)
        if self.answer is None:
            self.answer = self.raw.get(self.format_args.response_key)
        if self.rollout_args is not None and not self.sampling:
            given = {name: getattr(self.rollout_args, name, None) for name in sorted(SAMPLING_FIELDS)}
            self.sampling = {k: v for k, v in given.items() if v is not None}
        unknown = set(self.sampling) - SAMPLING_FIELDS
        if unknown:
            raise ValueError(f"unknown sampling override(s) {sorted(unknown)}; known: {sorted(SAMPLING_FIELDS)}")

    @property
    def task_desc(self) -> Any:
        """Upstream's (deprecated) name of the prompt."""
        return self.prompt

    @property
    def task_id(self) -> int:
        """Upstream's name of the task's index in its task set."""
        return self.index

    @property
    def truth(self) -> Any:
        """Upstream's (deprecated) name of the reference answer."""
        return self.answer

    def to_workflow(self, model: Any, auxiliary_models: list[Any] | None = None) -> Any:
        """Upstream's way to build the task's workflow: ``workflow`` is the class, called with upstream's arguments."""
        if not isinstance(self.workflow, type):
            raise WorkflowError(f"to_workflow needs the task's workflow as a class, got {self.workflow!r}")
        return self.workflow(task=self, model=model, auxiliary_models=auxiliary_models)

    @property
    def group_id(self) -> str:
        """The GRPO group of this task's rollouts: task set, epoch, index and step."""
        return f"{self.task_set}/e{self.epoch}/t{self.index}/s{self.step}"

    @classmethod
    def from_record(
        cls,
        record: Mapping[str, Any],
        task_set: TasksetPlan,
        *,
        repeat_times: int | None = None,
        epoch: int = 0,
        step: int = 0,
    ) -> Task:
        """Build a task from a task-set record (``trinity.buffer.task_files.TaskRecord``: formatted fields).

        The record's own ``workflow`` / ``reward_fn`` (from the format's
        ``workflow_key`` / ``reward_fn_key``) win over the task set's;
        ``repeat_times`` defaults to the task set's; its sampling becomes the
        task's sampling overrides.
        """
        sampling = {k: v for k, v in task_set.sampling.items() if k in SAMPLING_FIELDS and v is not None}
        return cls(
            prompt=record["prompt"],
            answer=record.get("answer"),
            raw=dict(record.get("raw") or {}),
            index=int(record.get("index", 0)),
            epoch=epoch,
            step=step,
            repeat_times=repeat_times if repeat_times is not None else task_set.repeat_times,
            workflow=str(record.get("workflow") or task_set.workflow),
            reward_fn=str(record.get("reward_fn") or task_set.reward_fn or ""),
            workflow_args=dict(task_set.workflow_args),
            reward_fn_args=dict(task_set.reward_fn_args),
            format=task_set.format,
            system_prompt=record.get("system_prompt"),
            reply_prefix=record.get("reply_prefix"),
            sampling=sampling,
            task_set=task_set.name,
            is_eval=task_set.is_eval,
        )


def sampling_from_model(model: ModelPlan) -> SamplingParams:
    """Return the default rollout sampling of a run's model (its task sets override it per task)."""
    return SamplingParams(max_tokens=model.max_response_tokens)


class Workflow:
    """Base of workflows, in two shapes (:func:`is_upstream_style` tells them apart).

    * trinity-rft's: one instance per task attempt, ``run(engine, task)``;
      subclasses take their ``workflow_args`` as keyword arguments of
      ``__init__`` (after ``sampling``) and set :attr:`default_reward_fn`.
    * upstream Trinity-RFT's: ``__init__(*, task, model, auxiliary_models)``
      and ``run()`` (or ``async run_async()`` with ``is_async``) using
      ``self.task``, ``self.model`` (a
      :class:`~trinity.common.models.model.ModelWrapper`),
      ``self.auxiliary_models`` (OpenAI clients) and ``self.logger``;
      ``can_reset`` / ``reset`` and ``can_repeat`` / ``set_repeat_times`` as
      upstream documents them. The framework runs it through
      :class:`~trinity.common.workflows.upstream.UpstreamWorkflowRunner`.
    """

    #: Reward function used when the task names none.
    default_reward_fn: str = ""
    #: Upstream: whether :meth:`reset` may give an instance a new task, whether one :meth:`run` may make every
    #: repeat of a task (:meth:`set_repeat_times`), and whether the workflow implements :meth:`run_async`.
    can_reset: bool = False
    can_repeat: bool = False
    is_async: bool = False

    def __init__(self, sampling: SamplingParams | None = None, *, task: Task | None = None, model: Any = None,
                 auxiliary_models: list[Any] | None = None) -> None:
        self.sampling = sampling or SamplingParams()
        #: The run's auxiliary models (``explorer.auxiliary_models``, in config order), set before :meth:`run`;
        #: an upstream-style workflow gets OpenAI clients of them here (sync or async as ``is_async`` says).
        self.auxiliary_models: list[Any] = []
        #: The same, by their ``name``.
        self.auxiliary: dict[str, RolloutModel] = {}
        #: Upstream's attributes: the task, the rollout model's wrapper, the auxiliary models' wrappers, a logger.
        self.task = task
        self.model = model
        self.auxiliary_model_wrappers = auxiliary_models
        if auxiliary_models:
            self.auxiliary_models = [m.get_openai_async_client() if self.is_async else m.get_openai_client()
                                     for m in auxiliary_models]
        self.repeat_times = 1
        self.run_id_base = 0
        self.logger = logging.getLogger(type(self).__module__)

    @property
    def resettable(self) -> bool:
        """Upstream's deprecated name of :attr:`can_reset`."""
        return type(self).can_reset

    @property
    def repeatable(self) -> bool:
        """Upstream's deprecated name of :attr:`can_repeat`."""
        return type(self).can_repeat

    @property
    def asynchronous(self) -> bool:
        """Upstream's deprecated name of :attr:`is_async`."""
        return type(self).is_async

    def reset(self, task: Task) -> None:
        """Upstream: take ``task`` without being built again (with ``can_reset``)."""
        raise NotImplementedError(f"{type(self).__name__}.reset: set can_reset only when reset is implemented")

    def set_repeat_times(self, repeat_times: int, run_id_base: int) -> None:
        """Upstream: make ``repeat_times`` rollouts in one :meth:`run` (with ``can_repeat``), the first as run
        ``run_id_base``."""
        self.repeat_times = repeat_times
        self.run_id_base = run_id_base

    async def run_async(self) -> list[Experience]:
        """Upstream: the workflow's rollouts, asynchronously (with ``is_async``)."""
        raise NotImplementedError(f"{type(self).__name__} sets is_async but implements no run_async")

    def sampling_for(self, task: Task, **overrides: Any) -> SamplingParams:
        """Return the sampling of ``task``: defaults, then the task's overrides, ``n = repeat_times``, ``overrides``."""
        return dataclasses.replace(self.sampling, **{**task.sampling, "n": task.repeat_times, **overrides})

    def reward_fn_of(self, task: Task) -> str:
        """Return the reward function name for ``task`` (the task's, else the workflow's default)."""
        name = task.reward_fn or self.default_reward_fn
        if not name:
            raise WorkflowError(f"{type(self).__name__} needs a reward function; set the task set's reward_fn")
        return name

    def run(self, engine: RolloutModel, task: Task) -> list[Experience]:  # upstream-style: run(self)
        """Roll ``task`` out ``task.repeat_times`` times with ``engine`` and return the rewarded experiences."""
        raise NotImplementedError


def is_upstream_style(cls: type[Any]) -> bool:
    """Whether workflow class ``cls`` is written for upstream's API: ``run(self)`` or ``run_async`` with ``is_async``.

    trinity-rft's own workflows take ``run(self, engine, task)``.
    """
    if getattr(cls, "is_async", False):
        return True
    try:
        parameters = list(inspect.signature(cls.run).parameters.values())[1:]
    except (TypeError, ValueError):
        return False
    required = [p for p in parameters if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY,
                                                                               p.POSITIONAL_OR_KEYWORD)]
    return not required


def experience_from_completion(
    task: Task, completion: Completion, run_id: int, reward: float, info: Mapping[str, Any] | None = None
) -> Experience:
    """Return the experience of one single-turn completion (prompt + response tokens, its log-probs)."""
    tokens = torch.cat([completion.prompt_tokens.long(), completion.response_tokens.long()])
    return Experience(
        tokens=tokens,
        prompt_length=len(completion.prompt_tokens),
        logprobs=completion.logprobs.float(),
        reward=float(reward),
        group_id=task.group_id,
        run_id=run_id,
        model_version=completion.model_version,
        multi_modal_inputs=completion.multi_modal_inputs,
        info={
            "task_set": task.task_set,
            "task_index": task.index,
            "response": completion.text,
            "finish_reason": completion.finish_reason,
            **(info or {}),
        },
    )




def make_workflow(name: str, sampling: SamplingParams | None = None, args: Mapping[str, Any] | None = None) -> Workflow:
    """Return workflow ``name`` built with ``args``; raises UnknownNameError or WorkflowError (bad arguments).

    A class written for upstream's API is wrapped in an
    :class:`~trinity.common.workflows.upstream.UpstreamWorkflowRunner` (it
    reads its ``workflow_args`` from the task, as upstream's do).
    """
    cls = WORKFLOWS.get(name)
    if isinstance(cls, type) and is_upstream_style(cls):
        from trinity.common.workflows.upstream import UpstreamWorkflowRunner

        return UpstreamWorkflowRunner(cls, sampling)
    try:
        workflow: Workflow = cls(sampling, **dict(args or {}))
        return workflow
    except TypeError as exc:
        raise WorkflowError(f"workflow {name!r}: bad workflow_args {dict(args or {})!r} ({exc})") from None


def rewards_of(experiences: Sequence[Experience]) -> list[float]:
    """Return the rewards of ``experiences`` (0 where unset)."""
    return [0.0 if e.reward is None else float(e.reward) for e in experiences]
