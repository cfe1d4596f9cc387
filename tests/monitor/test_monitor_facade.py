"""The Monitor façade: sinks chosen by the MonitorPlan and the registry, fan-out, failures, close."""

from __future__ import annotations

import errno
import io
import logging
from pathlib import Path

import pytest

from tests.monitor._helpers import only
from tests.plans import make_plan
from trinity.monitor import (
    METRICS_FILE,
    MONITOR_SINKS,
    MetricRecord,
    MetricsWriteError,
    Monitor,
    MonitorError,
    Sink,
    SinkContext,
    enabled_sinks,
    load_records,
)
from trinity.utils.registry import UnknownNameError


class RecordingSink(Sink):
    """Keeps what it is given; fails on demand."""

    instances: list[RecordingSink] = []

    def __init__(self, context: SinkContext) -> None:
        self.context = context
        self.records: list[MetricRecord] = []
        self.flushed = 0
        self.closed = 0
        self.fail_on_log = False
        self.fail_with: OSError | None = None
        RecordingSink.instances.append(self)

    def log(self, record: MetricRecord) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        if self.fail_on_log:
            raise OSError("disk on fire")
        self.records.append(record)

    def flush(self) -> None:
        self.flushed += 1

    def close(self) -> None:
        self.closed += 1


MONITOR_SINKS.add("test-recording", RecordingSink)


def _recorder() -> RecordingSink:
    return RecordingSink.instances[-1]


def test_config_flags_choose_the_sinks() -> None:
    assert enabled_sinks(make_plan().monitor) == ["jsonl", "tensorboard", "console"]
    wandb = make_plan({"monitor.monitor_type": "wandb", "monitor.progress": False}).monitor
    assert enabled_sinks(wandb) == ["wandb", "jsonl"]
    assert enabled_sinks(make_plan({"monitor.monitor_type": "none", "monitor.jsonl": False}).monitor) == ["console"]
    assert {"console", "jsonl", "tensorboard", "wandb"} <= set(MONITOR_SINKS.names())


def test_every_sink_gets_every_record_and_is_closed_once(tmp_path: Path) -> None:
    monitor = Monitor(only(jsonl=True), tmp_path, total_steps=5, extra_sinks=["Test-Recording"])
    recorder = _recorder()
    assert monitor.sink_names == ["jsonl", "test-recording"]
    assert recorder.context.run_dir == tmp_path and recorder.context.total_steps == 5
    monitor.log({"reward/mean": 0.5, "n": 3}, step=1, phase="train")
    monitor.flush()
    monitor.close()
    monitor.close()
    logged = [(r.step, r.phase, dict(r.metrics)) for r in recorder.records]
    assert logged == [(1, "train", {"reward/mean": 0.5, "n": 3})]
    assert recorder.flushed == 1 and recorder.closed == 1
    assert len(load_records(tmp_path / METRICS_FILE)) == 1
    with pytest.raises(MonitorError, match="closed"):
        monitor.log({"a": 1}, step=2, phase="train")


def test_a_failing_sink_is_dropped_with_a_warning_and_the_others_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monitor = Monitor(only(jsonl=True), tmp_path, extra_sinks=["test-recording"])
    recorder = _recorder()
    recorder.fail_on_log = True
    with caplog.at_level(logging.WARNING, logger="trinity.monitor"):
        monitor.log({"a": 1.0}, step=1, phase="train")
        monitor.log({"a": 2.0}, step=2, phase="train")
    monitor.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "'test-recording'" in warnings[0] and "disk on fire" in warnings[0]
    assert recorder.closed == 1 and monitor.sink_names == []
    assert [r.metrics["a"] for r in load_records(tmp_path / METRICS_FILE)] == [1.0, 2.0]


def test_an_unknown_sink_name_fails_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(UnknownNameError, match=r"'jsnl'.*did you mean 'jsonl'"):
        Monitor(only(jsonl=True), tmp_path / "run", extra_sinks=["jsnl"])
    assert not (tmp_path / "run").exists()


def test_for_run_uses_the_run_folder_and_step_count(tmp_path: Path) -> None:
    plan = make_plan(
        {
            "project": "p",
            "name": "n",
            "checkpoint_root_dir": str(tmp_path),
            "buffer.total_steps": 12,
            "monitor.monitor_type": "none",
            "monitor.plot": False,
        }
    )
    assert plan.monitor == only(jsonl=True, progress=True)
    out = io.StringIO()
    with Monitor.for_run(plan, stream=out) as monitor:
        monitor.log({"reward/mean": 1.0}, step=1, phase="train")
    assert (tmp_path / "p" / "n" / METRICS_FILE).is_file()
    assert out.getvalue().startswith("[train] step 1/12 | reward 1")


@pytest.mark.parametrize("call", ["log", "mark_resume"])
def test_a_full_disk_under_the_metrics_file_stops_the_run_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, call: str
) -> None:
    # /dev/full is the kernel's always-full device: every write to it fails with a real ENOSPC.
    (tmp_path / METRICS_FILE).symlink_to("/dev/full")
    monitor = Monitor(only(jsonl=True), tmp_path, extra_sinks=["test-recording"])
    with caplog.at_level(logging.WARNING, logger="trinity.monitor"), pytest.raises(MetricsWriteError) as caught:
        if call == "log":
            monitor.log({"a": 1.0}, step=1, phase="train")
        else:
            monitor.mark_resume(3)
    monitor.close()
    assert caught.value.exit_code == 2
    assert str(caught.value).startswith(
        f"cannot log metrics: No space left on device (errno ENOSPC) writing {tmp_path / METRICS_FILE}; "
    )
    assert not caplog.records, "no warning: the error says it all"


def test_other_sinks_failing_on_a_full_disk_stay_warnings(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    monitor = Monitor(only(), tmp_path, extra_sinks=["test-recording"])
    recorder = _recorder()
    recorder.fail_with = OSError(errno.ENOSPC, "No space left on device")
    with caplog.at_level(logging.WARNING, logger="trinity.monitor"):
        monitor.log({"a": 1.0}, step=1, phase="train")
    monitor.close()
    assert monitor.sink_names == [] and "No space left on device" in caplog.records[0].getMessage()
