"""Mode ``bench``: evaluate the starting model and the run's checkpoints on the evaluation task sets."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from trinity.launcher.device_record import write_device_record
from trinity.launcher.evaluation import evaluate
from trinity.launcher.placement import place
from trinity.launcher.session import Session
from trinity.launcher.steps import call_all, monitor_for, scheduler_for, start_engines

logger = logging.getLogger("trinity.launcher")

#: Where a bench job keeps what it writes besides its metrics: ``device.json`` and each checkpoint's export.
BENCH_DIR = "bench"


def run_bench(session: Session) -> None:
    """Evaluate the starting model and every saved checkpoint of the run on the evaluation task sets.

    The engines start with ``model.model_path`` (logged as step 0); then each
    intact checkpoint under ``<run>/checkpoints`` (a damaged one is skipped
    with a one-line warning), in step order (only the
    latest with ``explorer.bench_on_latest_checkpoint``), is exported to
    ``<run>/bench/step-N`` (kept, and refreshed when the checkpoint is newer),
    loaded by every engine as version N and evaluated (logged as step N).
    Each record of phase ``eval`` carries ``bench/model_version``, the version
    the engines held. With ``model.external_model`` the endpoint is evaluated
    once (step 0, version 0): no checkpoint can be loaded into it.
    """
    from trinity.manager.checkpoint_converter import ConversionError
    from trinity.monitor.keys import PHASE_EVAL
    from trinity.trainer.checkpoint import CheckpointDir

    plan = session.plan
    checkpoints = CheckpointDir(session.run_dir / "checkpoints")
    steps = [step for step in checkpoints.intact_steps() if step > 0]  # a damaged one is skipped with a warning
    if plan.explorer.bench_on_latest_checkpoint:
        steps = steps[-1:]
    external = plan.explorer.rollout.external
    if external is not None and steps:  # its weights are not the run's to replace
        logger.warning("bench: the rollout model is the external endpoint %r; the %d checkpoint(s) in %s are not "
                       "evaluated (evaluate a local model to bench them)", external.model_name, len(steps),
                       checkpoints.root)
        steps = []
    elif not steps:
        logger.warning("bench: no checkpoint in %s; evaluating the starting model only", checkpoints.root)
    with contextlib.ExitStack() as stack:
        placement = place(plan, session.layout)
        stack.callback(placement.remove)
        engines = start_engines(session, placement)
        stack.callback(engines.shutdown)
        scheduler = scheduler_for(session, engines)
        monitor = monitor_for(session, None)
        stack.callback(monitor.close)

        def evaluate_now(step: int) -> None:
            metrics = evaluate(plan, scheduler, step)
            metrics["bench/model_version"] = float(min(call_all(engines.rollout, "model_version")))
            monitor.log(metrics, step=step, phase=PHASE_EVAL)

        write_device_record(session, engines=engines, folder=session.run_dir / BENCH_DIR)  # the run's own stays
        evaluate_now(0)
        for step in steps:
            try:
                folder = export_for_engines(checkpoints.step_path(step), session.run_dir / BENCH_DIR / f"step-{step}")
            except ConversionError:
                if not checkpoints.step_path(step).is_dir():  # pruned by a train job since it was listed
                    logger.warning("bench: checkpoint step-%d was removed before it could be evaluated", step)
                    continue
                raise
            call_all(engines.rollout, "load_checkpoint_weights", str(folder), step)
            evaluate_now(step)


def export_for_engines(checkpoint: Path, folder: Path) -> Path:
    """Return a Hugging Face export of ``checkpoint`` at ``folder``, converting when it is missing or older."""
    from trinity.manager.checkpoint_converter import convert_checkpoint
    from trinity.trainer.checkpoint import STATE_FILE

    exported = folder / "config.json"
    state = checkpoint / STATE_FILE
    if not exported.is_file() or (state.is_file() and exported.stat().st_mtime_ns < state.stat().st_mtime_ns):
        convert_checkpoint(checkpoint, folder, overwrite=True)
    return folder
