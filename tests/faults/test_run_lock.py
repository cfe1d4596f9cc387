"""End to end: real `trinity run` processes on one run folder — one owner per role, a dead owner taken over."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_run_both import job_config, run_cli
from tests.faults.ledger import FaultLedger
from tests.processes import kill_session


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Runs started by a test; each is SIGKILLed with everything it started (its Ray cluster) at the end."""
    runs: list[subprocess.Popen[bytes]] = []
    yield runs
    for run in runs:
        if run.poll() is None:
            kill_session(run.pid)
            run.wait(30)


def write_config(tmp: Path, model: Path, file: str, mode: str, **overrides: object) -> Path:
    """A long job in ``mode`` (a SQLite buffer, so explore and train jobs can share it) written to ``tmp/file``."""
    raw = job_config(
        tmp,
        model,
        **{
            "mode": mode,
            "buffer.total_steps": 200,
            "buffer.explorer_input.eval_tasksets": [],
            "buffer.trainer_input.experience_buffer": {
                "name": "experience",
                "storage_type": "sql",
                "max_read_timeout": 600.0,
            },
            "cluster.gpu_per_node": 1 if mode != "both" else 2,
            "synchronizer.verify_checksums": False,
            **overrides,
        },
    )
    path = tmp / file
    path.write_text(yaml.safe_dump(raw))
    return path


def holder_pid(lock: Path) -> int | None:
    try:
        return int(json.loads(lock.read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def wait_for(check: object, what: str, log: Path, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")


def refused(config: Path, log: Path) -> tuple[int, str, float]:
    """Run ``config`` to its end; return its exit status, its output and how long it took."""
    begin = time.monotonic()
    process = run_cli(config, log)
    code = process.wait(60)
    return code, log.read_text(), time.monotonic() - begin


def test_a_second_run_is_refused_and_a_killed_owners_lock_is_taken_over(
    tmp_path: Path, tiny_model: Path, started: list[subprocess.Popen[bytes]], fault_ledger: FaultLedger
) -> None:
    fault_ledger.case("lock-busy-folder")
    fault_ledger.case("lock-stale-takeover")
    config = write_config(tmp_path, tiny_model, "job.yaml", "both")
    run_dir = tmp_path / "ckpt" / "e2e" / "run"
    log = tmp_path / "first.log"
    first = run_cli(config, log, verbose=True)
    started.append(first)
    wait_for(lambda: holder_pid(run_dir / "train.lock") == first.pid, "the first run's lock", log)

    code, output, took = refused(config, tmp_path / "second.log")
    assert code == 2, output
    errors = [line for line in output.splitlines() if line.startswith("trinity: error:")]
    assert len(errors) == 1 and f"pid {first.pid} on host " in errors[0] and "(mode both, since " in errors[0]
    assert "wait for that run to end" in errors[0] and "`name`" in errors[0]
    assert took < 10, f"the second run must be refused at once, it took {took:.1f} s"
    assert first.poll() is None, "the owner keeps running"
    assert "Traceback" not in output

    kill_session(first.pid)
    fault_ledger.kill("driver")
    first.wait(30)
    assert holder_pid(run_dir / "train.lock") == first.pid, "a killed owner leaves its record behind"
    # The next run takes the dead owner's locks over, with a warning per role.
    next_log = tmp_path / "next.log"
    successor = run_cli(config, next_log, verbose=True)
    started.append(successor)
    wait_for(lambda: holder_pid(run_dir / "train.lock") == successor.pid, "the next run taking the locks", next_log)
    warnings = [line for line in next_log.read_text().splitlines() if "taking over" in line]
    assert len(warnings) == 2, next_log.read_text()  # the explore and the train role
    assert all(
        line.startswith("trinity: warning: ") and f"left by pid {first.pid} on host " in line for line in warnings
    )
    kill_session(successor.pid)
    successor.wait(30)
    # A run refused by its config (a task set that does not exist) stops before it touches the folder's locks.
    broken = write_config(
        tmp_path,
        tiny_model,
        "broken.yaml",
        "both",
        **{
            "buffer.explorer_input.taskset": {
                "path": str(tmp_path / "missing.jsonl"),
                "format": {"prompt_key": "question", "response_key": "answer"},
            }
        },
    )
    code, output, _ = refused(broken, tmp_path / "third.log")
    assert code == 2 and "missing.jsonl" in output.splitlines()[-1], output
    assert "taking over" not in output
    assert holder_pid(run_dir / "train.lock") == successor.pid, "the refused run left the locks as they were"


def test_explore_and_train_jobs_share_a_folder_but_a_second_explore_job_is_refused(
    tmp_path: Path, tiny_model: Path, started: list[subprocess.Popen[bytes]], fault_ledger: FaultLedger
) -> None:
    fault_ledger.case("lock-role-busy")
    run_dir = tmp_path / "ckpt" / "e2e" / "run"
    explore_log, train_log = tmp_path / "explore.log", tmp_path / "train.log"
    explorer = run_cli(write_config(tmp_path, tiny_model, "explore.yaml", "explore"), explore_log, verbose=True)
    started.append(explorer)
    wait_for(lambda: holder_pid(run_dir / "explore.lock") == explorer.pid, "the explore job's lock", explore_log)
    trainer = run_cli(write_config(tmp_path, tiny_model, "train.yaml", "train"), train_log, verbose=True)
    started.append(trainer)
    # Both get through their session (lock, Ray, device, layout) and run side by side.
    for job, log in ((explorer, explore_log), (trainer, train_log)):
        wait_for(
            lambda log=log, job=job: "device backend" in log.read_text() or job.poll() is not None,  # type: ignore[misc]
            "the job's session",
            log,
        )
        assert job.poll() is None, log.read_text()[-3000:]
    assert holder_pid(run_dir / "explore.lock") == explorer.pid
    assert holder_pid(run_dir / "train.lock") == trainer.pid

    code, output, took = refused(
        write_config(tmp_path, tiny_model, "explore2.yaml", "explore"), tmp_path / "explore2.log"
    )
    assert code == 2 and f"its explore role is held by another trinity run, pid {explorer.pid} " in output, output
    assert took < 10
    code, output, _ = refused(write_config(tmp_path, tiny_model, "both.yaml", "both"), tmp_path / "both.log")
    assert code == 2 and f"pid {explorer.pid} " in output, output
    assert explorer.poll() is None and trainer.poll() is None
