"""Mode bench on a run folder whose train job is still running and whose newest checkpoint is damaged.

The bench job takes only its own role in the folder, so it is not refused
beside the train job; it evaluates the starting model and every intact
checkpoint, and skips the damaged one with a one-line warning instead of
stopping at it. A second bench job on the same folder is refused at once.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

from tests.e2e.test_run_both import job_config
from tests.faults.ledger import FaultLedger
from tests.faults.operator_view import finish, one_error_line, run, sft_config, start, train_steps, write_config
from tests.trainer.test_verified_checkpoints import DAMAGES


def _holder(lock: Path) -> int | None:
    try:
        return int(json.loads(lock.read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def test_bench_evaluates_the_intact_checkpoints_beside_a_running_train_job(
    tmp_path: Path, tiny_model: Path, fault_ledger: FaultLedger, ray_tmp_factory: Callable[[], Path]
) -> None:
    fault_ledger.case("bench-beside-train-damaged-checkpoint")
    run_dir = tmp_path / "ckpt" / "e2e" / "run"
    ray_train, ray_bench = ray_tmp_factory(), ray_tmp_factory()  # each job starts its own local Ray cluster
    names = {"project": "e2e", "name": "run"}
    first = write_config(tmp_path, sft_config(tmp_path, tiny_model, **names), "first.yaml")
    code, output = run(first, tmp_path / "first.log", ray_tmp=ray_train)
    assert code == 0, output[-3000:]
    damaged = run_dir / "checkpoints" / "step-2"
    DAMAGES["flipped-bytes"][0](damaged)

    long_train = write_config(
        tmp_path,
        sft_config(
            tmp_path,
            tiny_model,
            **names,
            **{"buffer.total_steps": 100_000, "buffer.total_epochs": 10_000, "trainer.save_interval": 0},
        ),
        "train.yaml",
    )
    train_log = tmp_path / "train.log"
    trainer = start(long_train, train_log, ray_tmp=ray_train)
    try:
        deadline = time.monotonic() + 240
        while (
            time.monotonic() < deadline
            and trainer.poll() is None
            and not (_holder(run_dir / "train.lock") == trainer.pid and train_steps(run_dir)[-1] >= 3)
        ):
            time.sleep(0.1)
        assert trainer.poll() is None, train_log.read_text()[-3000:]

        bench_raw = job_config(
            tmp_path, tiny_model, **{"mode": "bench", "cluster.gpu_per_node": 1, "monitor.plot": False}
        )
        bench = write_config(tmp_path, bench_raw, "bench.yaml")
        bench_log = tmp_path / "bench.log"
        bench_job = start(bench, bench_log, ray_tmp=ray_bench)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and bench_job.poll() is None and _holder(run_dir / "bench.lock") is None:
            time.sleep(0.05)
        code, output = run(bench, tmp_path / "bench2.log", ray_tmp=ray_tmp_factory(), timeout=60)
        assert code == 2 and "its bench role is held by another trinity run" in one_error_line(output), output

        code, output = finish(bench_job, bench_log)
        assert code == 0, output[-3000:]
        assert "Traceback" not in output and "trinity: error:" not in output
        skipped = [line for line in output.splitlines() if "skipping it" in line]
        assert len(skipped) == 1 and skipped[0].startswith(f"trinity: warning: checkpoint {damaged} is damaged: ")
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
        evaluated = [row["step"] for row in rows if row["phase"] == "eval" and "bench/model_version" in row["metrics"]]
        assert evaluated == [0, 1], "the start and the intact checkpoint are evaluated, the damaged one skipped"
        assert trainer.poll() is None, "the train job runs on beside the bench job"
        assert json.loads((run_dir / "bench" / "device.json").read_text())["backend"] == "cpu"
    finally:
        if trainer.poll() is None:
            trainer.send_signal(signal.SIGTERM)
        code, _ = finish(trainer, train_log, timeout=120)
    assert code == 143
