"""Exclusive ``fcntl.flock`` claims on lock files, each holding a short record of its holder.

A claim is an open file descriptor with an exclusive, non-blocking flock on
it. The operating system drops the lock when the descriptor is closed or its
process dies, so a lock file whose lock is free has no living holder,
whatever its record still says. Descriptors are opened close-on-exec, so
processes started by the holder do not keep the lock alive.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def try_lock(path: str | Path) -> int | None:
    """Open (creating it) and exclusively lock the file at ``path``; return the descriptor, or None when held.

    The caller owns the returned descriptor: closing it releases the lock.
    Raises OSError when the file cannot be opened or created.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_record(fd: int) -> str:
    """Return the text the lock file behind ``fd`` holds (what its last holder wrote)."""
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def read_record_at(path: str | Path) -> str:
    """Return the text of the lock file at ``path`` without locking it; empty when it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def write_record(fd: int, text: str) -> None:
    """Replace the contents of the locked file behind ``fd`` with ``text``."""
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, text.encode("utf-8"))


def release(fd: int) -> None:
    """Empty the locked file behind ``fd`` (so no stale record stays behind) and drop the lock."""
    try:
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)
