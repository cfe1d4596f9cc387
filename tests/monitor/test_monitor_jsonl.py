"""The jsonl sink: one object per log call, readable after close and after the process dies abruptly."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.monitor._helpers import only
from trinity.monitor import METRICS_FILE, Monitor, load_records

ROOT = Path(__file__).resolve().parents[2]


def test_one_object_per_log_call_readable_after_close(tmp_path: Path) -> None:
    monitor = Monitor(only(jsonl=True), tmp_path)
    monitor.log({"reward/mean": 0.25, "tokens": 128}, step=1, phase="train")
    monitor.log({"reward/mean": 0.5}, step=1, phase="eval")
    monitor.log({"reward/mean": 0.75, "loss": 1.5}, step=2, phase="train")
    monitor.close()

    lines = (tmp_path / METRICS_FILE).read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    first = json.loads(lines[0])
    assert set(first) == {"step", "phase", "time", "metrics"}
    assert first["step"] == 1 and first["phase"] == "train"
    assert first["metrics"] == {"reward/mean": 0.25, "tokens": 128}
    assert isinstance(first["metrics"]["tokens"], int)
    assert abs(first["time"] - time.time()) < 60

    records = load_records(tmp_path / METRICS_FILE)
    assert [(r.step, r.phase) for r in records] == [(1, "train"), (1, "eval"), (2, "train")]
    assert records[2].metrics["loss"] == 1.5


def test_non_finite_values_are_strict_json_null_and_read_back_as_nan(tmp_path: Path) -> None:
    with Monitor(only(jsonl=True), tmp_path) as monitor:
        monitor.log({"kl": float("nan"), "ratio": float("inf"), "ok": 1.0}, step=3, phase="train")
    text = (tmp_path / METRICS_FILE).read_text(encoding="utf-8")
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text)["metrics"] == {"kl": None, "ratio": None, "ok": 1.0}
    (record,) = load_records(tmp_path / METRICS_FILE)
    assert math.isnan(record.metrics["kl"]) and record.metrics["ok"] == 1.0


_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from trinity.common.config.plan.run import MonitorPlan
    from trinity.monitor import Monitor
    monitor = Monitor(MonitorPlan("none", {}, False, False, jsonl=True, plot=False, progress=False), sys.argv[1])
    for step in range(1, 4):
        monitor.log({"reward/mean": step / 10}, step=step, phase="train")
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(3)
    """
)


@pytest.mark.parametrize("how", ["kill", "exit"])
def test_nothing_logged_is_lost_when_the_process_dies_without_close(tmp_path: Path, how: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path), how],
        check=False, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60,
    )
    expected = -signal.SIGKILL if how == "kill" else 3
    assert result.returncode == expected, result.stderr
    records = load_records(tmp_path / METRICS_FILE)
    assert [(r.step, r.metrics["reward/mean"]) for r in records] == [(1, 0.1), (2, 0.2), (3, 0.3)]


def test_a_resumed_run_appends_and_repairs_a_line_cut_short(tmp_path: Path) -> None:
    path = tmp_path / METRICS_FILE
    path.write_text('{"step": 1, "phase": "train", "time": 1.0, "metrics": {"a": 1}}\n{"step": 2, "pha', "utf-8")
    with Monitor(only(jsonl=True), tmp_path) as monitor:
        monitor.log({"a": 3}, step=3, phase="train")
    records = load_records(path)
    assert [(r.step, r.metrics["a"]) for r in records] == [(1, 1), (3, 3)]


def test_bad_input_is_refused_with_the_metric_named(tmp_path: Path) -> None:
    with Monitor(only(jsonl=True), tmp_path) as monitor:
        with pytest.raises(TypeError, match="'answer'"):
            monitor.log({"answer": "forty-two"}, step=1, phase="train")  # type: ignore[dict-item]
        with pytest.raises(ValueError, match="step"):
            monitor.log({"a": 1.0}, step=-1, phase="train")
        with pytest.raises(ValueError, match="phase"):
            monitor.log({"a": 1.0}, step=1, phase=" ")
    assert (tmp_path / METRICS_FILE).read_text(encoding="utf-8") == ""
