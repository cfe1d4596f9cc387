"""End to end: the newest checkpoint of a finished `trinity run` is damaged (flipped bytes in a shard); the
same command with more steps warns in one line, resumes from the step before and trains on from there.
With every checkpoint damaged, the command ends with one line and exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_run_both import job_config, records, run_cli
from tests.faults.ledger import FaultLedger
from trinity.cli.main import main
from trinity.trainer.manifest import verify


def _config(tmp_path: Path, model: Path, steps: int) -> Path:
    raw = job_config(
        tmp_path,
        model,
        **{
            "buffer.total_steps": steps,
            "trainer.save_interval": 1,
            "cluster.gpu_per_node": 2,
            "synchronizer.verify_checksums": False,
            "buffer.explorer_input.eval_tasksets": [],
        },
    )
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_run_resumes_from_the_newest_intact_checkpoint(
    tmp_path: Path, tiny_model: Path, capsys: pytest.CaptureFixture[str], fault_ledger: FaultLedger
) -> None:
    fault_ledger.case("damaged-newest-both-mode")
    run_dir = tmp_path / "ckpt" / "e2e" / "run"
    log = tmp_path / "run.log"
    assert run_cli(_config(tmp_path, tiny_model, 2), log).wait(300) == 0, log.read_text()[-3000:]
    newest = run_dir / "checkpoints" / "step-2"
    shard = sorted((newest / "actor").glob("*.distcp"))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    assert main(["checkpoints", "verify", str(run_dir)]) == 1
    assert "damaged: actor/" in capsys.readouterr().out

    first_log = log.read_text()
    before = len(records(run_dir))
    assert run_cli(_config(tmp_path, tiny_model, 3), log).wait(300) == 0, log.read_text()[-3000:]
    second_log = log.read_text()[len(first_log) :]
    warned = [line for line in second_log.splitlines() if "falling back" in line]
    assert len(warned) == 1 and str(newest) in warned[0] and "checksum mismatch" in warned[0]
    assert "step-1" in warned[0] and "Traceback" not in second_log
    trained = [r["step"] for r in records(run_dir)[before:] if r["phase"] == "train"]
    assert trained == [2, 3], "the resumed run trains again from the step after the intact checkpoint"
    assert verify(newest).status == "ok", "step 2 is saved anew over the damaged one"
    state = json.loads((run_dir / "checkpoints" / "step-3" / "trainer_state.json").read_text())
    assert state["step"] == 3
    assert main(["checkpoints", "verify", str(run_dir)]) == 0

    for state_file in (run_dir / "checkpoints").glob("step-*/trainer_state.json"):
        state_file.write_text(state_file.read_text()[:40])  # every checkpoint damaged: nothing to resume from
    third = run_cli(_config(tmp_path, tiny_model, 4), log)
    assert third.wait(300) == 2, log.read_text()[-3000:]
    errors = [line for line in log.read_text().splitlines() if line.startswith("trinity: error:")]
    assert errors[-1].startswith(f"trinity: error: no intact checkpoint in {run_dir / 'checkpoints'} (")
    assert "continue_from_checkpoint: false" in errors[-1]
