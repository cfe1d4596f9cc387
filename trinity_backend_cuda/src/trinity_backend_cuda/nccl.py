"""Where the NCCL library torch will use comes from, found without loading it.

CUDA wheels of torch on PyPI depend on ``nvidia-nccl-cu<major>``, which puts
``libnccl.so.2`` under ``site-packages/nvidia/nccl/lib``; other builds ship it
in ``torch/lib`` or use the system's (NGC containers, distribution packages).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

#: Distributions that ship NCCL for pip-installed torch, newest CUDA first.
NCCL_DISTRIBUTIONS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")
#: System library directories searched after the distributions and ``torch/lib``
#: (``LD_LIBRARY_PATH`` entries are searched before these).
SYSTEM_LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/cuda/lib64",
    "/usr/local/lib",
)

_LIBRARY_VERSION = re.compile(r"libnccl\.so\.(\d+(?:\.\d+)*)$")


@dataclass(frozen=True)
class NcclInstall:
    """One NCCL library found on this machine."""

    #: Where it was found: a distribution name, ``"torch/lib"`` or ``"system"``.
    source: str
    #: Its version (``"2.27.3"``); ``""`` when the file name does not tell.
    version: str
    #: The library file, when known.
    path: Path | None = None


def find_nccl(torch_dir: Path | None, cuda_major: int | None = None) -> NcclInstall | None:
    """Return the first NCCL found: a pip distribution, then ``torch_dir/lib``, then system directories.

    ``torch_dir`` is the torch package directory (None when unknown);
    ``cuda_major`` is torch's CUDA major version, whose ``nvidia-nccl-cu<major>``
    is preferred when several are installed. Returns None when no NCCL library
    is found; loads nothing.
    """
    preferred = f"nvidia-nccl-cu{cuda_major}"
    for name in sorted(NCCL_DISTRIBUTIONS, key=lambda n: n != preferred):
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        files = [Path(str(dist.locate_file(f))) for f in dist.files or () if "libnccl.so" in f.name]
        return NcclInstall(source=name, version=dist.version, path=files[0] if files else None)
    if torch_dir is not None:
        found = _library_in(torch_dir / "lib")
        if found is not None:
            return NcclInstall(source="torch/lib", version=_library_version(found), path=found)
    search = [entry for entry in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if entry]
    for directory in (*search, *SYSTEM_LIB_DIRS):
        found = _library_in(Path(directory))
        if found is not None:
            return NcclInstall(source="system", version=_library_version(found), path=found)
    return None


def _library_in(directory: Path) -> Path | None:
    """Return the most specific ``libnccl.so*`` in ``directory`` (``libnccl.so.2.27.3`` over ``libnccl.so``)."""
    try:
        candidates = sorted(directory.glob("libnccl.so*"), key=lambda p: (len(p.name), p.name))
    except OSError:
        return None
    return candidates[-1] if candidates else None


def _library_version(path: Path) -> str:
    match = _LIBRARY_VERSION.search(path.name)
    return match.group(1) if match else ""
