"""From a loaded config to a checked run plan, before Ray starts or a model loads.

:func:`resolve_run` turns a :class:`~trinity.common.config.Config` into a
:class:`~trinity.common.config.plan.run.RunPlan`, looking every name up in the
algorithm, buffer, workflow and reward catalogs; :func:`preflight` checks the
files the plan names. The plan's types live low, in
:mod:`trinity.common.config.plan`, because every part of a run reads them;
resolving them needs the catalogs above, so it lives here, beside the launcher.
"""

from trinity.planner.preflight import Preflight, preflight
from trinity.planner.run import resolve_run, run_dir_of
from trinity.planner.stages import stage_configs, stage_name

__all__ = ["Preflight", "preflight", "resolve_run", "run_dir_of", "stage_configs", "stage_name"]
