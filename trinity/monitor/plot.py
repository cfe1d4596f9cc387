"""The reward curve of a run as a PNG: train reward per step, eval reward per evaluation.

Drawn with matplotlib's Agg canvas (no display, no pyplot global state), from
``metrics.jsonl`` or from records in memory. Missing series are left out; with
no reward at all the image says so, so the end of a run always gets its file.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from trinity.monitor.keys import PHASE_EVAL, REWARD_MEAN, REWARD_PLOT_FILE, TRAIN_PHASES
from trinity.monitor.records import MetricRecord, load_records

#: Size of the image in inches, and its resolution.
FIGURE_SIZE = (8.0, 4.5)
DPI = 100


def is_reward_key(key: str) -> bool:
    """Return True for ``reward/mean`` and task-set-prefixed forms such as ``gsm8k/reward/mean``."""
    return key == REWARD_MEAN or key.endswith("/" + REWARD_MEAN)


@dataclass
class RewardSeries:
    """The points of a reward plot: step to value, the last value winning when a step repeats."""

    #: The phase the training curve comes from (``train`` or ``explore``), None when there is none.
    train_phase: str | None = None
    #: Training reward mean by step.
    train: dict[int, float] = field(default_factory=dict)
    #: Evaluation reward by label (``eval`` or ``eval <task set>``), then by step.
    eval: dict[str, dict[int, float]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """True when there is nothing to draw."""
        return not self.train and not any(self.eval.values())


def reward_series(records: Iterable[MetricRecord]) -> RewardSeries:
    """Collect the reward points of ``records``; non-finite values are skipped.

    The training curve is ``reward/mean`` of the first phase in
    :data:`~trinity.monitor.keys.TRAIN_PHASES` that has one; each key of
    :func:`is_reward_key` in ``eval`` records is one evaluation curve.
    """
    by_phase: dict[str, dict[int, float]] = {phase: {} for phase in TRAIN_PHASES}
    evals: dict[str, dict[int, float]] = {}
    for record in records:
        if record.phase in by_phase:
            value = record.metrics.get(REWARD_MEAN)
            if value is not None and math.isfinite(value):
                by_phase[record.phase][record.step] = float(value)
        elif record.phase == PHASE_EVAL:
            for key, value in record.metrics.items():
                if is_reward_key(key) and math.isfinite(value):
                    prefix = key[: -len(REWARD_MEAN)].rstrip("/")
                    label = f"eval {prefix}" if prefix and prefix != "eval" else "eval"
                    evals.setdefault(label, {})[record.step] = float(value)
    series = RewardSeries(eval=evals)
    for phase in TRAIN_PHASES:
        if by_phase[phase]:
            series.train_phase, series.train = phase, by_phase[phase]
            break
    return series


def plot_reward_curve(
    source: str | Path | Iterable[MetricRecord],
    out_path: str | Path | None = None,
    *,
    title: str = "Reward",
) -> Path:
    """Draw the reward curve of ``source`` into a PNG and return its path.

    ``source`` is a metrics JSONL file (the PNG then defaults to
    ``reward_curve.png`` beside it) or records in memory (``out_path``
    required). The file is written whole or not at all (written aside, then
    renamed). Raises :class:`FileNotFoundError` when the metrics file does not exist.
    """
    if isinstance(source, (str, Path)):
        if out_path is None:
            out_path = Path(source).parent / REWARD_PLOT_FILE
        records: Iterable[MetricRecord] = load_records(source)
    else:
        if out_path is None:
            raise ValueError("out_path is required when plotting records from memory")
        records = source
    series = reward_series(records)
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        _draw(series, title, partial)
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return out


def _draw(series: RewardSeries, title: str, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=FIGURE_SIZE, dpi=DPI)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    if series.train:
        steps = sorted(series.train)
        axes.plot(
            steps,
            [series.train[s] for s in steps],
            color="C0",
            linewidth=1.8,
            marker="." if len(steps) <= 60 else None,
            label=f"{series.train_phase} reward (mean per step)",
        )
    for index, (label, points) in enumerate(sorted(series.eval.items()), start=1):
        steps = sorted(points)
        axes.plot(
            steps, [points[s] for s in steps], color=f"C{index}", linestyle="--", marker="o", label=f"{label} reward"
        )
    if series.empty:
        axes.text(0.5, 0.5, "no reward metrics logged", transform=axes.transAxes, ha="center", va="center")
    else:
        axes.legend(loc="best")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    axes.set_xlabel("step")
    axes.set_ylabel("reward")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, format="png")
