"""``trinity run``: from a YAML config to a running RFT job on Ray."""

from trinity.launcher.job import run_job
from trinity.launcher.modes import run_plan

__all__ = ["run_job", "run_plan"]
