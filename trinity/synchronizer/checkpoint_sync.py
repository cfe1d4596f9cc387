"""The checkpoint sync method: the trainer writes safetensors to a shared path, engines load them.

``folder`` is a stable path that always names a complete set of weights:
it is a symbolic link to a versioned sibling folder (``.<name>.v<version>-<id>``)
holding ``model.safetensors`` and ``version``. :func:`save_weights` writes
a new versioned folder beside it (temporary name, files fsynced, renamed),
then swaps the link atomically (``os.replace`` of a new link). A crash at any
moment leaves ``folder`` pointing at the previous, complete weights; a reader
resolves the link once, so it never mixes two versions. The two newest
versioned folders are kept (an engine may still be reading the previous one).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

import torch

from trinity.utils.fs import fsync_dir as _fsync_dir
from trinity.utils.fs import fsync_file as _fsync_file

WEIGHTS_FILE = "model.safetensors"
VERSION_FILE = "version"
#: Versioned folders kept besides the one ``folder`` names.
KEEP_PREVIOUS = 1



class CheckpointSyncError(RuntimeError):
    """Weights could not be written or read at the sync path."""


def _unshared(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Return CPU, contiguous tensors; tensors sharing storage with an earlier one are copied (safetensors refuses
    shared storage, e.g. tied embeddings of an in-process model)."""
    seen: set[tuple[int, int]] = set()
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state_dict.items():
        value = tensor.detach().to("cpu").contiguous()
        key = (value.untyped_storage().data_ptr(), int(value.storage_offset())) if value.numel() else (0, id(value))
        if value.numel() and key in seen:
            value = value.clone()
        seen.add(key)
        out[name] = value
    return out


def _versioned_name(folder: Path, version: int) -> str:
    return f".{folder.name}.v{version}"


def save_weights(state_dict: Mapping[str, torch.Tensor], folder: str | Path, version: int) -> Path:
    """Write ``state_dict`` as ``model.safetensors`` plus a ``version`` file, and make ``folder`` name them atomically.

    Returns the versioned folder written. Raises :class:`CheckpointSyncError`
    when ``folder`` exists as something other than a link made here (or an empty folder).
    """
    from safetensors.torch import save_file

    target = Path(folder)
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    if target.exists() and not target.is_symlink():
        if target.is_dir() and not any(target.iterdir()):
            target.rmdir()
        else:
            raise CheckpointSyncError(
                f"sync path {target} exists and was not written by the checkpoint sync method; remove it or choose "
                "another synchronizer path"
            )
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=parent))
    try:
        save_file(_unshared(state_dict), str(staging / WEIGHTS_FILE), metadata={"version": str(version)})
        (staging / VERSION_FILE).write_text(f"{version}\n", encoding="utf-8")
        for name in (WEIGHTS_FILE, VERSION_FILE):
            _fsync_file(staging / name)
        _fsync_dir(staging)
        # A unique versioned name: saving one version twice never touches the folder the link names.
        versioned = parent / f".{target.name}.v{version}-{staging.name.rsplit('-', 1)[-1]}"
        os.rename(staging, versioned)
        _fsync_dir(parent)
        _swap_link(target, versioned.name)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    _prune(target)
    return versioned


def _swap_link(target: Path, destination: str) -> None:
    link = target.parent / f".{target.name}.link-{os.getpid()}"
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(destination, link)
    os.replace(link, target)
    _fsync_dir(target.parent)


_VERSIONED = re.compile(r"^\.(?P<name>.+)\.v(?P<version>\d+)-[^.]+$")


def _prune(target: Path) -> None:
    current = Path(os.readlink(target)).name if target.is_symlink() else ""
    versions: list[tuple[int, int, Path]] = []
    for entry in target.parent.iterdir():
        match = _VERSIONED.match(entry.name)
        if entry.name.startswith(f".{target.name}.tmp-") and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)  # left by a writer that crashed (there is one writer)
            continue
        if match and match.group("name") == target.name and entry.name != current:
            versions.append((int(match.group("version")), entry.stat().st_mtime_ns, entry))
    versions.sort()
    for _version, _mtime, entry in versions[: max(0, len(versions) - KEEP_PREVIOUS)]:
        shutil.rmtree(entry, ignore_errors=True)


def load_weights(folder: str | Path, device: torch.device | str = "cpu") -> tuple[dict[str, torch.Tensor], int]:
    """Return ``(state_dict, version)`` of the weights ``folder`` names (resolved once, so never mixed).

    Raises :class:`CheckpointSyncError` when no complete weights are there.
    """
    from safetensors.torch import load_file

    resolved = Path(folder).resolve()
    weights = resolved / WEIGHTS_FILE
    version_file = resolved / VERSION_FILE
    if not weights.is_file() or not version_file.is_file():
        raise CheckpointSyncError(f"no synced weights at {folder} (expected {WEIGHTS_FILE} and {VERSION_FILE})")
    try:
        version = int(version_file.read_text(encoding="utf-8").strip())
        state = load_file(str(weights), device=str(device))
    except (OSError, ValueError) as exc:
        raise CheckpointSyncError(f"cannot read the synced weights at {resolved}: {exc}") from exc
    return state, version


def read_version(folder: str | Path) -> int | None:
    """Return the version of the weights ``folder`` names, or None when there are none."""
    try:
        return int((Path(folder).resolve() / VERSION_FILE).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None
