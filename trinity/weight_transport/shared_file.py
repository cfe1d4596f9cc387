"""Weights in one memory-mapped file that two processes of one host map: mode colocate's handover on the CPU.

Trainer rank 0 creates the file (:meth:`SharedWeights.create`) and writes each
new version into it under an exclusive ``flock``; the engine maps the same
file (:meth:`SharedWeights.attach`) and points its parameters at the file's
tensors, so a new version reaches it without a copy or a message. The
engine reads under a shared ``flock``, so a version is never written while a
forward pass reads the weights. The file's first bytes hold the version:
the engine looks at it when it next takes its model, not when told.

Layout: a 64-byte header (the version, an int64 at byte 0), then each tensor
of the :class:`~trinity.weight_transport.protocol.TensorMeta` list in order,
each starting on a 64-byte boundary.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import cast

import torch

from trinity.weight_transport.buckets import dtype_from_name, state_dict_metas
from trinity.weight_transport.protocol import TensorMeta, WeightSyncError

HEADER_BYTES = 64
ALIGN = 64
#: Where the file goes: memory, not disk (Linux's tmpfs), else the temporary folder.
SHM_DIR = Path("/dev/shm")


def shared_file_path(name: str) -> Path:
    """Return the shared file's path for a run named ``name`` (characters other than letters and digits become -)."""
    safe = "".join(c if c.isalnum() else "-" for c in name).strip("-") or "run"
    folder = SHM_DIR if SHM_DIR.is_dir() else Path(os.environ.get("TMPDIR", "/tmp"))
    return folder / f"trinity-weights-{safe}"


def free_bytes(folder: Path) -> int:
    """Return the bytes an unprivileged writer may still use in ``folder``'s file system."""
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize


def room_for(path: Path, nbytes: int) -> Path:
    """Return ``path``, or the same name in the temporary folder when ``path``'s folder has no room for ``nbytes``.

    A container's ``/dev/shm`` is often 64 MB; a file mapped past its room
    kills the writer with SIGBUS instead of raising, so room is checked first.
    Raises WeightSyncError when neither folder has room.
    """
    candidates = [path, Path(os.environ.get("TMPDIR", "/tmp")) / path.name]
    seen = []
    for candidate in candidates:
        try:
            free = free_bytes(candidate.parent) + (candidate.stat().st_size if candidate.exists() else 0)
        except OSError:
            continue
        seen.append(f"{candidate.parent} has {free / 2**20:.0f} MB free")
        if free >= nbytes + (16 << 20):  # and some room left for everything else there
            return candidate
    raise WeightSyncError(
        f"no room for the {nbytes / 2**20:.0f} MB shared weights file of mode colocate: {'; '.join(seen)}; enlarge "
        "/dev/shm (docker run --shm-size) or free space, or set synchronizer.sync_method: checkpoint"
    )


def layout(metas: Sequence[TensorMeta]) -> tuple[list[int], int]:
    """Return each tensor's byte offset in the file and the file's size."""
    offsets = []
    position = HEADER_BYTES
    for meta in metas:
        offsets.append(position)
        size = torch.Size(meta.shape).numel() * dtype_from_name(meta.dtype).itemsize
        position += -(-size // ALIGN) * ALIGN
    return offsets, position


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Return the strides of a contiguous tensor of ``shape``."""
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(strides))


class SharedWeights:
    """The mapped file and a tensor view of each weight in it."""

    def __init__(self, path: str | Path, metas: Sequence[TensorMeta], *, create: bool) -> None:
        self.path = Path(path)
        self.metas = list(metas)
        offsets, self.nbytes = layout(self.metas)
        if create:
            self.path.unlink(missing_ok=True)  # a killed run's file: never map a stale size
        elif not self.path.is_file() or self.path.stat().st_size != self.nbytes:
            raise WeightSyncError(
                f"the shared weights file {self.path} is missing or has another size than the {len(self.metas)} "
                "tensors announced; the trainer must publish before an engine attaches"
            )
        storage = cast(torch.UntypedStorage,
                       torch.UntypedStorage.from_file(str(self.path), shared=True, nbytes=self.nbytes))
        self._version = torch.empty(0, dtype=torch.int64).set_(storage, 0, (1,), (1,))
        self.tensors: dict[str, torch.Tensor] = {}
        for meta, offset in zip(self.metas, offsets, strict=True):
            dtype = dtype_from_name(meta.dtype)
            self.tensors[meta.name] = torch.empty(0, dtype=dtype).set_(
                storage, offset // dtype.itemsize, meta.shape, contiguous_strides(meta.shape))
        self._fd = os.open(self.path, os.O_RDWR)
        if create:
            self._version.fill_(-1)

    @classmethod
    def create(cls, path: str | Path, state_dict: Mapping[str, torch.Tensor]) -> SharedWeights:
        """Create the file for the tensors of ``state_dict`` (not yet written: version -1)."""
        return cls(path, state_dict_metas(state_dict), create=True)

    @classmethod
    def attach(cls, path: str | Path, metas: Sequence[TensorMeta]) -> SharedWeights:
        """Map the file a trainer created for ``metas``; raises WeightSyncError when it does not match."""
        return cls(path, metas, create=False)

    def version(self) -> int:
        """Return the version last written (-1: none yet)."""
        return int(self._version.item())

    def write(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy ``state_dict`` (the tensors this file was made for, any dtype) in and mark it ``version``."""
        with self._locked(fcntl.LOCK_EX), torch.no_grad():
            for name, view in self.tensors.items():
                view.copy_(state_dict[name])
            self._version.fill_(int(version))

    @contextlib.contextmanager
    def reading(self) -> Iterator[int]:
        """Hold the weights unchanged inside the block; yields the version they are."""
        with self._locked(fcntl.LOCK_SH):
            yield self.version()

    @contextlib.contextmanager
    def _locked(self, kind: int) -> Iterator[None]:
        fcntl.flock(self._fd, kind)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self, *, unlink: bool = False) -> None:
        """Close the lock's descriptor (the mapping lives while a tensor uses it); ``unlink`` removes the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if unlink:
            self.path.unlink(missing_ok=True)
