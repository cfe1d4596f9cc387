"""The workflow registry and its built-in entries, declared without importing them.

A config names workflows and reward functions; the names are checked when the
config is loaded, before Ray or torch start, so the registry lives here, in a
module that imports nothing heavy. A workflow class is imported on first
:meth:`~trinity.utils.registry.Registry.get`. A name that is a Python path
(``my_pkg.flows.MyWorkflow``) is imported as such.

Besides our own workflows, upstream Trinity-RFT's built-in names are declared
(``math_workflow``, ``frozen_lake_workflow``, ...) with upstream's behaviour.
Upstream's ``async_*`` names share their synchronous twin's class (our
runners run tasks concurrently already). Upstream names that need an outside
environment, package or service are not registered; :data:`UNAVAILABLE` says
why, for the unknown-name error (:func:`unavailable_reason`).
"""

from __future__ import annotations

from typing import Any

from trinity.common.rewards.base import REWARD_FNS
from trinity.utils.registry import Registry

#: Workflows by config name (the class, once imported).
WORKFLOWS: Registry[Any] = Registry("workflow")

_W = "trinity.common.workflows"

#: Built-in workflows: config name -> ``module:class``.
BUILT_IN: dict[str, str] = {
    "math": f"{_W}.math:MathWorkflow",
    "toy_repeat": f"{_W}.toy:ToyRepeatWorkflow",
    "guess_number": f"{_W}.guess_number:GuessNumberWorkflow",
    # agents on the engine's OpenAI API
    "react_agent": f"{_W}.react:ReActWorkflow",
    "frozen_lake_agent": f"{_W}.frozen_lake_agent:FrozenLakeAgentWorkflow",
    # upstream Trinity-RFT's built-in names
    "simple_workflow": f"{_W}.simple:SimpleWorkflow",
    "async_simple_workflow": f"{_W}.simple:SimpleWorkflow",
    "simple_mm_workflow": f"{_W}.simple_mm:SimpleMMWorkflow",
    "async_simple_mm_workflow": f"{_W}.simple_mm:SimpleMMWorkflow",
    "math_workflow": f"{_W}.simple:R1MathWorkflow",
    "async_math_workflow": f"{_W}.simple:R1MathWorkflow",
    "math_boxed_workflow": f"{_W}.math_boxed:MathBoxedWorkflow",
    "async_math_boxed_workflow": f"{_W}.math_boxed:MathBoxedWorkflow",
    "math_eval_workflow": f"{_W}.math_eval:MathEvalWorkflow",
    "async_math_eval_workflow": f"{_W}.math_eval:MathEvalWorkflow",
    "tool_call_workflow": f"{_W}.tool_call:ToolCallWorkflow",
    "frozen_lake_workflow": f"{_W}.frozen_lake:FrozenLakeWorkflow",
    "sudoku_workflow": f"{_W}.sudoku:SudokuWorkflow",
    "on_policy_distill_workflow": f"{_W}.distill:OnPolicyDistillWorkflow",
    "on_policy_distill_math_workflow": f"{_W}.distill:OnPolicyDistillMathWorkflow",
    "math_ruler_workflow": f"{_W}.ruler:MathRulerWorkflow",
    "async_math_ruler_workflow": f"{_W}.ruler:MathRulerWorkflow",
    "math_trainable_ruler_workflow": f"{_W}.ruler:MathTrainableRulerWorkflow",
    "agentscope_react_workflow": f"{_W}.agentscope_react:AgentScopeReActWorkflow",
    "as_react_workflow": f"{_W}.agentscope_react:AgentScopeReActWorkflow",
}

for _name, _target in BUILT_IN.items():
    WORKFLOWS.declare(_name, _target)

_OWN = "write a workflow class for it and name it by its Python path (my_pkg.module.MyWorkflow)"

#: Upstream Trinity-RFT names (workflows and reward functions) that trinity-rft cannot run, and why.
UNAVAILABLE: dict[str, str] = {
    **{name: f"{name} needs the ALFWorld environment (alfworld package and game files), "
             f"not available in trinity-rft; {_OWN}"
       for name in ("alfworld_workflow", "raft_alfworld_workflow", "raft_reflect_alfworld_workflow",
                    "step_wise_alfworld_workflow")},
    "sciworld_workflow": f"sciworld_workflow needs the ScienceWorld environment (scienceworld package, Java), "
                         f"not available in trinity-rft; {_OWN}",
    "webshop_workflow": f"webshop_workflow needs a WebShop server, not available in trinity-rft; {_OWN}",
    **{name: f"{name} needs AgentScope (agentscope package), not available in trinity-rft; {_OWN}"
       for name in ("agentscope_workflow_adapter", "agentscope_workflow_adapter_v1",
                    "agentscope_react_math_workflow", "agentscopev0_react_math_workflow",
                    "agentscope_v1_react_search_workflow")},
    "email_search_workflow": f"email_search_workflow needs AgentScope and the Enron e-mail search database, "
                             f"not available in trinity-rft; {_OWN}",
    **{name: f"{name} scores with an RM-Gallery reward model (rm_gallery package), not available in trinity-rft; "
             f"use math_workflow or math_boxed_workflow, or {_OWN}"
       for name in ("math_rm_workflow", "async_math_rm_workflow")},
    **{name: f"{name} asks an LLM judge through an OpenAI-compatible API (RULER / rubric judging), "
             f"not available in trinity-rft; {_OWN}"
       for name in ("rubric_judge_workflow", "rubric_judge_openai_workflow")},
    # reward functions
    "rm_gallery_reward": "rm_gallery_reward needs RM-Gallery reward models (rm_gallery package), not available in "
                         "trinity-rft; use math_reward, accuracy_reward or your own reward function",
}


def unavailable_reason(name: str) -> str | None:
    """Return why upstream's workflow or reward function ``name`` cannot run here, or None when it is not one."""
    return UNAVAILABLE.get(name.strip().lower())


__all__ = ["BUILT_IN", "REWARD_FNS", "UNAVAILABLE", "WORKFLOWS", "unavailable_reason"]
