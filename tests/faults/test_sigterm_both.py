"""End to end: `trinity run` (mode both) sent SIGTERM mid-run stops cleanly with exit 143, leaves no process of
its own behind, saves a checkpoint of its last whole step when ``trainer.save_on_stop`` is set, and the same
command resumes after it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import yaml

from tests.e2e.test_run_both import job_config, records, run_cli
from tests.faults.ledger import FaultLedger
from tests.processes import kill_session, session_pids, signal_session

STEPS = 5




def _config(tmp_path: Path, tiny_model: Path, save_on_stop: bool, **overrides: object) -> Path:
    raw = job_config(
        tmp_path,
        tiny_model,
        **{
            "buffer.total_steps": STEPS,
            "trainer.save_interval": 0,
            **overrides,
            "trainer.save_on_stop": save_on_stop,
            "cluster.gpu_per_node": 2,
            "synchronizer.verify_checksums": False,
            "buffer.explorer_input.eval_tasksets": [],
        },
    )
    config_file = tmp_path / "job.yaml"
    config_file.write_text(yaml.safe_dump(raw))
    return config_file


def _terminate_after_step_2(config_file: Path, run_dir: Path, log: Path) -> None:
    """Run the job, SIGTERM its driver once step 2 is logged; assert exit 143 and nothing of the run left."""
    first = run_cli(config_file, log, verbose=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and first.poll() is None:
            if (run_dir / "metrics.jsonl").exists() and any(
                r["phase"] == "train" and r["step"] >= 2 for r in records(run_dir)
            ):
                break
            time.sleep(0.05)
        assert first.poll() is None, f"the run ended before the signal:\n{log.read_text()[-3000:]}"
        first.send_signal(signal.SIGTERM)  # the driver alone, as a scheduler or `timeout` sends it
        assert first.wait(120) == 143, log.read_text()[-3000:]
        deadline = time.monotonic() + 20
        while session_pids(first.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert session_pids(first.pid) == [], "the run left processes of its own (its Ray cluster) behind"
    finally:
        try:
            os.killpg(first.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        first.wait(30)
    text = log.read_text()
    assert "C++" not in text and "Aborted" not in text
    assert text.rstrip().endswith("trinity: error: terminated (SIGTERM)")


def test_sigterm_stops_everything_at_once_by_default(
    tmp_path: Path, tiny_model: Path, fault_ledger: FaultLedger
) -> None:
    fault_ledger.case("sigterm-both")
    run_dir = tmp_path / "ckpt" / "e2e" / "run"
    _terminate_after_step_2(_config(tmp_path, tiny_model, save_on_stop=False), run_dir, tmp_path / "run.log")
    assert "SIGTERM: stopping" not in (tmp_path / "run.log").read_text()
    assert not list((run_dir / "checkpoints").glob("step-*")), "without save_on_stop nothing is saved on stop"


def test_sigterm_saves_the_last_step_stops_everything_and_the_same_command_resumes(
    tmp_path: Path, tiny_model: Path, fault_ledger: FaultLedger
) -> None:
    fault_ledger.case("sigterm-both-save-on-stop")
    config_file = _config(tmp_path, tiny_model, save_on_stop=True)
    run_dir = tmp_path / "ckpt" / "e2e" / "run"
    log = tmp_path / "run.log"
    _terminate_after_step_2(config_file, run_dir, log)
    text = log.read_text()
    trained = [r["step"] for r in records(run_dir) if r["phase"] == "train"]
    stopped_at = trained[-1]
    assert 2 <= stopped_at < STEPS
    assert f"SIGTERM: stopping after step {stopped_at}; saved its checkpoint" in text
    assert [p.name for p in (run_dir / "checkpoints").glob("step-*")] == [f"step-{stopped_at}"]

    before = len(log.read_text())
    second = run_cli(config_file, log, verbose=True)
    assert second.wait(300) == 0, log.read_text()[-3000:]
    assert f"at step {stopped_at}" in log.read_text()[before:]
    trained = [r["step"] for r in records(run_dir) if r["phase"] == "train"]
    assert trained == list(range(1, STEPS + 1)), "the resumed run trains each step after the checkpoint once"


def _run_until_step(config_file: Path, run_dir: Path, log: Path, step: int) -> subprocess.Popen[bytes]:
    """Start the job and return it once its training step ``step`` is logged."""
    run = run_cli(config_file, log, verbose=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and run.poll() is None:
        if (run_dir / "metrics.jsonl").exists() and any(r["phase"] == "train" and r["step"] >= step
                                                        for r in records(run_dir)):
            return run
        time.sleep(0.05)
    kill_session(run.pid)
    raise AssertionError(f"the run ended or stalled before step {step}:\n{log.read_text()[-3000:]}")


def test_a_sigterm_to_every_process_of_the_job_exits_at_once_with_one_line(
    tmp_path: Path, tiny_model: Path, fault_ledger: FaultLedger
) -> None:
    """Slurm's scancel and time limit signal the whole job: Ray's processes stop with the driver."""
    fault_ledger.case("sigterm-whole-job")
    config_file = _config(tmp_path, tiny_model, save_on_stop=True, **{"buffer.total_steps": 400,
                                                                       "trainer.save_interval": 2})
    run_dir, log = tmp_path / "ckpt" / "e2e" / "run", tmp_path / "run.log"
    run = _run_until_step(config_file, run_dir, log, 3)
    try:
        signalled = time.monotonic()
        signal_session(run.pid, signal.SIGTERM)
        code = run.wait(60)
        seconds = time.monotonic() - signalled
    finally:
        kill_session(run.pid)
    text = log.read_text()
    print(f"whole-job SIGTERM: exit {code} after {seconds:.1f} s")
    assert code == 143 and seconds < 10, (code, seconds, text[-3000:])  # well inside Slurm's 30 s grace
    line = [x for x in text.splitlines() if x.strip()][-1]
    assert line.startswith("trinity: error: SIGTERM reached the whole job"), text[-3000:]
    newest = max(int(p.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("step-*"))
    assert f"its newest checkpoint is step {newest} (" in line and "SIGUSR1" in line
    assert "Traceback" not in text and "Failed to connect to GCS" not in text


def test_sigusr1_saves_the_current_step_and_stops_even_without_save_on_stop(
    tmp_path: Path, tiny_model: Path, fault_ledger: FaultLedger
) -> None:
    """The early warning of a batch scheduler (sbatch --signal=B:USR1@120) reaches the driver alone."""
    fault_ledger.case("sigusr1-both")
    config_file = _config(tmp_path, tiny_model, save_on_stop=False)
    run_dir, log = tmp_path / "ckpt" / "e2e" / "run", tmp_path / "run.log"
    run = _run_until_step(config_file, run_dir, log, 2)
    try:
        run.send_signal(signal.SIGUSR1)
        code = run.wait(120)
    finally:
        kill_session(run.pid)
    text = log.read_text()
    stopped_at = [r["step"] for r in records(run_dir) if r["phase"] == "train"][-1]
    assert code == 128 + signal.SIGUSR1, text[-3000:]
    assert f"SIGUSR1: stopping after step {stopped_at}; saved its checkpoint" in text
    assert text.rstrip().endswith("trinity: error: terminated (SIGUSR1)")
    assert [p.name for p in (run_dir / "checkpoints").glob("step-*")] == [f"step-{stopped_at}"]
    second = run_cli(config_file, log, verbose=True)
    assert second.wait(300) == 0, log.read_text()[-3000:]
    assert [r["step"] for r in records(run_dir) if r["phase"] == "train"] == list(range(1, STEPS + 1))
