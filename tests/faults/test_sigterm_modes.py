"""SIGTERM (what schedulers, Kubernetes and `timeout` send) to `trinity run` in modes train and explore.

The driver alone gets the signal, as a scheduler sends it. The run stops
cleanly: exit 143, the one line ``terminated (SIGTERM)``, no C++ stack dump,
nothing of its session (its local Ray cluster, workers) left running. In mode
train, ``trainer.save_on_stop`` first checkpoints the step in flight and the
same command resumes after it.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from tests.e2e.test_run_both import job_config
from tests.faults.ledger import FaultLedger
from tests.faults.operator_view import finish, one_error_line, sft_config, start, train_steps, write_config

TERMINATED = "trinity: error: terminated (SIGTERM)"


def _terminate_when(config: Path, log: Path, ray_tmp: Path, ready: object) -> str:
    """Run ``config``, SIGTERM its driver once ``ready()``; assert exit 143 and nothing left; return the output."""
    process = start(config, log, ray_tmp=ray_tmp, verbose=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None and not ready():  # type: ignore[operator]
        time.sleep(0.05)
    assert process.poll() is None, f"the run ended before the signal:\n{log.read_text()[-3000:]}"
    process.send_signal(signal.SIGTERM)
    code, output = finish(process, log, timeout=120)
    assert code == 143, output[-3000:]
    assert one_error_line(output) == TERMINATED
    assert "C++" not in output and "Aborted" not in output
    return output


def _trained(run_dir: Path, step: int) -> bool:
    return (run_dir / "metrics.jsonl").is_file() and any(s >= step for s in train_steps(run_dir))


def _long_sft(tmp_path: Path, model: Path, save_on_stop: bool, steps: int = 400) -> Path:
    return write_config(
        tmp_path,
        sft_config(
            tmp_path,
            model,
            **{
                "buffer.total_steps": steps,
                "buffer.total_epochs": 100,
                "trainer.save_interval": 0,
                "trainer.save_on_stop": save_on_stop,
            },
        ),
    )


def test_sigterm_in_mode_train_stops_at_once_and_saves_nothing_by_default(
    tmp_path: Path, tiny_model: Path, ray_tmp: Path, fault_ledger: FaultLedger
) -> None:
    fault_ledger.case("sigterm-train")
    run_dir = tmp_path / "ckpt" / "faults" / "sft"
    output = _terminate_when(
        _long_sft(tmp_path, tiny_model, False), tmp_path / "run.log", ray_tmp, lambda: _trained(run_dir, 2)
    )
    assert "SIGTERM: stopping" not in output
    assert not list((run_dir / "checkpoints").glob("step-*")), "without save_on_stop nothing is saved on stop"
    assert (run_dir / "train.lock").read_text() == "", "the stopped run let go of its folder"


def test_sigterm_in_mode_train_with_save_on_stop_saves_the_last_step_and_the_same_command_resumes(
    tmp_path: Path, tiny_model: Path, ray_tmp: Path, fault_ledger: FaultLedger
) -> None:
    fault_ledger.case("sigterm-train-save-on-stop")
    run_dir = tmp_path / "ckpt" / "faults" / "sft"
    config = _long_sft(tmp_path, tiny_model, True)
    log = tmp_path / "run.log"
    output = _terminate_when(config, log, ray_tmp, lambda: _trained(run_dir, 2))
    stopped_at = train_steps(run_dir)[-1]
    assert f"SIGTERM: stopping after step {stopped_at}; saved its checkpoint" in output
    assert [p.name for p in (run_dir / "checkpoints").glob("step-*")] == [f"step-{stopped_at}"]

    resumed = write_config(
        tmp_path,
        sft_config(
            tmp_path,
            tiny_model,
            **{
                "buffer.total_steps": stopped_at + 2,
                "buffer.total_epochs": 100,
                "trainer.save_interval": 0,
                "trainer.save_on_stop": True,
            },
        ),
        "resume.yaml",
    )
    code, output = finish(start(resumed, log, ray_tmp=ray_tmp, verbose=True), log)
    assert code == 0, output[-3000:]
    assert f"at step {stopped_at}" in output
    steps = train_steps(run_dir)
    assert steps[-2:] == [stopped_at + 1, stopped_at + 2], "the resumed run trains on from the saved step"


def test_sigterm_in_mode_explore_stops_cleanly(
    tmp_path: Path, tiny_model: Path, ray_tmp: Path, fault_ledger: FaultLedger
) -> None:
    fault_ledger.case("sigterm-explore")
    raw = job_config(
        tmp_path,
        tiny_model,
        **{
            "mode": "explore",
            "buffer.total_steps": 400,
            "buffer.explorer_input.eval_tasksets": [],
            "buffer.trainer_input.experience_buffer": {"name": "experience", "storage_type": "sql"},
            "cluster.gpu_per_node": 1,
            "synchronizer.verify_checksums": False,
            "monitor.plot": False,
        },
    )
    run_dir = tmp_path / "ckpt" / "e2e" / "run"

    def explored() -> bool:
        metrics = run_dir / "metrics.jsonl"
        return metrics.is_file() and any(
            json.loads(line)["phase"] == "explore" for line in metrics.read_text().splitlines() if line.endswith("}")
        )

    _terminate_when(write_config(tmp_path, raw), tmp_path / "run.log", ray_tmp, explored)
    assert (run_dir / "explore.lock").read_text() == "", "the stopped run let go of its folder"
