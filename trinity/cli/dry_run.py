"""``trinity run --dry-run``: load, resolve and check a config; print its plan. No Ray, no model, no torch."""

from __future__ import annotations

from typing import Any

from trinity.cli.errors import EXIT_USAGE, CLIError


def _backend(plan: Any, device_name: str | None) -> tuple[Any, str]:
    """Return ``(backend, one line saying how it was chosen)`` for the plan."""
    from trinity import device

    if device_name:
        record = device.get_backend_record(device_name)
        if record is None or record.backend is None:
            installed = ", ".join(r.name for r in device.list_backends() if r.status == "ok")
            why = record.error if record is not None else f"not installed (installed: {installed})"
            raise CLIError(f"--device {device_name}: {why}", EXIT_USAGE)
        return record.backend, (f"{record.name} (--device: planned as if this machine were a {record.name} node; "
                                "its devices were not probed)")
    selection = device.select_backend(plan.cluster.device)
    return selection.backend, (f"{selection.name} ({selection.reason}; without Ray, so this machine decides: on a "
                               "cluster the cluster's resources decide)")


def _check_selector(plan: Any) -> list[str]:
    """Build the training task set's selector as the run will (it reads the task set's columns); return what was
    checked. Raises TaskFileError (one line) for a column it cannot read; a task set not on this machine is left
    to the run."""
    from pathlib import Path

    taskset = plan.buffer.train_taskset
    if taskset is None or taskset.selector_config is None or not Path(taskset.path).expanduser().exists():
        return []
    from trinity.buffer.task_scheduler import TaskScheduler

    TaskScheduler.for_training(plan.buffer)
    return [f"selector {taskset.selector}"]


def dry_run(config_path: str, overrides: dict[str, Any], device_name: str | None) -> int:
    """Print the plan of ``config_path`` (every stage of a multi-stage config); return 0. Raises ConfigError."""
    from trinity.cli.plan_view import render_plan
    from trinity.common.config import load_config
    from trinity.common.config.precision import resolve_precision
    from trinity.common.config.validator import colocated_plan, resolve_layout
    from trinity.common.workflows.checks import check_user_classes
    from trinity.planner.preflight import preflight
    from trinity.planner.run import resolve_run

    config = load_config(config_path, overrides)
    if config.stages:
        from trinity.launcher.stages import plan_stages

        plans = plan_stages(config)
    else:
        plans = [resolve_run(config)]
    reports = []
    for resolved in plans:
        backend, backend_line = _backend(resolved, device_name)
        layout = resolve_layout(resolved, backend, {}, [])
        plan = colocated_plan(resolved, layout)
        warnings = preflight(plan, strict=False).warnings
        if plan.stage is not None and plan.stage[0] > 1:
            warnings = [w for w in warnings if not w.startswith("model.model_path")]
            warnings.append("model.model_path: this stage starts from the previous stage's final model")
        precision = resolve_precision(plan, backend)
        checked = check_user_classes(plan)  # a user's classes, built as the run will build them (not called)
        checked += _check_selector(plan)
        report = render_plan(plan, layout, backend_line, warnings, config_path, precision=precision)
        if checked:
            report += f"\n  user code     {', '.join(checked)}: the framework can build them"
        reports.append(report)
    print("\n\n".join(reports))
    print("\nthe config is valid" + (" (see the warnings above)" if any("warnings" in r for r in reports) else ""))
    return 0
