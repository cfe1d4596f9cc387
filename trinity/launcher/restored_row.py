"""Metric rows across a kill: the train row of a checkpoint's step (or the explore row of a stored batch) that
the run which saved it did not live to log, and the rows of a killed run that a rerun from scratch supersedes.

A checkpoint is saved inside its training step, before the step's metrics
are logged; a run killed in between leaves the step trained and saved but
absent from ``metrics.jsonl``, and the resumed run starts after it. The
checkpoint carries the step's metrics, so the resumed run logs the row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trinity.monitor import METRICS_FILE, PHASE_EXPLORE, PHASE_TRAIN, load_records


def missing_train_row(run_dir: Path, resumed: dict[str, Any]) -> dict[str, float] | None:
    """Return the resumed checkpoint's step metrics when ``<run>/metrics.jsonl`` has no train row of that step.

    ``resumed`` is what ``FSDPTrainer.resume`` returned. None when the row is
    there, there is no metrics file, or the checkpoint carries no metrics.
    """
    from trinity.trainer.trainer import STEP_METRICS

    saved = (resumed.get("extra") or {}).get(STEP_METRICS)
    path = run_dir / METRICS_FILE
    if not saved or not path.is_file() or _logged(path, PHASE_TRAIN, int(resumed["step"])):
        return None
    return {str(key): float(value) for key, value in saved.items()}


def missing_explore_row(run_dir: Path, state: dict[str, Any] | None) -> tuple[int, dict[str, float]] | None:
    """Return ``(step, metrics)`` of the explorer state's last step when ``<run>/metrics.jsonl`` lacks its row.

    Mode explore saves its state, with the step's row, with the batch and
    before logging the row (see ``run_explore``); ``state`` is that state (None: a first job).
    """
    row = (state or {}).get("row")
    if not row:
        return None
    step = int(row["step"])
    path = run_dir / METRICS_FILE
    if path.is_file() and _logged(path, PHASE_EXPLORE, step):
        return None
    return step, {str(k): float(v) for k, v in row["metrics"].items()}


def _logged(path: Path, phase: str, step: int) -> bool:
    """Return True when the metrics file ``path`` holds a row of ``phase`` for ``step``."""
    return any(r.phase == phase and r.step == step for r in load_records(path))


def logged_before(run_dir: Path, phases: tuple[str, ...] | None = None) -> bool:
    """Return True when ``<run>/metrics.jsonl`` shows rows of ``phases`` (None: any) from an earlier run.

    A run that starts from scratch in such a folder (its predecessor was
    killed before a checkpoint) marks a resume at step 0, so readers drop
    those rows instead of showing their steps twice.
    """
    path = run_dir / METRICS_FILE
    if not path.is_file():
        return False
    return any(phases is None or r.phase in phases for r in load_records(path))
