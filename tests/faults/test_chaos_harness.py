"""The kill harness's own logic: seeded schedules, fault points, and the one-line check of a failed run."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults.chaos import TARGETS, ChaosError, Job, Run, after_train_step, draw_train_kills, one_line_failure


def test_a_seed_draws_the_same_schedule_with_rising_steps() -> None:
    first = [p.describe() for p in draw_train_kills(random.Random(7), TARGETS, 1, 6)]
    again = [p.describe() for p in draw_train_kills(random.Random(7), TARGETS, 1, 6)]
    assert first == again
    steps = [int(text.split("train step ")[1]) for text in first]
    assert steps == sorted(steps) and len(set(steps)) == 3 and all(1 <= s <= 6 for s in steps)
    assert [p.target for p in draw_train_kills(random.Random(7), TARGETS, 1, 6)] == list(TARGETS)


def test_a_train_step_point_is_reached_by_its_log_line_or_a_later_one(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text("trinity: info: train step 12: 8 experiences of groups g, model versions [0]\n")
    run = Run(log, subprocess.Popen([sys.executable, "-c", "pass"]), time.time())
    run.process.wait()
    assert after_train_step(12, "driver", 0.0).reached(run)
    assert after_train_step(5, "driver", 0.0).reached(run), "a run resumed past step 5 never logs it"
    assert not after_train_step(13, "driver", 0.0).reached(run)


def test_a_train_step_point_is_overtaken_once_a_later_step_is_logged(tmp_path: Path) -> None:
    """A run past the next step is killed at once, not after the delay: the rest of the schedule stays reachable."""
    log = tmp_path / "run.log"
    log.write_text("trinity: info: train step 3: 8 experiences of groups g, model versions [2]\n")
    run = Run(log, subprocess.Popen([sys.executable, "-c", "pass"]), time.time())
    run.process.wait()
    assert not after_train_step(3, "driver", 5.0).overtaken(run)
    assert after_train_step(2, "driver", 5.0).overtaken(run)


def test_a_failure_lists_every_run_with_its_steps_and_kills(tmp_path: Path) -> None:
    job = Job("history", tmp_path / "job.yaml", tmp_path / "logs", seed=3)
    for number, text in enumerate(["trinity: info: train step 1: a\ntrinity: info: train step 2: b\n", ""], 1):
        log = tmp_path / f"run{number}.log"
        log.write_text(text)
        run = Run(log, subprocess.Popen([sys.executable, "-c", "pass"]), time.time())
        run.process.wait()
        job.runs.append(run)
    job.runs[0].killed.append("driver")
    message = str(job.fail("the job ended 0 before its fault point"))
    job.close()
    assert "run 1: train steps 1..2 logged; killed: driver; exit 0" in message
    assert "run 2: no train step logged; killed: nothing; exit 0" in message


def test_a_failed_run_must_end_in_one_short_error_line() -> None:
    assert one_line_failure("trinity: info: x\ntrinity: error: the run stopped: its trainer rank died\n") is None
    assert "traceback" in (
        one_line_failure("Traceback (most recent call last):\n  File x\ntrinity: error: boom\n") or ""
    )
    assert "not a 'trinity: error:' line" in (one_line_failure("RuntimeError: boom\n") or "")
    assert "characters" in (one_line_failure("trinity: error: " + "x" * 1500) or "")


def test_a_job_that_runs_past_its_limit_is_killed_and_fails_with_its_seed(tmp_path: Path) -> None:
    job = Job("stuck", tmp_path / "job.yaml", tmp_path / "logs", seed=42, limit=0.0)
    try:
        job.start()
        with pytest.raises(ChaosError, match=r"\[stuck, seed 42, run 1\] the job did not end 0 within 0 s"):
            job.check_time()
        assert job.current.returncode is not None, "the run was killed"
    finally:
        job.close()
    assert not job.ray_tmp.exists()
