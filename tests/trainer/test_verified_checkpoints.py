"""Checkpoints carry a manifest (size and checksum of every file); a damaged newest one is skipped on resume.

Real checkpoints of the tiny model (in-process trainer, and two FSDP2 ranks over
gloo) are damaged the four ways a crash or a bad copy leaves them: a truncated
shard, flipped bytes in a shard, a truncated ``.metadata``, a truncated state
file. The resume falls back to the previous step, ``trinity checkpoints
verify`` reports the damage, and ``trinity convert`` refuses it.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.trainer.support import make_experiences, make_trainer_plan
from trinity.cli.main import main, one_line
from trinity.errors import EXIT_USAGE
from trinity.trainer.checkpoint import STATE_FILE, CheckpointDir, CheckpointError, no_intact_checkpoint
from trinity.trainer.manifest import MANIFEST_FILE, STATE_MANIFEST_KEY, verify
from trinity.trainer.trainer import FSDPTrainer


def _shard(folder: Path) -> Path:
    return sorted((folder / "actor").glob("*.distcp"))[0]


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 8] = bytes(b ^ 0xFF for b in data[middle : middle + 8])
    path.write_bytes(bytes(data))  # same size: only the checksum can tell


DAMAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "truncated-shard": (lambda step: _truncate(_shard(step)), "bytes, expected"),
    "flipped-bytes": (lambda step: _flip(_shard(step)), "checksum mismatch"),
    "truncated-metadata": (lambda step: _truncate(step / "actor" / ".metadata"), "actor/.metadata: "),
    "truncated-state": (lambda step: _truncate(step / STATE_FILE), f"{STATE_FILE}: "),
}


@pytest.fixture(scope="module")
def two_checkpoints(tiny_path: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor]]:
    """A checkpoint folder with step-1 and step-2 of the tiny model, and the weights after step 1."""
    root = tmp_path_factory.mktemp("two")
    plan = make_trainer_plan(tiny_path, root, "sft", world_size=1, micro_batch_size=4)
    trainer = FSDPTrainer(plan, world_size=1, in_process=True, checkpoint_dir=root / "checkpoints")
    try:
        trainer.train_step(make_experiences(groups=1, group_size=3, seed=1))
        trainer.save_checkpoint({"marker": 1})
        weights = {k: v.clone() for k, v in trainer.full_state_dict().items()}
        trainer.train_step(make_experiences(groups=1, group_size=3, seed=2))
        trainer.save_checkpoint({"marker": 2})
    finally:
        trainer.shutdown()
    return root, weights


def _copy(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(source, target)
    return target / "checkpoints"


def _resume(tiny_path: Path, checkpoints: Path) -> tuple[dict[str, object] | None, dict[str, torch.Tensor]]:
    plan = make_trainer_plan(tiny_path, checkpoints.parent, "sft", world_size=1, micro_batch_size=4)
    trainer = FSDPTrainer(plan, world_size=1, in_process=True, checkpoint_dir=checkpoints)
    try:
        return trainer.resume(), trainer.full_state_dict()
    finally:
        trainer.shutdown()


def test_a_saved_checkpoint_lists_every_file_and_verifies(two_checkpoints: tuple[Path, object]) -> None:
    checkpoints = two_checkpoints[0] / "checkpoints"
    step = checkpoints / "step-2"
    manifest = json.loads((step / MANIFEST_FILE).read_text())
    on_disk = sorted(p.relative_to(step).as_posix() for p in step.rglob("*") if p.is_file())
    assert sorted(manifest["files"]) == [name for name in on_disk if name != MANIFEST_FILE]
    assert "actor/.metadata" in manifest["files"] and STATE_FILE in manifest["files"]
    assert json.loads((step / STATE_FILE).read_text())[STATE_MANIFEST_KEY] is True
    verdict = verify(step)
    assert verdict.status == "ok" and verdict.files == len(manifest["files"])
    assert verdict.size == sum(entry["size"] for entry in manifest["files"].values())


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_step(  # noqa: PLR0917 - fixtures
    damage: str,
    tiny_path: Path,
    two_checkpoints: tuple[Path, dict[str, torch.Tensor]],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source, weights = two_checkpoints
    checkpoints = _copy(source, tmp_path)
    harm, reason = DAMAGES[damage]
    harm(checkpoints / "step-2")

    assert main(["checkpoints", "verify", str(checkpoints.parent)]) == 1
    table = capsys.readouterr().out
    row = next(line for line in table.splitlines() if line.split()[:1] == ["2"])
    assert "damaged: " in row and reason in row
    assert "OK" in next(line for line in table.splitlines() if line.split()[:1] == ["1"])

    with caplog.at_level(logging.WARNING, logger="trinity.trainer.trainer"):
        resumed, restored = _resume(tiny_path, checkpoints)
    assert resumed is not None and resumed["step"] == 1 and resumed["extra"] == {"marker": 1}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and one_line(warnings[0]) == warnings[0]
    assert str(checkpoints / "step-2") in warnings[0] and reason in warnings[0] and "step-1" in warnings[0]
    for name, tensor in weights.items():
        assert torch.equal(restored[name], tensor), name

    out = tmp_path / "hf"
    assert main(["convert", str(checkpoints / "step-2"), str(out)]) != 0
    error = capsys.readouterr().err.strip().splitlines()[-1]  # earlier lines: the trainer's loading progress
    assert error.startswith("trinity: error: refusing to convert") and reason in error
    assert not out.exists()


def test_no_intact_checkpoint_ends_the_resume_with_exit_2(
    tiny_path: Path, two_checkpoints: tuple[Path, object], tmp_path: Path
) -> None:
    checkpoints = _copy(two_checkpoints[0], tmp_path)
    _flip(_shard(checkpoints / "step-1"))
    _truncate(checkpoints / "step-2" / STATE_FILE)
    with pytest.raises(CheckpointError) as caught:
        _resume(tiny_path, checkpoints)
    message = str(caught.value)
    assert caught.value.exit_code == EXIT_USAGE and one_line(message) == message
    assert "continue_from_checkpoint: false" in message and "step-1 damaged" in message
    assert "step-2 damaged" in message and "Traceback" not in message


def test_a_checkpoint_without_manifest_is_accepted_with_one_log_line(
    tiny_path: Path,
    two_checkpoints: tuple[Path, object],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    checkpoints = _copy(two_checkpoints[0], tmp_path)
    for step in ("step-1", "step-2"):  # as an older trinity wrote them
        (checkpoints / step / MANIFEST_FILE).unlink()
        state = json.loads((checkpoints / step / STATE_FILE).read_text())
        del state[STATE_MANIFEST_KEY]
        (checkpoints / step / STATE_FILE).write_text(json.dumps(state))
    with caplog.at_level(logging.WARNING, logger="trinity.trainer.trainer"):
        resumed, _ = _resume(tiny_path, checkpoints)
    assert resumed is not None and resumed["step"] == 2
    lines = [r.getMessage() for r in caplog.records if "no manifest" in r.getMessage()]
    assert len(lines) == 1 and "step-2" in lines[0]
    assert main(["checkpoints", "verify", str(checkpoints)]) == 0
    assert "OK (no manifest" in capsys.readouterr().out


def test_a_missing_manifest_of_a_new_checkpoint_is_incomplete(
    two_checkpoints: tuple[Path, object], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoints = _copy(two_checkpoints[0], tmp_path)
    (checkpoints / "step-2" / MANIFEST_FILE).unlink()
    (checkpoints / ".tmp-step-3").mkdir()
    assert main(["checkpoints", "verify", str(checkpoints), "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    states = {(row["step"], row["status"]) for row in document["checkpoints"]}
    assert states == {(3, "incomplete"), (2, "incomplete"), (1, "ok")}
    assert document["newest_intact"] is False
    chosen, rejected = CheckpointDir(checkpoints).newest_intact()
    assert chosen is not None and chosen.path.name == "step-1" and [v.path.name for v in rejected] == ["step-2"]


def test_verify_of_a_missing_folder_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoints", "verify", str(tmp_path / "nowhere")]) == EXIT_USAGE
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["checkpoints", "verify", str(tmp_path / "file")]) == EXIT_USAGE
    assert "file: not a folder; pass a run folder" in capsys.readouterr().err


@pytest.mark.usefixtures("ray_local")
def test_two_ranks_write_one_manifest_covering_both_ranks_shards(tiny_path: Path, tmp_path: Path) -> None:
    plan = make_trainer_plan(tiny_path, tmp_path, "sft", world_size=2, micro_batch_size=2)
    trainer = FSDPTrainer(plan, world_size=2, checkpoint_dir=tmp_path / "checkpoints")
    try:
        trainer.train_step(make_experiences(groups=1, group_size=4, seed=5))
        saved = Path(trainer.save_checkpoint())
    finally:
        trainer.shutdown()
    files = json.loads((saved / MANIFEST_FILE).read_text())["files"]
    shards = sorted(name for name in files if name.startswith("actor/") and name.endswith(".distcp"))
    assert shards == sorted(p.relative_to(saved).as_posix() for p in (saved / "actor").glob("*.distcp"))
    assert len(shards) == 2  # one per rank
    assert verify(saved).status == "ok"


def test_the_no_intact_message_names_at_most_three_checkpoints(tmp_path: Path) -> None:
    for step in range(1, 6):
        (tmp_path / f"step-{step}").mkdir()  # no state file: incomplete
    chosen, rejected = CheckpointDir(tmp_path).newest_intact()
    assert chosen is None and [v.path.name for v in rejected] == [f"step-{s}" for s in range(5, 0, -1)]
    message = str(no_intact_checkpoint(tmp_path, rejected))
    assert "step-5 incomplete: trainer_state.json: missing" in message and "step-3" in message
    assert "step-2" not in message and "2 older ones too" in message


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_callers_that_need_a_usable_checkpoint_skip_a_damaged_one_with_the_resume_warning(
    two_checkpoints: tuple[Path, object],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    damage: str,
) -> None:
    from trinity.trainer.checkpoint import resolve_checkpoint, room_problem

    checkpoints = _copy(two_checkpoints[0], tmp_path)
    damage_fn, reason = DAMAGES[damage]
    damage_fn(checkpoints / "step-2")
    directory = CheckpointDir(checkpoints)
    with caplog.at_level(logging.WARNING):
        assert directory.usable_latest() == checkpoints / "step-1"
        assert resolve_checkpoint(checkpoints) == checkpoints / "step-1"
        assert directory.intact_steps() == [1]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 3 and all(w.startswith(f"checkpoint {checkpoints / 'step-2'} is ") for w in warnings)
    assert all(reason in w for w in warnings)
    assert warnings[0].endswith("; falling back to step-1") and warnings[2].endswith("; skipping it")
    assert room_problem(checkpoints) is None

    assert main(["convert", str(checkpoints), str(tmp_path / "hf")]) == 0, capsys.readouterr().err
    assert (tmp_path / "hf" / "config.json").is_file()


def test_the_free_space_check_measures_the_newest_whole_checkpoint(
    two_checkpoints: tuple[Path, object],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from collections import namedtuple

    from trinity.trainer import checkpoint as checkpoint_module

    checkpoints = _copy(two_checkpoints[0], tmp_path)
    whole = verify(checkpoints / "step-1").size
    _truncate(_shard(checkpoints / "step-2"))  # a truncated newest one would understate what a save needs
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(checkpoint_module.shutil, "disk_usage", lambda _: usage(0, 0, whole - 1))
    problem = checkpoint_module.room_problem(checkpoints)
    assert problem is not None and "(the size of step-1)" in problem
