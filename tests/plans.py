"""Configs and resolved plans for tests, written in upstream Trinity-RFT's schema.

``make_config({...})`` merges dotted-path overrides into a small valid config
(the tiny model, a toy task set, GRPO) and loads it through the same path a
YAML file takes; ``make_plan`` resolves it; ``make_layout`` lays it out on the
selected device backend without Ray (as ``trinity run --dry-run`` does).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from trinity.common.config import Config, parse_config
from trinity.common.config.plan.run import RunPlan
from trinity.common.config.validator import Layout, resolve_layout
from trinity.planner.run import resolve_run

#: A small valid config: both modes' sections filled, every path a placeholder that tests override.
BASE: dict[str, Any] = {
    "mode": "both",
    "project": "tests",
    "name": "run",
    "checkpoint_root_dir": "./checkpoints",
    "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "optimizer": {"lr": 1e-3}},
    "model": {"model_path": "tiny-model", "max_prompt_tokens": 64, "max_response_tokens": 8},
    "cluster": {"node_num": 1, "gpu_per_node": 2},
    "buffer": {
        "batch_size": 2,
        "total_epochs": 1,
        "explorer_input": {
            "taskset": {"name": "train", "path": "tasks.jsonl",
                        "format": {"prompt_key": "question", "response_key": "answer"}},
            "default_workflow_type": "toy_repeat",
        },
    },
    "explorer": {"runner_per_model": 2, "rollout_model": {"engine_num": 1, "dtype": "float32"}},
    "trainer": {"use_torch_compile": False, "use_dynamic_bsz": False,
                "trainer_config": {"actor_rollout_ref": {"model": {"enable_gradient_checkpointing": False},
                                                         "actor": {"ppo_micro_batch_size_per_gpu": 4}}}},
    "data_processor": {"experience_pipeline": {"save_input": False}},
}


def set_dotted(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``raw[a][b]... = value`` for ``dotted`` = ``a.b...``, creating sections; ``None`` deletes the key."""
    node = raw
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = value


def make_raw(overrides: dict[str, Any] | None = None, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return :data:`BASE` (or ``base``) with dotted-path ``overrides`` applied (``None`` removes a key)."""
    raw = copy.deepcopy(BASE if base is None else base)
    for dotted, value in (overrides or {}).items():
        set_dotted(raw, dotted, value)
    return raw


def make_config(overrides: dict[str, Any] | None = None, base: dict[str, Any] | None = None) -> Config:
    """Return the checked config of :func:`make_raw`."""
    return parse_config(make_raw(overrides, base))


def make_plan(overrides: dict[str, Any] | None = None, base: dict[str, Any] | None = None) -> RunPlan:
    """Return the resolved plan of :func:`make_config`."""
    return resolve_run(make_config(overrides, base))


def make_layout(plan: RunPlan, resources: dict[str, float] | None = None) -> Layout:
    """Return ``plan``'s layout on the currently selected backend (no Ray unless ``resources`` are given)."""
    from trinity import device

    backend = device.current_backend()
    return resolve_layout(plan, backend, resources or {}, [])


def run_overrides(model: Path, root: Path, tasks: Path, **extra: Any) -> dict[str, Any]:
    """Return the overrides that point a config at a real tiny model, a run root and a task file."""
    return {"model.model_path": str(model), "checkpoint_root_dir": str(root),
            "buffer.explorer_input.taskset.path": str(tasks), **extra}
