"""``trinity run``: load the config, resolve its plan, open a session and run its mode (or its stages)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from trinity.common.config import load_config
from trinity.common.config.plan.run import RunPlan, resolve_run
from trinity.launcher.session import Session, open_session


def _modes() -> dict[str, Callable[[Session], None]]:
    from trinity.launcher.bench import run_bench
    from trinity.launcher.both import run_both
    from trinity.launcher.explore import run_explore
    from trinity.launcher.train import run_train

    return {"both": run_both, "explore": run_explore, "train": run_train, "bench": run_bench}


def run_job(config_path: str | Path, overrides: dict[str, Any] | None = None) -> int:
    """Load ``config_path`` (with dotted-path ``overrides``) and run it, stage after stage; return the exit status."""
    config = load_config(config_path, overrides)
    if config.stages:
        from trinity.launcher.stages import run_stages

        return run_stages(config)
    return run_plan(resolve_run(config))


def run_plan(plan: RunPlan) -> int:
    """Run a resolved plan; return the exit status."""
    session = open_session(plan)
    try:
        _modes()[plan.mode](session)
    finally:
        session.close()
    return 0
