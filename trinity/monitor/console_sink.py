"""``console`` sink: a rich progress display, or one plain line per record where that fits better.

On a terminal the display is one live line: the phase, a bar, ``step
x/total``, the latest reward, tokens/s and sync time, elapsed time and ETA;
evaluation results are printed above it. When the output is not a terminal,
when ``CI=true`` or ``TERM=dumb``, every ``log`` call prints one line with
every metric instead (unless ``-v`` already shows those lines through the
log)::

    [train] step 3/10 | reward 0.5123 | tokens/s 1,234 | sync 0.210s | elapsed 0:00:12 | ETA 0:00:28 | loss 0.1234

Either way the run's ``trinity.log`` gets every line in full
(:mod:`trinity.monitor.run_log`).
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, TextIO

from trinity.monitor.keys import PHASE_EVAL, REWARD_MEAN, SYNC_SECONDS, TOKENS_PER_SECOND
from trinity.monitor.records import MetricRecord, MetricValue
from trinity.monitor.run_log import metric_lines_reach_the_console
from trinity.monitor.sink import MONITOR_SINKS, Sink, SinkContext

#: Metrics singled out on the console: key, label, unit, field of the rich display.
HEADLINE_METRICS: tuple[tuple[str, str, str, str], ...] = (
    (REWARD_MEAN, "reward", "", "reward"),
    (TOKENS_PER_SECOND, "tokens/s", "", "tps"),
    (SYNC_SECONDS, "sync", "s", "sync"),
)
#: Other metrics shown on a plain line, at most.
MAX_EXTRA_METRICS = 6
#: Seconds of history the rich ETA is estimated from (long: RFT steps can take minutes).
SPEED_WINDOW_SECONDS = 24 * 3600.0


def wants_plain_output(stream: TextIO) -> bool:
    """Return True when ``stream`` should get plain lines: not a terminal, ``CI`` set true, or ``TERM=dumb``."""
    if os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}:
        return True
    if os.environ.get("TERM", "") == "dumb":
        return True
    try:
        return not stream.isatty()
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return True


def format_value(value: MetricValue) -> str:
    """Return a short human form of a metric value (``0.5123``, ``1,234``, ``nan``)."""
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def format_duration(seconds: float) -> str:
    """Return ``seconds`` as ``H:MM:SS``."""
    whole = max(round(seconds), 0)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class ProgressClock:
    """Step progress of a run: elapsed time and an ETA from the pace since the first logged step."""

    def __init__(self, total_steps: int | None) -> None:
        self.total_steps = total_steps if total_steps and total_steps > 0 else None
        self.started = time.monotonic()
        self.step: int | None = None
        self._base: int | None = None

    def advance(self, step: int) -> None:
        """Note that ``step`` is done (the first step noted marks where this process started)."""
        if self._base is None:
            self._base = step - 1
        self.step = step if self.step is None else max(self.step, step)

    def elapsed(self) -> float:
        """Seconds since the clock was made."""
        return time.monotonic() - self.started

    def eta(self) -> float | None:
        """Seconds left at the pace so far, or None without a total or any step done."""
        if self.total_steps is None or self.step is None or self._base is None:
            return None
        done = self.step - self._base
        if done <= 0:
            return None
        return self.elapsed() / done * max(self.total_steps - self.step, 0)

    def step_text(self, step: int) -> str:
        """Return ``step x/total`` (or ``step x`` without a total)."""
        return f"step {step}/{self.total_steps}" if self.total_steps else f"step {step}"


def format_line(record: MetricRecord, clock: ProgressClock, *, full: bool = False) -> str:
    """Return the plain one-line form of ``record`` (``full``: every metric, else the first few and a count)."""
    parts = [f"[{record.phase}] {clock.step_text(record.step)}"]
    shown: set[str] = set()
    for key, label, unit, _ in HEADLINE_METRICS:
        if key in record.metrics:
            parts.append(f"{label} {format_value(record.metrics[key])}{unit}")
            shown.add(key)
    parts.append(f"elapsed {format_duration(clock.elapsed())}")
    eta = clock.eta()
    if eta is not None and record.phase != PHASE_EVAL:
        parts.append(f"ETA {format_duration(eta)}")
    others = [key for key in record.metrics if key not in shown]
    shown_others = others if full else others[:MAX_EXTRA_METRICS]
    parts.extend(f"{key} {format_value(record.metrics[key])}" for key in shown_others)
    if len(others) > len(shown_others):
        parts.append(f"+{len(others) - MAX_EXTRA_METRICS} more")
    return " | ".join(parts)


@MONITOR_SINKS.register("console")
class ConsoleSink(Sink):
    """Progress on the console: rich on a terminal, plain lines elsewhere (see the module doc)."""

    def __init__(self, context: SinkContext) -> None:
        self._stream = context.stream
        self._clock = ProgressClock(context.total_steps)
        #: True when each record is printed as one plain line.
        self.plain = wants_plain_output(self._out())
        self._progress: Any = None
        self._task: Any = None
        if not self.plain:
            self._start_rich()

    def _out(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stdout

    def _start_rich(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        console = Console(file=self._stream, force_terminal=True)
        self._progress = Progress(
            TextColumn("[bold cyan]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[step]}"),
            TextColumn("reward {task.fields[reward]}"),
            TextColumn("tokens/s {task.fields[tps]}"),
            TextColumn("sync {task.fields[sync]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            refresh_per_second=2,
            speed_estimate_period=SPEED_WINDOW_SECONDS,
        )
        total = self._clock.total_steps
        self._task = self._progress.add_task(
            "run", total=total, step=f"step 0/{total}" if total else "step 0", reward="-", tps="-", sync="-"
        )
        self._progress.start()

    def log(self, record: MetricRecord) -> None:
        """Advance the display (train/explore records) or print the record (plain mode, evaluations)."""
        if record.phase != PHASE_EVAL:
            self._clock.advance(record.step)
        if self.plain:
            if record.phase != PHASE_EVAL and metric_lines_reach_the_console():
                return  # -v: the full line reaches the console through the log already
            out = self._out()
            out.write(format_line(record, self._clock, full=True) + "\n")
            out.flush()
            return
        if record.phase == PHASE_EVAL:
            self._progress.console.print(format_line(record, self._clock), markup=False, highlight=False)
            return
        from rich.markup import escape

        fields: dict[str, Any] = {
            field: format_value(record.metrics[key]) + unit
            for key, _, unit, field in HEADLINE_METRICS
            if key in record.metrics
        }
        step = self._clock.step if self._clock.step is not None else record.step
        self._progress.update(
            self._task, completed=step, description=escape(record.phase), step=self._clock.step_text(step), **fields
        )
        self._progress.refresh()  # draw now: a step can take minutes, and prints above reuse the last drawing

    def flush(self) -> None:
        """Redraw the display / flush the stream."""
        if self._progress is not None:
            self._progress.refresh()
        else:
            self._out().flush()

    def close(self) -> None:
        """Stop the live display, leaving its last state on screen."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        else:
            self._out().flush()
