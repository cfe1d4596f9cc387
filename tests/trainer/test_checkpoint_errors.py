"""Checkpoints that cannot be written (a full filesystem) or read (a damaged shard) end in one clear error.

The full filesystem is real when the test may mount one (a 64 MiB tmpfs, as
root). Otherwise files opened for writing under the folder are opened on
``/dev/full`` instead, whose writes the kernel fails with ``ENOSPC``.
"""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.support import make_experiences, make_trainer_plan
from trinity.cli.main import one_line
from trinity.errors import EXIT_USAGE, carried_error
from trinity.trainer.checkpoint import STATE_FILE, CheckpointDir, CheckpointError, CheckpointWriteError
from trinity.trainer.manifest import MANIFEST_FILE, STATE_MANIFEST_KEY
from trinity.trainer.trainer import FSDPTrainer


def _mount_tmpfs(folder: Path) -> bool:
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(folder)],
                          capture_output=True, check=False)
    return done.returncode == 0


def _fill(folder: Path) -> None:
    """Write into ``folder`` until the filesystem refuses (ENOSPC)."""
    with open(folder / "filler", "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * (1 << 20))
                handle.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


@pytest.fixture
def small_filesystem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Yield ``(folder, fill)``: a folder on a small filesystem, and a call that leaves it without free space."""
    folder = tmp_path / "fs"
    folder.mkdir()
    if _mount_tmpfs(folder):
        try:
            yield folder, lambda: _fill(folder)
        finally:
            subprocess.run(["umount", "-l", str(folder)], check=False)
        return
    real_open = builtins.open

    def open_full(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, os.PathLike)) and str(file).startswith(str(folder)) and set(mode) & set("wax+"):
            return real_open("/dev/full", mode.replace("x", "w"), *args, **kwargs)
        return real_open(file, mode, *args, **kwargs)

    def fill() -> None:
        monkeypatch.setattr(builtins, "open", open_full)
        monkeypatch.setattr(io, "open", open_full)

    yield folder, fill


def test_a_save_on_a_full_disk_names_it_and_keeps_the_older_checkpoint(
        tiny_path: Path, small_filesystem: Any) -> None:
    folder, fill = small_filesystem
    plan = make_trainer_plan(tiny_path, folder, "sft", world_size=1, micro_batch_size=4)
    trainer = FSDPTrainer(plan, world_size=1, in_process=True, checkpoint_dir=folder / "checkpoints")
    try:
        data = make_experiences(groups=1, group_size=3, seed=3)
        trainer.train_step(data)
        first = Path(trainer.save_checkpoint())
        state = (first / STATE_FILE).read_text(encoding="utf-8")
        fill()
        trainer.train_step(data)
        with pytest.raises(CheckpointWriteError) as caught:
            trainer.save_checkpoint()
    finally:
        trainer.shutdown()
    message = str(caught.value)
    assert "No space left on device" in message and str(folder / "checkpoints") in message
    assert f"the latest complete checkpoint is still {first}" in message
    assert one_line(message) == message and caught.value.exit_code == EXIT_USAGE
    assert CheckpointDir(folder / "checkpoints").latest() == first
    assert (first / STATE_FILE).read_text(encoding="utf-8") == state


def test_a_save_into_a_folder_it_may_not_write_names_the_permission(
        tiny_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root writes anywhere, so the refusal is injected: files opened for writing there raise EACCES."""
    folder = tmp_path / "checkpoints"
    plan = make_trainer_plan(tiny_path, tmp_path, "sft", world_size=1, micro_batch_size=4)
    trainer = FSDPTrainer(plan, world_size=1, in_process=True, checkpoint_dir=folder)
    real_open = builtins.open

    def refusing_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, os.PathLike)) and str(file).startswith(str(folder)) and set(mode) & set("wax+"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
        return real_open(file, mode, *args, **kwargs)

    try:
        trainer.train_step(make_experiences(groups=1, group_size=3, seed=5))
        monkeypatch.setattr(builtins, "open", refusing_open)
        monkeypatch.setattr(io, "open", refusing_open)
        with pytest.raises(CheckpointWriteError) as caught:
            trainer.save_checkpoint()
    finally:
        monkeypatch.undo()
        trainer.shutdown()
    message = str(caught.value)
    assert "Permission denied" in message and str(folder) in message and "no checkpoint was saved" in message
    assert one_line(message) == message and caught.value.exit_code == EXIT_USAGE


def test_a_save_without_room_for_another_checkpoint_fails_before_writing(
        tiny_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The free space is faked (a real small filesystem needs root): 1 KiB, less than the first checkpoint."""
    import shutil

    folder = tmp_path / "checkpoints"
    plan = make_trainer_plan(tiny_path, tmp_path, "sft", world_size=1, micro_batch_size=4)
    trainer = FSDPTrainer(plan, world_size=1, in_process=True, checkpoint_dir=folder)
    try:
        data = make_experiences(groups=1, group_size=3, seed=6)
        trainer.train_step(data)
        first = Path(trainer.save_checkpoint())
        usage = shutil.disk_usage(folder)
        monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=1024))
        trainer.train_step(data)
        with pytest.raises(CheckpointWriteError) as caught:
            trainer.save_checkpoint()
    finally:
        monkeypatch.undo()
        trainer.shutdown()
    message = str(caught.value)
    assert "No space left on device" in message and "nothing was written" in message
    assert f"the latest complete checkpoint is still {first}" in message and one_line(message) == message
    assert sorted(entry.name for entry in folder.iterdir()) == ["latest", first.name]


def test_a_damaged_checkpoint_without_manifest_fails_the_resume_with_one_line(
        tiny_path: Path, tmp_path: Path) -> None:
    plan = make_trainer_plan(tiny_path, tmp_path, "sft", world_size=1, micro_batch_size=4)
    trainer = FSDPTrainer(plan, world_size=1, in_process=True)
    try:
        trainer.train_step(make_experiences(groups=1, group_size=3, seed=4))
        saved = Path(trainer.save_checkpoint())
    finally:
        trainer.shutdown()
    for shard in (saved / "actor").glob("*.distcp"):
        shard.write_bytes(shard.read_bytes()[:100])  # truncated, as a crashed copy leaves it
    # without its manifest (as an older trinity wrote it) the damage shows only when the shard is read
    (saved / MANIFEST_FILE).unlink()
    state = json.loads((saved / STATE_FILE).read_text(encoding="utf-8"))
    del state[STATE_MANIFEST_KEY]
    (saved / STATE_FILE).write_text(json.dumps(state), encoding="utf-8")
    again = FSDPTrainer(plan, world_size=1, in_process=True)
    try:
        with pytest.raises(CheckpointError) as caught:
            again.resume()
    finally:
        again.shutdown()
    message = str(caught.value)
    assert message.startswith(f"cannot resume from {saved}: ") and one_line(message) == message
    assert f"delete {saved} to resume from the one before it" in message
    assert "Traceback" not in message


def test_an_error_from_a_ray_actor_reaches_the_cli_as_its_own_message() -> None:
    from ray.exceptions import RayTaskError

    error = CheckpointWriteError("cannot save the checkpoint of step 2 in /x: No space left on device")
    wrapped = RayTaskError("save_checkpoint", "Traceback (most recent call last): ...", error).as_instanceof_cause()
    assert isinstance(wrapped, CheckpointWriteError) and str(wrapped) != str(error)
    assert carried_error(wrapped) is error
