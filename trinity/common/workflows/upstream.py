"""Workflows written for upstream Trinity-RFT's API, run as trinity-rft runs its own.

Upstream's guide (``develop_workflow.md``) writes a workflow as a class built
with ``(task=..., model=..., auxiliary_models=...)`` whose ``run()`` (or
``async run_async()``) returns experiences. :func:`~trinity.common.workflows.base.make_workflow`
wraps such a class in an :class:`UpstreamWorkflowRunner`, which, for each task attempt:

* builds the task as upstream's code reads it: ``workflow`` and
  ``reward_fn`` are classes (``task.reward_fn(**task.reward_fn_args)`` builds
  the reward, whatever shape it is registered in), ``rollout_args`` holds the
  resolved sampling with ``n`` set to the task's repeats;
* gives the workflow a :class:`~trinity.common.models.model.ModelWrapper` of
  the attempt's engine client (one per run, its OpenAI requests recorded
  apart) and wrappers of the auxiliary models;
* runs it as upstream's runner does: once with ``set_repeat_times`` when the
  class ``can_repeat``, else once per repeat, the repeats side by side
  (threads, or one event loop for ``is_async``), run ``i`` numbered
  ``run_id_base + i``;
* fills in what upstream's runner fills in: the group (the task; an
  ``eid.task`` the workflow set to something else is a group of its own, as
  upstream groups by it), the run
  id (a workflow's own ``eid.run`` is kept), the weights version of
  experiences built by hand, ``eid``, and the workflow's ``metrics``
  (averaged by the monitor like every workflow's).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from trinity.common.experience import EID, Experience
from trinity.common.models.engine import SamplingParams
from trinity.common.workflows.base import Task, Workflow, WorkflowError

logger = logging.getLogger(__name__)


@dataclass
class RolloutArgs:
    """Upstream's generation settings of a task (``task.rollout_args``), resolved: ``n`` is the task's repeats."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 64
    n: int = 1
    logprobs: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()

    @classmethod
    def from_sampling(cls, params: SamplingParams) -> RolloutArgs:
        """Return the settings of ``params`` (top-k 0, "off" here, is upstream's -1)."""
        return cls(temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or -1,
                   max_tokens=params.max_tokens, n=params.n, seed=params.seed, stop=tuple(params.stop))


class UpstreamWorkflowRunner(Workflow):
    """Runs an upstream-style workflow class as a trinity-rft workflow; see the module docstring."""

    def __init__(self, workflow_class: type[Any], sampling: SamplingParams | None = None) -> None:
        super().__init__(sampling)
        self.workflow_class = workflow_class

    def upstream_task(self, task: Task) -> Task:
        """Return ``task`` as upstream's workflows read it (classes for ``workflow`` and ``reward_fn``)."""
        from trinity.common.rewards.reward_fn import reward_class

        name = task.reward_fn or self.workflow_class.__dict__.get("default_reward_fn", "")
        reward = reward_class(name) if isinstance(name, str) and name else (name or None)
        return dataclasses.replace(task, workflow=self.workflow_class, reward_fn=reward,  # type: ignore[arg-type]
                                   rollout_args=RolloutArgs.from_sampling(self.sampling_for(task)))

    def run(self, engine: Any, task: Task) -> list[Experience]:
        """Run the upstream-style workflow for ``task`` and return its experiences, filled in."""
        from trinity.common.models.model import ModelWrapper

        shaped = self.upstream_task(task)
        model = ModelWrapper(engine, self.sampling_for(task, n=1), name="rollout")
        auxiliary = [ModelWrapper(client, name=name) for name, client in self.auxiliary.items()]
        cls = self.workflow_class
        base = task.run_id_offset
        if cls.can_repeat:
            workflow = self._build(shaped, model, auxiliary)
            workflow.set_repeat_times(task.repeat_times, base)
            made = self._call(workflow)
            runs = [_run_of(e, base + i if len(made) == task.repeat_times else base) for i, e in enumerate(made)]
        else:
            made, runs = self._each_run(shaped, model, auxiliary, task.repeat_times, base)
        return self._filled(made, runs, task, model)

    def _build(self, task: Task, model: Any, auxiliary: list[Any]) -> Any:
        try:
            return self.workflow_class(task=task, model=model, auxiliary_models=auxiliary or None)
        except TypeError as exc:
            raise WorkflowError(f"{self.workflow_class.__name__} cannot be built as upstream builds a workflow "
                                f"(task=..., model=..., auxiliary_models=...): {exc}") from None

    def _call(self, workflow: Any) -> list[Experience]:
        made = asyncio.run(workflow.run_async()) if self.workflow_class.is_async else workflow.run()
        if not isinstance(made, list) or not all(isinstance(e, Experience) for e in made):
            raise WorkflowError(f"{self.workflow_class.__name__}.run returned {type(made).__name__}, not a list of "
                                "Experience")
        return made

    def _each_run(self, task: Task, model: Any, auxiliary: list[Any], repeats: int, base: int
                  ) -> tuple[list[Experience], list[int]]:
        """Run one instance per repeat, side by side; return the experiences and each one's run id."""
        def one(number: int) -> list[Experience]:
            return self._call(self._build(task, model.clone_with_isolated_history(), auxiliary))

        if self.workflow_class.is_async:
            async def gather() -> list[list[Experience]]:
                return list(await asyncio.gather(*(self._build(task, model.clone_with_isolated_history(),
                                                               auxiliary).run_async() for _ in range(repeats))))

            results = asyncio.run(gather())
        elif repeats == 1:
            results = [one(0)]
        else:
            with ThreadPoolExecutor(max_workers=repeats, thread_name_prefix="upstream-run") as pool:
                results = list(pool.map(one, range(repeats)))
        made: list[Experience] = []
        runs: list[int] = []
        for number, experiences in enumerate(results):
            made += experiences
            runs += [base + number] * len(experiences)
        return made, runs

    def _filled(self, made: list[Experience], runs: list[int], task: Task, model: Any) -> list[Experience]:
        for experience, run in zip(made, runs, strict=True):
            if experience.eid is None:
                experience.eid = EID()
            own_task = str(experience.eid.task)
            if not experience.group_id:  # a task id of the workflow's own making is a group of its own, as upstream
                named = own_task not in ("", str(task.index))
                experience.group_id = f"{task.group_id}/{own_task}" if named else task.group_id
            experience.run_id = run
            experience.eid.batch, experience.eid.run = task.step, run
            if own_task == "":
                experience.eid.task = task.index
            if experience.model_version == 0 and model.last_version:
                experience.model_version = model.last_version  # built by hand from a reply of that version
            metrics = {**dict(experience.info.get("metrics") or {}), **experience.metrics}
            experience.info = {"task_set": task.task_set, "task_index": task.index, "step": experience.eid.step,
                               **experience.info, **({"metrics": metrics} if metrics else {})}
            if experience.response_text is not None:
                experience.info.setdefault("response", experience.response_text)
        return made


def _run_of(experience: Experience, default: int) -> int:
    """The run id of an experience a repeating workflow made: its own ``eid.run`` when it set one."""
    return experience.eid.run if experience.eid is not None and experience.eid.run else default
