"""A full or read-only disk under a running `trinity run`: one line naming the errno, exit 2, older checkpoint intact.

How the disk fills, case by case:

* while a checkpoint is written: the fault-injecting writer (``tests/faults/injector``)
  makes the real ``write`` fail with a real ``OSError(ENOSPC)`` part-way into
  the shards of step 2, a moment a real filesystem cannot be made to choose;
* a real small filesystem: a tmpfs mounted under the run (as root), filled up
  between two runs; where mounting is not allowed, the injector fills it instead;
* ``metrics.jsonl``: the file is the kernel's ``/dev/full``, whose every write fails with ENOSPC;
* the SQLite buffer: SQLite's own page limit makes the real library report SQLITE_FULL;
* a read-only checkpoint folder: a real read-only bind mount (root) or a folder without write permission.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.test_run_both import job_config
from tests.faults.ledger import FaultLedger
from tests.faults.operator_view import armed, one_error_line, run, sft_config, write_config
from trinity.trainer.manifest import verify

NO_SPACE = "No space left on device"
RUN = Path("ckpt") / "faults" / "sft"


def _checkpoints(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").glob("step-*"))


@pytest.fixture(scope="module")
def one_step(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """A folder holding a finished run of one step with its checkpoint (copied by each case that needs one)."""
    import tempfile

    tmp = tmp_path_factory.mktemp("one-step")
    config = write_config(tmp, sft_config(tmp, tiny_model, **{"buffer.total_steps": 1}))
    with tempfile.TemporaryDirectory(prefix="trf-", dir="/tmp") as ray_tmp:
        code, output = run(config, tmp / "run.log", ray_tmp=Path(ray_tmp))
    assert code == 0, output[-3000:]
    assert _checkpoints(tmp / RUN) == ["step-1"]
    return tmp


def _first_step(one_step: Path, tmp_path: Path) -> Path:
    """Copy the finished one-step run into ``tmp_path``; return its run folder."""
    shutil.copytree(one_step / "ckpt", tmp_path / "ckpt", symlinks=True, dirs_exist_ok=True)  # sync folder: a link
    return tmp_path / RUN


def _second_step(tmp_path: Path, tiny_model: Path, ray_tmp: Path, env: dict[str, str] | None = None) -> str:
    """Run the same job on to step 2; assert it ends with exit 2; return its one error line."""
    config = write_config(tmp_path, sft_config(tmp_path, tiny_model, **{"buffer.total_steps": 2}))
    code, output = run(config, tmp_path / "run.log", ray_tmp=ray_tmp, env=env)
    line = one_error_line(output)
    assert code == 2, output[-3000:]
    return line


def test_disk_full_while_writing_a_checkpoint(
    tmp_path: Path, tiny_model: Path, ray_tmp: Path, fault_ledger: FaultLedger
) -> None:
    fault_ledger.case("enospc-checkpoint-write")
    run_dir = tmp_path / "ckpt" / "faults" / "sft"
    fill = armed({}, disk_full={"under": str(run_dir / "checkpoints"), "trigger": ".tmp-step-2", "after": 4096})
    config = write_config(tmp_path, sft_config(tmp_path, tiny_model))
    code, output = run(config, tmp_path / "run.log", ray_tmp=ray_tmp, env=fill)
    line = one_error_line(output)
    assert code == 2, output[-3000:]
    assert NO_SPACE in line and str(run_dir / "checkpoints") in line
    assert f"the latest complete checkpoint is still {run_dir / 'checkpoints' / 'step-1'}" in line
    assert _checkpoints(run_dir) == ["step-1"] and verify(run_dir / "checkpoints" / "step-1").status == "ok"


def test_a_small_filesystem_fills_up_before_the_next_checkpoint(  # noqa: PLR0917 - fixtures
    tmp_path: Path,
    tiny_model: Path,
    one_step: Path,
    ray_tmp: Path,
    fault_ledger: FaultLedger,
    small_filesystem: Callable[[Path, int], bool],
) -> None:
    fault_ledger.case("enospc-small-filesystem")
    real = small_filesystem(tmp_path / "ckpt", 64 << 20)
    run_dir = _first_step(one_step, tmp_path)
    env = None
    if real:  # leave less room than one checkpoint takes
        step_size = verify(run_dir / "checkpoints" / "step-1").size
        free = os.statvfs(tmp_path / "ckpt").f_bavail * os.statvfs(tmp_path / "ckpt").f_frsize
        with open(tmp_path / "ckpt" / "filler", "wb") as filler:
            filler.truncate(0)
            filler.write(b"\0" * max(0, free - step_size // 2))
    else:
        env = armed({}, disk_full={"under": str(tmp_path / "ckpt"), "trigger": ".tmp-step-2", "after": 0})
    line = _second_step(tmp_path, tiny_model, ray_tmp, env)
    assert NO_SPACE in line and "step-1" in line and "rerun the same command to resume" in line
    assert _checkpoints(run_dir) == ["step-1"] and verify(run_dir / "checkpoints" / "step-1").status == "ok"


def test_disk_full_while_appending_metrics(
    tmp_path: Path, tiny_model: Path, one_step: Path, ray_tmp: Path, fault_ledger: FaultLedger
) -> None:
    fault_ledger.case("enospc-metrics-jsonl")
    run_dir = _first_step(one_step, tmp_path)
    metrics = run_dir / "metrics.jsonl"
    metrics.unlink()
    metrics.symlink_to("/dev/full")
    line = _second_step(tmp_path, tiny_model, ray_tmp)
    assert line.startswith(f"trinity: error: cannot log metrics: {NO_SPACE} (errno ENOSPC) writing {metrics}; ")
    assert "rerun the same command to resume" in line
    assert _checkpoints(run_dir) == ["step-1"] and verify(run_dir / "checkpoints" / "step-1").status == "ok"


def test_a_read_only_checkpoint_folder(  # noqa: PLR0917 - fixtures
    tmp_path: Path,
    tiny_model: Path,
    one_step: Path,
    ray_tmp: Path,
    fault_ledger: FaultLedger,
    read_only: Callable[[Path], int],
) -> None:
    fault_ledger.case("read-only-checkpoint-folder")
    run_dir = _first_step(one_step, tmp_path)
    number = read_only(run_dir / "checkpoints")
    line = _second_step(tmp_path, tiny_model, ray_tmp)
    assert os.strerror(number) in line and "checkpoint_root_dir" in line, line
    assert f"the latest complete checkpoint is still {run_dir / 'checkpoints' / 'step-1'}" in line
    assert number in (errno.EROFS, errno.EACCES)
    assert _checkpoints(run_dir) == ["step-1"] and verify(run_dir / "checkpoints" / "step-1").status == "ok"


def test_disk_full_while_writing_the_sqlite_buffer(
    tmp_path: Path, tiny_model: Path, ray_tmp: Path, fault_ledger: FaultLedger
) -> None:
    fault_ledger.case("enospc-sqlite-buffer")
    raw = job_config(
        tmp_path,
        tiny_model,
        **{
            "mode": "explore",
            "buffer.total_steps": 50,
            "buffer.explorer_input.eval_tasksets": [],
            "buffer.trainer_input.experience_buffer": {"name": "experience", "storage_type": "sql"},
            "cluster.gpu_per_node": 1,
            "synchronizer.verify_checksums": False,
            "monitor.plot": False,
        },
    )
    env = armed({}, sqlite_full={"path": "experience.sqlite", "extra_pages": 4})
    code, output = run(write_config(tmp_path, raw), tmp_path / "run.log", ray_tmp=ray_tmp, env=env)
    line = one_error_line(output)
    assert code == 2, output[-3000:]
    database = tmp_path / "ckpt" / "e2e" / "run" / "buffer" / "experience.sqlite"
    assert f"{NO_SPACE} (errno ENOSPC) writing {database}" in line, line


def test_disk_full_while_exporting_the_final_hugging_face_model(  # noqa: PLR0917 - fixtures
    tmp_path: Path,
    tiny_model: Path,
    one_step: Path,
    ray_tmp: Path,
    fault_ledger: FaultLedger,
    small_filesystem: Callable[[Path, int], bool],
) -> None:
    """The checkpoint fits, its Hugging Face export (written by safetensors' Rust code) does not."""
    fault_ledger.case("enospc-hf-export")
    step_size = verify(one_step / RUN / "checkpoints" / "step-1").size
    run_dir = tmp_path / RUN
    if not small_filesystem(run_dir / "checkpoints", step_size + (256 << 10)):
        pytest.skip("a real small filesystem needs root (the export's writes are Rust's: no injector reaches them)")
    config = write_config(tmp_path, sft_config(tmp_path, tiny_model, **{
        "buffer.total_steps": 1, "trainer.save_hf_checkpoint": "last"}))
    code, output = run(config, tmp_path / "run.log", ray_tmp=ray_tmp)
    line = one_error_line(output)
    assert code == 2, output[-3000:]
    export = run_dir / "checkpoints" / "step-1" / "huggingface"
    assert line.startswith(f"trinity: error: cannot export the Hugging Face model to {export}: {NO_SPACE}"), line
    assert f"`trinity convert {run_dir / 'checkpoints' / 'step-1'} {export}`" in line
    assert verify(run_dir / "checkpoints" / "step-1").status == "ok" and not export.exists()
