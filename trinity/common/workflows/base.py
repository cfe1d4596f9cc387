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
    """One task, ready for a workflow."""

    #: The prompt (value of the task set's ``prompt_key``).
    prompt: Any
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

    def __post_init__(self) -> None:
        if self.repeat_times < 1:
            raise ValueError(f"repeat_times must be at least 1, got {self.repeat_times}")
        unknown = set(self.sampling) - SAMPLING_FIELDS
        if unknown:
            raise ValueError(f"unknown sampling override(s) {sorted(unknown)}; known: {sorted(SAMPLING_FIELDS)}")

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
    """Base of workflows: holds the default sampling settings; subclasses implement :meth:`run`.

    Subclasses take their ``workflow_args`` as keyword arguments of
    ``__init__`` (after ``sampling``) and set :attr:`default_reward_fn`.
    """

    #: Reward function used when the task names none.
    default_reward_fn: str = ""

    def __init__(self, sampling: SamplingParams | None = None) -> None:
        self.sampling = sampling or SamplingParams()
        #: The run's auxiliary models (``explorer.auxiliary_models``, in config order), set before :meth:`run`.
        self.auxiliary_models: list[RolloutModel] = []
        #: The same, by their ``name``.
        self.auxiliary: dict[str, RolloutModel] = {}

    def sampling_for(self, task: Task, **overrides: Any) -> SamplingParams:
        """Return the sampling of ``task``: defaults, then the task's overrides, ``n = repeat_times``, ``overrides``."""
        return dataclasses.replace(self.sampling, **{**task.sampling, "n": task.repeat_times, **overrides})

    def reward_fn_of(self, task: Task) -> str:
        """Return the reward function name for ``task`` (the task's, else the workflow's default)."""
        name = task.reward_fn or self.default_reward_fn
        if not name:
            raise WorkflowError(f"{type(self).__name__} needs a reward function; set the task set's reward_fn")
        return name

    def run(self, engine: RolloutModel, task: Task) -> list[Experience]:
        """Roll ``task`` out ``task.repeat_times`` times with ``engine`` and return the rewarded experiences."""
        raise NotImplementedError


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
        info={
            "task_set": task.task_set,
            "task_index": task.index,
            "response": completion.text,
            "finish_reason": completion.finish_reason,
            **(info or {}),
        },
    )




def make_workflow(name: str, sampling: SamplingParams | None = None, args: Mapping[str, Any] | None = None) -> Workflow:
    """Return workflow ``name`` built with ``args``; raises UnknownNameError or WorkflowError (bad arguments)."""
    cls = WORKFLOWS.get(name)
    try:
        workflow: Workflow = cls(sampling, **dict(args or {}))
        return workflow
    except TypeError as exc:
        raise WorkflowError(f"workflow {name!r}: bad workflow_args {dict(args or {})!r} ({exc})") from None


def rewards_of(experiences: Sequence[Experience]) -> list[float]:
    """Return the rewards of ``experiences`` (0 where unset)."""
    return [0.0 if e.reward is None else float(e.reward) for e in experiences]
