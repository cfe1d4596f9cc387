"""The console sink: plain one-line logs off a terminal (or under CI), a rich display on one."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from tests.monitor._helpers import only
from trinity.monitor import Monitor
from trinity.monitor.console_sink import ConsoleSink, format_duration, format_value


class FakeTerminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _log_three(monitor: Monitor) -> None:
    monitor.log({"reward/mean": 0.5, "perf/tokens_per_s": 1234.5, "time/sync_s": 0.21, "loss": 0.75}, 1, "train")
    monitor.log({"reward/mean": 0.625}, step=1, phase="eval")
    monitor.log({"reward/mean": 0.75, "loss": 0.5}, step=2, phase="train")


def test_non_tty_prints_one_plain_line_per_log(tmp_path: Path) -> None:
    out = io.StringIO()
    monitor = Monitor(only(progress=True), tmp_path, total_steps=4, stream=out)
    _log_three(monitor)
    monitor.close()

    lines = out.getvalue().splitlines()
    assert len(lines) == 3, out.getvalue()
    assert "\x1b" not in out.getvalue()  # no terminal control codes
    first, evaluation, second = lines
    assert first.startswith("[train] step 1/4 | reward 0.5 | tokens/s 1,234 | sync 0.21s | elapsed 0:00:0")
    assert "| ETA 0:00:0" in first and first.endswith("| loss 0.75")
    assert evaluation.startswith("[eval] step 1/4 | reward 0.625 | elapsed ") and "ETA" not in evaluation
    assert second.startswith("[train] step 2/4 | reward 0.75 | elapsed ") and second.endswith("| loss 0.5")


def test_ci_true_gives_plain_lines_even_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    out = FakeTerminal()
    with Monitor(only(progress=True), tmp_path, stream=out) as monitor:
        _log_three(monitor)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[0].startswith("[train] step 1 | reward 0.5")


def test_a_terminal_gets_the_rich_progress_display(tmp_path: Path) -> None:
    out = FakeTerminal()
    monitor = Monitor(only(progress=True), tmp_path, total_steps=4, stream=out)
    sink = monitor._sinks["console"]
    assert isinstance(sink, ConsoleSink) and not sink.plain
    _log_three(monitor)
    monitor.close()

    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    assert "\x1b[" in out.getvalue()  # drawn with terminal control codes
    final = [line for line in text.splitlines() if "step 2/4" in line]
    assert final, text
    assert "reward 0.75" in final[-1] and "tokens/s 1,234" in final[-1] and "sync 0.21s" in final[-1]
    assert "ETA" in final[-1] and "train" in final[-1]
    assert "[eval] step 1/4 | reward 0.625" in text  # evaluations are printed above the bar
    after_eval = text.split("[eval]", 1)[1]
    assert "step 0/4" not in after_eval  # the bar redrawn under it shows the step already logged


def test_formatting_helpers() -> None:
    assert format_value(3) == "3" and format_value(12345) == "12,345"
    assert format_value(0.123456) == "0.1235" and format_value(98765.4) == "98,765"
    assert format_value(float("nan")) == "nan"
    assert format_duration(0) == "0:00:00" and format_duration(3725.4) == "1:02:05"
