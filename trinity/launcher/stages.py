"""Multi-stage runs: stage after stage, each starting from the previous stage's final model."""

from __future__ import annotations

import copy
import json
import logging

from trinity.common.config.plan.run import RunPlan
from trinity.common.config.schema import Config
from trinity.launcher.run_lock import ALL_ROLES, lock_run_folder
from trinity.planner.run import resolve_run, run_dir_of
from trinity.planner.stages import stage_configs, stage_name

logger = logging.getLogger("trinity.launcher")

#: In the run folder of a multi-stage run: the stages already completed.
STAGES_FILE = "stages.json"


def plan_stages(config: Config) -> list[RunPlan]:
    """Return the plan of every stage (all checked before the first starts); raises ConfigError."""
    configs = stage_configs(config)
    total = len(configs)
    return [resolve_run(c, stage=(i + 1, total, stage_name(config, i))) for i, c in enumerate(configs)]


def final_model(plan: RunPlan) -> str | None:
    """Return the Hugging Face export of a finished stage's newest intact checkpoint, or None (it trained nothing).

    Newer damaged checkpoints are passed over with a one-line warning each.
    """
    from trinity.trainer.checkpoint import CheckpointDir
    from trinity.trainer.trainer import HF_EXPORT

    latest = CheckpointDir(plan.run_dir / "checkpoints").usable_latest()
    if latest is None or not (latest / HF_EXPORT / "config.json").is_file():
        return None
    return str(latest / HF_EXPORT)


def run_stages(config: Config) -> int:
    """Run every stage of ``config`` in order, skipping the ones a previous run completed; return the exit status.

    A stage that trains hands its final model to the next stage
    (``model.model_path``); progress is kept in ``<run folder>/stages.json``,
    so the same command resumes at the first unfinished stage. The run
    folder's locks are held from before the first stage to after the last.
    """
    plans = plan_stages(config)
    with lock_run_folder(run_dir_of(config), "stages", roles=ALL_ROLES):  # one owner for all the stages
        return _run_planned(config, plans)


def _run_planned(config: Config, plans: list[RunPlan]) -> int:
    from trinity.launcher.modes import run_plan
    from trinity.utils.fs import write_text_atomic

    state_file = run_dir_of(config) / STAGES_FILE
    done: list[str] = []
    if state_file.is_file() and config.continue_from_checkpoint:
        done = list(json.loads(state_file.read_text(encoding="utf-8")).get("completed", []))
    model_path: str | None = None
    for planned in plans:
        plan = _with_model(planned, model_path) if model_path is not None else planned
        assert plan.stage is not None
        number, total, name = plan.stage
        if name in done:
            logger.info("stage %d/%d (%s) was completed by an earlier run; skipping it", number, total, name)
        else:
            logger.info(
                "stage %d/%d (%s) starts: mode %s, %s",
                number,
                total,
                name,
                plan.mode,
                plan.config.algorithm.algorithm_type,
            )
            run_plan(plan)
            done.append(name)
            state_file.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(state_file, json.dumps({"completed": done}, indent=2) + "\n")
        model_path = final_model(plan) or model_path
    return 0


def _with_model(plan: RunPlan, model_path: str) -> RunPlan:
    """Return ``plan`` re-resolved with ``model.model_path`` (and the critic's, when it was the model) set."""
    config = copy.deepcopy(plan.config)
    if not config.model.critic_model_path or config.model.critic_model_path == config.model.model_path:
        config.model.critic_model_path = model_path
    config.model.model_path = model_path
    config.model.tiny = None
    return resolve_run(config, stage=plan.stage)


__all__ = ["final_model", "plan_stages", "run_stages"]
