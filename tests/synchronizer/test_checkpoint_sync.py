"""The checkpoint sync method: atomic safetensors on a shared path."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from trinity.synchronizer.checkpoint_sync import (
    CheckpointSyncError,
    load_weights,
    read_version,
    save_weights,
)


def weights(value: float) -> dict[str, torch.Tensor]:
    return {"layer.weight": torch.full((64, 32), value), "layer.bias": torch.full((32,), -value).to(torch.bfloat16)}


def versioned_folders(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}.v"))


def test_save_then_load_round_trip_and_version(tmp_path: Path) -> None:
    folder = tmp_path / "sync"
    save_weights(weights(1.0), folder, 1)
    state, version = load_weights(folder)
    assert version == 1 and read_version(folder) == 1
    assert torch.equal(state["layer.weight"], weights(1.0)["layer.weight"])
    assert state["layer.bias"].dtype == torch.bfloat16
    assert folder.is_symlink() and (folder / "model.safetensors").is_file() and (folder / "version").is_file()


def test_newer_versions_replace_older_and_only_two_are_kept(tmp_path: Path) -> None:
    folder = tmp_path / "sync"
    for version in range(1, 5):
        save_weights(weights(float(version)), folder, version)
    state, version = load_weights(folder)
    assert version == 4 and float(state["layer.weight"][0, 0]) == 4.0
    kept = versioned_folders(tmp_path, "sync")
    assert len(kept) == 2 and kept[0].startswith(".sync.v3-") and kept[1].startswith(".sync.v4-")
    save_weights(weights(9.0), folder, 4)  # the same version again (e.g. after a resume) is fine
    assert float(load_weights(folder)[0]["layer.weight"][0, 0]) == 9.0


def test_an_exception_mid_write_leaves_the_previous_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "sync"
    save_weights(weights(1.0), folder, 1)
    import safetensors.torch

    def broken(tensors: dict[str, torch.Tensor], filename: str, metadata: dict[str, str] | None = None) -> None:
        Path(filename).write_bytes(b"\x00" * 100)  # a torn file
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", broken)
    with pytest.raises(OSError, match="disk full"):
        save_weights(weights(2.0), folder, 2)
    state, version = load_weights(folder)
    assert version == 1 and float(state["layer.weight"][0, 0]) == 1.0
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_a_process_killed_mid_write_leaves_the_previous_weights(tmp_path: Path) -> None:
    folder = tmp_path / "sync"
    save_weights(weights(1.0), folder, 1)
    script = textwrap.dedent(
        f"""
        import os, torch, safetensors.torch
        from pathlib import Path
        from trinity.synchronizer import checkpoint_sync

        def die_halfway(tensors, filename, metadata=None):
            Path(filename).write_bytes(b"partial" * 1000)
            os._exit(9)  # killed: no clean-up, no exception handling

        safetensors.torch.save_file = die_halfway
        checkpoint_sync.save_weights({{"layer.weight": torch.zeros(64, 32)}}, {str(folder)!r}, 2)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[2], timeout=60, check=False)
    assert done.returncode == 9
    assert [p for p in tmp_path.iterdir() if ".tmp-" in p.name], "the crashed writer left its staging folder"
    state, version = load_weights(folder)
    assert version == 1 and float(state["layer.weight"][0, 0]) == 1.0
    save_weights(weights(3.0), folder, 3)  # the next writer cleans up after the crashed one
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    assert load_weights(folder)[1] == 3


def test_tied_tensors_are_written(tmp_path: Path) -> None:
    shared = torch.randn(10, 4)
    save_weights({"embed": shared, "lm_head": shared}, tmp_path / "sync", 1)
    state, _ = load_weights(tmp_path / "sync")
    assert torch.equal(state["embed"], state["lm_head"])


def test_foreign_folder_and_missing_weights_are_clear_errors(tmp_path: Path) -> None:
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(CheckpointSyncError, match="was not written by the checkpoint sync method"):
        save_weights(weights(1.0), foreign, 1)
    with pytest.raises(CheckpointSyncError, match="no synced weights"):
        load_weights(tmp_path / "nothing")
    assert read_version(tmp_path / "nothing") is None
    empty = tmp_path / "empty"
    empty.mkdir()
    save_weights(weights(1.0), empty, 5)  # an empty folder is taken over
    assert load_weights(empty)[1] == 5 and os.path.islink(empty)
