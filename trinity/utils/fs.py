"""Durable file-system writes: fsync of files and directory entries, atomic replacement.

Checkpoints, synced weights and buffers all use these so a crash leaves either
the old file or the new one, never a torn one.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_file(path: str | Path) -> None:
    """Flush the contents of the file at ``path`` to disk."""
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def fsync_dir(path: str | Path) -> None:
    """Flush a directory entry (new files, renames inside it) to disk, where the platform allows."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(root: str | Path) -> None:
    """Flush every file under ``root`` and the directories themselves."""
    for folder, _dirs, files in os.walk(root):
        for name in files:
            fsync_file(os.path.join(folder, name))
        fsync_dir(folder)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (temporary file beside it, fsync, rename, fsync the folder)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, target)
    fsync_dir(target.parent)
