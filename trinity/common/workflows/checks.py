"""Checks of a user's own workflow and reward classes, before a run builds them (``trinity run --dry-run``).

A name a config uses is known at load time; whether the class behind it
can be built the way the framework builds it shows only when it is built,
in the first rollout. For every workflow and reward a task set names that
is not one of trinity-rft's built-ins (a plugin's, or a dotted path), this
imports the class and binds the arguments the framework will pass to its
constructor, without calling it:

* a workflow in trinity-rft's shape: ``cls(sampling, **workflow_args)``;
* a workflow in upstream's shape: ``cls(task=..., model=..., auxiliary_models=...)``;
* a reward class: ``cls(**reward_fn_args)``; a reward function's options are
  checked at load time already.

Built-in entries are skipped: importing them would import torch for nothing.
"""

from __future__ import annotations

import inspect
from typing import Any

from trinity.common.config.loader import ConfigError


def _is_declared(registry: Any, name: str) -> bool:
    """Whether ``name`` is one of the registry's built-ins not imported yet (nothing of the user's to check)."""
    return name.strip().lower() in registry.declared_targets()


def check_user_classes(plan: Any) -> list[str]:
    """Raise ConfigError when a user's workflow or reward class of ``plan`` cannot be built as the framework builds
    it; return what was checked (``"workflow my_flow"``), for the plan's report."""
    from trinity.common.workflows.catalog import REWARD_FNS, WORKFLOWS

    checked: list[str] = []
    tasksets = [t for t in (plan.buffer.train_taskset, *plan.buffer.eval_tasksets) if t is not None]
    for taskset in tasksets:
        where = taskset.where
        if taskset.workflow and not _is_declared(WORKFLOWS, taskset.workflow):
            from trinity.common.workflows.base import is_upstream_style

            cls = WORKFLOWS.get(taskset.workflow)
            if isinstance(cls, type):
                _check_workflow(cls, taskset.workflow, dict(taskset.workflow_args), where, is_upstream_style(cls))
                checked.append(f"workflow {taskset.workflow}")
        if taskset.reward_fn and not _is_declared(REWARD_FNS, taskset.reward_fn):
            from trinity.common.rewards.reward_fn import is_reward_class

            entry = REWARD_FNS.get(taskset.reward_fn)
            if is_reward_class(entry):
                _bind(entry, (), dict(taskset.reward_fn_args), f"{where}.reward_fn_args",
                      f"reward class {taskset.reward_fn} cannot be built with the task set's reward_fn_args")
                checked.append(f"reward {taskset.reward_fn}")
    return list(dict.fromkeys(checked))


def _check_workflow(cls: type, name: str, args: dict[str, Any], where: str, upstream: bool) -> None:
    if upstream:
        _bind(cls, (), {"task": None, "model": None, "auxiliary_models": None}, where,
              f"workflow {name} is written for upstream's API (run() takes no arguments) but cannot be built as "
              "the framework builds one, cls(task=..., model=..., auxiliary_models=...)")
        return
    _bind(cls, (None,), args, f"{where}.workflow_args",
          f"workflow {name} cannot be built as the framework builds one of its shape, cls(sampling, "
          f"**workflow_args); a workflow written for upstream's API takes run(self) with no arguments")


def _bind(cls: type, positional: tuple[Any, ...], keywords: dict[str, Any], where: str, what: str) -> None:
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return  # a constructor Python cannot describe: left to the run
    try:
        signature.bind(*positional, **keywords)
    except TypeError as exc:
        raise ConfigError(f"{where}: {what}: {exc}") from None
