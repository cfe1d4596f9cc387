"""Workflows: how a task becomes experiences. Registered by name in :data:`WORKFLOWS`.

Built in: ``math`` (answer checking), ``toy_repeat`` (a task a tiny model
learns on a CPU), ``guess_number`` (multi-turn example), and upstream
Trinity-RFT's ``simple_workflow``, ``simple_mm_workflow`` (images), ``math_workflow``, ``math_boxed_workflow``,
``math_eval_workflow``, ``tool_call_workflow``, ``frozen_lake_workflow``,
``sudoku_workflow``, ``on_policy_distill[_math]_workflow``; see
:mod:`trinity.common.workflows.catalog`. Names are imported on first use, so
checking a config's workflow names imports neither torch nor transformers.
"""

from trinity.common.workflows.catalog import WORKFLOWS
from trinity.utils.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "Task": "base",
    "Workflow": "base",
    "WorkflowError": "base",
    "experience_from_completion": "base",
    "make_workflow": "base",
    "sampling_from_model": "base",
    "GuessNumberEnv": "guess_number",
    "GuessNumberWorkflow": "guess_number",
    "MathWorkflow": "math",
    "Environment": "multi_turn",
    "EnvStep": "multi_turn",
    "MultiTurnWorkflow": "multi_turn",
    "env_token_ids": "multi_turn",
    "ToyRepeatWorkflow": "toy",
    "toy_tasks": "toy",
    "write_quickstart_tasks": "toy",
    "write_toy_tasks": "toy",
    "SingleTurnWorkflow": "single_turn",
    "SimpleWorkflow": "simple",
    "SimpleMMWorkflow": "simple_mm",
    "R1MathWorkflow": "simple",
    "MathBoxedWorkflow": "math_boxed",
    "MathEvalWorkflow": "math_eval",
    "ToolCallWorkflow": "tool_call",
    "FrozenLakeEnv": "frozen_lake",
    "FrozenLakeWorkflow": "frozen_lake",
    "FrozenLakeGame": "frozen_lake_game",
    "SudokuWorkflow": "sudoku",
    "OnPolicyDistillWorkflow": "distill",
    "OnPolicyDistillMathWorkflow": "distill",
    "UNAVAILABLE": "catalog",
    "unavailable_reason": "catalog",
})

__all__ = ["WORKFLOWS"]
