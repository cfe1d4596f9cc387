"""``trinity run``: load the config, resolve its plan and run its mode (or its stages, one after another)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trinity.common.config import load_config
from trinity.launcher.modes import run_plan
from trinity.planner.run import resolve_run


def run_job(config_path: str | Path, overrides: dict[str, Any] | None = None) -> int:
    """Load ``config_path`` (with dotted-path ``overrides``) and run it, stage after stage; return the exit status."""
    config = load_config(config_path, overrides)
    if config.stages:
        from trinity.launcher.stages import run_stages

        return run_stages(config)
    return run_plan(resolve_run(config))
