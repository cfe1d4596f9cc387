"""``trinity run``: from a YAML config to a running RFT job on Ray."""

from trinity.launcher.job import run_config, run_job

__all__ = ["run_config", "run_job"]
