"""One owner per run folder: role locks that keep two runs from writing the same checkpoints and metrics.

A run holds, for the whole of its life, an exclusive ``flock`` on one lock
file per role it plays in its run folder: ``explore.lock`` and/or
``train.lock``. A mode ``explore`` job and a mode ``train`` job can therefore
share a folder (they meet in its buffer), while a second job wanting a role
that is taken is refused at once, naming the holder. Each lock file records
its holder (pid, host, start time, mode). A mode ``bench`` job only reads the
checkpoints and appends its own evaluation records, so it plays a role of its
own, ``bench.lock``: it runs beside the folder's explore and train jobs, but
not beside another bench job. The record is emptied when the
holder lets go (or its interpreter exits normally), so a record found under a
free lock was left by a process that died, and its lock is taken over with a
warning.

Within one process the locks are re-entrant: a multi-stage run holds its
folder's locks while each stage takes (and finds already held) its own.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from trinity.errors import BadInputError
from trinity.utils.flock import read_record, read_record_at, release, try_lock, write_record

logger = logging.getLogger("trinity.launcher")

#: The roles each mode plays in its run folder; a role is held by one run at a time.
ROLES_BY_MODE: dict[str, tuple[str, ...]] = {
    "explore": ("explore",),
    "train": ("train",),
    "both": ("explore", "train"),
    "colocate": ("explore", "train"),
    "bench": ("bench",),
    "serve": ("serve",),
}
#: The roles a multi-stage run holds on its top folder for all its stages.
ALL_ROLES: tuple[str, ...] = ("explore", "train")
#: Every role a run folder can have a lock file for.
LOCK_ROLES: tuple[str, ...] = ("explore", "train", "bench", "serve")


class RunFolderBusyError(BadInputError):
    """Another living process holds a role this run needs in its run folder (exit status 2)."""


class RunFolderLockError(BadInputError):
    """The run folder's lock file cannot be created or opened (exit status 2)."""


@dataclass(frozen=True)
class Owner:
    """Who holds a role lock, as its lock file records it."""

    #: Process id of the holder on its host.
    pid: int
    #: Host name of the machine the holder runs on.
    host: str
    #: When the holder took the lock, UTC, ``YYYY-mm-dd HH:MM:SS``.
    since: str
    #: The holder's ``mode`` (``both``, ``explore``, ``train``, ``bench`` or ``stages``).
    mode: str

    def to_json(self) -> str:
        """Return the record written into the lock file."""
        return json.dumps({"pid": self.pid, "host": self.host, "since": self.since, "mode": self.mode}) + "\n"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        """Return the owner a lock file's text records, or None when it records none (empty or unreadable)."""
        try:
            raw = json.loads(text)
            return cls(int(raw["pid"]), str(raw["host"]), str(raw["since"]), str(raw["mode"]))
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self) -> str:
        """Return ``pid P on host H (mode M, since S UTC)``."""
        return f"pid {self.pid} on host {self.host} (mode {self.mode}, since {self.since} UTC)"


def lock_path(run_dir: Path, role: str) -> Path:
    """Return the lock file of ``role`` in ``run_dir``."""
    return run_dir / f"{role}.lock"


def is_lock_file(path: Path) -> bool:
    """Return True when ``path`` is one of a run folder's role lock files."""
    return path.suffix == ".lock" and path.stem in LOCK_ROLES and path.is_file()


_registry_lock = threading.Lock()
#: Role locks this process holds: (lock file, descriptor, how many holders in this process).
_held: dict[Path, list[int]] = {}


class RunFolderLock:
    """The role locks one run holds on its folder; :meth:`release` (or leaving the ``with``) lets them go."""

    def __init__(self, run_dir: Path, paths: list[Path]) -> None:
        self.run_dir = run_dir
        self._paths = paths

    def release(self) -> None:
        """Let go of this run's role locks (a lock another holder in this process still uses stays held)."""
        with _registry_lock:
            while self._paths:
                _drop(self._paths.pop())

    def __enter__(self) -> RunFolderLock:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def lock_run_folder(run_dir: Path, mode: str, roles: tuple[str, ...] | None = None) -> RunFolderLock:
    """Take the role locks ``mode`` needs (or ``roles``) on ``run_dir``, creating the folder; return them.

    Raises :class:`RunFolderBusyError` naming the holder when another process
    holds one of them (none are kept then), :class:`RunFolderLockError` when a
    lock file cannot be created. A lock whose previous holder died is taken
    over with a warning.
    """
    wanted = roles if roles is not None else ROLES_BY_MODE[mode]
    owner = Owner(os.getpid(), socket.gethostname(), time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), mode)
    taken: list[Path] = []
    with _registry_lock:
        try:
            for role in wanted:
                path = lock_path(run_dir, role).absolute()
                _take(path, run_dir, role, owner)
                taken.append(path)
        except BaseException:
            while taken:
                _drop(taken.pop())
            raise
    return RunFolderLock(run_dir, taken)


def _take(path: Path, run_dir: Path, role: str, owner: Owner) -> None:
    held = _held.get(path)
    if held is not None:
        held[1] += 1
        return
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = try_lock(path)
    except OSError as exc:
        raise RunFolderLockError(
            f"cannot lock the run folder {run_dir}: {exc.strerror} ({path}); make the folder writable or set "
            "checkpoint_root_dir to a folder you can write"
        ) from None
    if fd is None:
        holder = Owner.parse(read_record_at(path))
        who = holder.describe() if holder else f"a process that has not yet recorded itself in {path}"
        raise RunFolderBusyError(
            f"run folder {run_dir} is in use: its {role} role is held by another trinity run, {who}; wait for that "
            "run to end (or stop it), or give this run another `name` (or `project`)"
        )
    previous = Owner.parse(read_record(fd))
    if previous is not None:
        elsewhere = (
            f"; if it still runs on {previous.host}, this filesystem does not share locks between hosts: "
            "stop one of the two runs"
            if previous.host != owner.host
            else ""
        )
        logger.warning(
            "run folder %s: taking over the %s lock left by %s, which is gone%s",
            run_dir,
            role,
            previous.describe(),
            elsewhere,
        )
    write_record(fd, owner.to_json())
    _held[path] = [fd, 1]


@atexit.register
def _release_all() -> None:
    """At a normal interpreter exit, empty and let go of every lock still held (a crash leaves its record)."""
    with _registry_lock:
        while _held:
            _, (fd, _count) = _held.popitem()
            release(fd)


def _drop(path: Path) -> None:
    held = _held[path]
    held[1] -= 1
    if held[1] == 0:
        del _held[path]
        release(held[0])


__all__ = [
    "ALL_ROLES",
    "LOCK_ROLES",
    "ROLES_BY_MODE",
    "Owner",
    "RunFolderBusyError",
    "RunFolderLock",
    "RunFolderLockError",
    "is_lock_file",
    "lock_path",
    "lock_run_folder",
]
