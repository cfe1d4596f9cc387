"""``<run>/trinity.log``: every INFO line of the framework and every metric record in full, whatever the console
shows; the console's plain lines carry every metric too, unless ``-v`` already shows them through the log."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from tests.plans import make_plan
from trinity.cli.main import configure_logging
from trinity.monitor import Monitor
from trinity.monitor.run_log import RUN_LOG_FILE, RunLog, metric_lines_reach_the_console

METRICS = {"reward/mean": 0.5, **{f"actor/m{i}": float(i) for i in range(12)}}


@pytest.fixture
def quiet_console(capsys: pytest.CaptureFixture[str]) -> object:
    """The console as ``trinity run`` without ``-v`` sets it: warnings and errors only."""
    configure_logging(0)
    yield capsys
    configure_logging(0)


def monitor(run_dir: Path, stream: io.StringIO) -> Monitor:
    plan = make_plan({"monitor.monitor_type": "none", "monitor.jsonl": False, "monitor.plot": False})
    return Monitor(plan.monitor, run_dir, total_steps=4, stream=stream)


def test_info_lines_and_full_metric_rows_reach_the_file_but_not_a_quiet_console(
        tmp_path: Path, quiet_console: pytest.CaptureFixture[str]) -> None:
    run_log = RunLog(tmp_path)
    stream = io.StringIO()
    try:
        logging.getLogger("trinity.launcher").info("Ray: local cluster; run folder %s", tmp_path)
        logging.getLogger("trinity.launcher").debug("not kept")
        with monitor(tmp_path, stream) as watched:
            watched.log(METRICS, step=1, phase="train")
    finally:
        run_log.close()
    text = (tmp_path / RUN_LOG_FILE).read_text(encoding="utf-8")
    assert "INFO trinity.launcher: Ray: local cluster" in text and "not kept" not in text
    row = next(line for line in text.splitlines() if "trinity.metrics: [train] step 1/4" in line)
    assert "reward 0.5" in row and all(f"{key} " in row for key in METRICS if key.startswith("actor/"))
    assert "more" not in row
    assert "Ray:" not in quiet_console.readouterr().err, "the console shows warnings only without -v"
    printed = stream.getvalue()  # not a terminal: the console sink's plain line, with every metric
    assert "[train] step 1/4" in printed and all(f"{key} " in printed for key in METRICS if key != "reward/mean")


def test_closing_the_run_log_stops_the_file_and_gives_the_logger_its_level_back(tmp_path: Path) -> None:
    before = logging.getLogger("trinity").level
    run_log = RunLog(tmp_path)
    run_log.close()
    run_log.close()
    logging.getLogger("trinity.launcher").warning("after the run")
    assert "after the run" not in (tmp_path / RUN_LOG_FILE).read_text(encoding="utf-8")
    assert logging.getLogger("trinity").level == before


def test_with_v_the_metric_lines_reach_the_console_through_the_log_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(1)
    run_log = RunLog(tmp_path)
    stream = io.StringIO()
    try:
        assert metric_lines_reach_the_console()
        with monitor(tmp_path, stream) as watched:
            watched.log(METRICS, step=2, phase="train")
    finally:
        run_log.close()
        configure_logging(0)
    assert "[train] step 2/4" in capsys.readouterr().err
    assert "[train]" not in stream.getvalue(), "printed once, by the log"
    assert not metric_lines_reach_the_console()
