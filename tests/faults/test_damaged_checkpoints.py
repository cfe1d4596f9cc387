"""The newest checkpoint is damaged (each kind of damage in turn): the same `trinity run` resumes from the older
intact one with a one-line warning; with every checkpoint damaged it ends with one line and exit status 2.

The run is a mode ``train`` SFT job on the tiny model (one trainer rank, real Ray, real DCP checkpoints).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.faults.ledger import FaultLedger
from tests.faults.operator_view import one_error_line, run, sft_config, train_steps, write_config
from tests.trainer.test_verified_checkpoints import DAMAGES
from trinity.trainer.manifest import verify

RUN = Path("ckpt") / "faults" / "sft"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """A folder holding a finished run of two steps, checkpointed after each."""
    import tempfile

    tmp = tmp_path_factory.mktemp("trained")
    with tempfile.TemporaryDirectory(prefix="trf-", dir="/tmp") as ray_tmp:
        code, output = run(write_config(tmp, sft_config(tmp, tiny_model)), tmp / "run.log", ray_tmp=Path(ray_tmp))
    assert code == 0, output[-3000:]
    assert [p.name for p in sorted((tmp / RUN / "checkpoints").glob("step-*"))] == ["step-1", "step-2"]
    return tmp


def _copy(trained: Path, tmp_path: Path, tiny_model: Path, steps: int) -> tuple[Path, Path]:
    """Copy the finished run into ``tmp_path``; return its run folder and the config of a run of ``steps`` steps."""
    shutil.copytree(trained / "ckpt", tmp_path / "ckpt", symlinks=True)  # the sync folder is a relative link
    config = write_config(tmp_path, sft_config(tmp_path, tiny_model, **{"buffer.total_steps": steps}))
    return tmp_path / RUN, config


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_newest_checkpoint_falls_back_to_the_older_intact_one(  # noqa: PLR0917 - fixtures
    damage: str, trained: Path, tiny_model: Path, tmp_path: Path, ray_tmp: Path, fault_ledger: FaultLedger
) -> None:
    fault_ledger.case(f"damaged-newest-{damage}")
    run_dir, config = _copy(trained, tmp_path, tiny_model, steps=3)
    newest = run_dir / "checkpoints" / "step-2"
    damage_fn, reason = DAMAGES[damage]
    damage_fn(newest)
    before = train_steps(run_dir)

    code, output = run(config, tmp_path / "run.log", ray_tmp=ray_tmp)
    assert code == 0, output[-3000:]
    assert "Traceback" not in output and "trinity: error:" not in output
    warned = [line for line in output.splitlines() if "falling back" in line]
    assert len(warned) == 1 and warned[0].startswith(f"trinity: warning: checkpoint {newest} is "), output[-3000:]
    assert reason in warned[0] and warned[0].endswith("; falling back to step-1")
    assert train_steps(run_dir)[len(before) :] == [2, 3], "the run trains again from the step after step-1"
    for step in (1, 2, 3):
        assert verify(run_dir / "checkpoints" / f"step-{step}").status == "ok"


def test_every_checkpoint_damaged_is_one_line_and_exit_2(
    trained: Path, tiny_model: Path, tmp_path: Path, ray_tmp: Path, fault_ledger: FaultLedger
) -> None:
    fault_ledger.case("damaged-all")
    run_dir, config = _copy(trained, tmp_path, tiny_model, steps=3)
    for step, damage in ((1, "flipped-bytes"), (2, "truncated-state")):
        DAMAGES[damage][0](run_dir / "checkpoints" / f"step-{step}")
    code, output = run(config, tmp_path / "run.log", ray_tmp=ray_tmp)
    line = one_error_line(output)
    assert code == 2, output[-3000:]
    assert line.startswith(f"trinity: error: no intact checkpoint in {run_dir / 'checkpoints'} (step-2 damaged: ")
    assert "step-1 damaged: " in line and "continue_from_checkpoint: false" in line
