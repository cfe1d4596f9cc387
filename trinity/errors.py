"""The root of every error a user can cause, and the exit status each one ends ``trinity`` with.

Every family of user-facing errors (config, data, Ray connection, device
choice, storage, sync, checkpoints, command line) derives from
:class:`TrinityError`. The command line prints its message as one line and
exits with its :attr:`~TrinityError.exit_code`; nothing else needs to know
which classes exist. Importing this module imports only the standard library.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator

#: Exit status of a run or command that started correctly and then failed (a failed check, a lost engine).
EXIT_FAILURE = 1
#: Exit status of a cause the user can fix: a wrong argument, an unknown name, a missing file or folder, a full disk.
EXIT_USAGE = 2


class TrinityError(Exception):
    """An error whose message says what went wrong, where, and what to do; the CLI prints it as one line.

    Subclasses set :attr:`exit_code` (``EXIT_USAGE`` for bad input,
    ``EXIT_FAILURE`` for a run that failed); an instance may override it.
    """

    #: The process exit status this error ends the command with.
    exit_code: int = EXIT_FAILURE

    def __init__(self, *args: object, exit_code: int | None = None) -> None:
        super().__init__(*args)
        if exit_code is not None:
            self.exit_code = exit_code


class BadInputError(TrinityError):
    """Base of the errors in what the user gave (exit status 2)."""

    exit_code: int = EXIT_USAGE


def carried_error(exc: TrinityError) -> TrinityError:
    """Return the TrinityError that ``exc`` carries from another process, or ``exc`` itself.

    An error raised in a Ray actor reaches the caller wrapped in an object
    that is an instance of the original class but whose text is the remote
    traceback; the original is its ``cause``.
    """
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, TrinityError) else exc


#: errno values of a failed write that the user fixes on the filesystem (space, quota, read-only, permissions).
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES})


def error_chain(exc: BaseException) -> Iterator[BaseException]:
    """Yield ``exc`` and every exception behind it.

    Behind an exception are its cause and context, a Ray task's ``cause``,
    a database wrapper's ``orig`` (SQLAlchemy) and DCP's per-rank failures.
    """
    pending, seen = [exc], set()
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        behind = (
            getattr(current, "cause", None),
            getattr(current, "orig", None),
            current.__cause__,
            current.__context__,
        )
        pending.extend(e for e in behind if isinstance(e, BaseException))
        failures = getattr(current, "failures", None)
        if isinstance(failures, dict):
            pending.extend(
                f[0] for f in failures.values() if isinstance(f, tuple) and f and isinstance(f[0], BaseException)
            )


#: SQLite's primary result codes of a failed write that the user fixes on the filesystem, as errno values.
SQLITE_STORAGE_CODES = {13: errno.ENOSPC, 8: errno.EROFS}  # SQLITE_FULL, SQLITE_READONLY


def sqlite_storage_error(error: BaseException) -> OSError | None:
    """Return the OSError an SQLite "database or disk is full" / read-only error stands for, or None.

    SQLite reports these with its own result codes (``sqlite3.Error.sqlite_errorcode``,
    extended codes included), not with an errno; the returned error carries
    the matching errno and names no file.
    """
    code = getattr(error, "sqlite_errorcode", None)
    if not isinstance(code, int):
        return None
    number = SQLITE_STORAGE_CODES.get(code & 0xFF)
    return OSError(number, os.strerror(number)) if number is not None else None


#: How Rust's I/O errors name the OS error in their text (safetensors' writer: ``... (os error 28)``).
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)|Os \{ code: (\d+)")


def os_error_of(error: BaseException) -> OSError | None:
    """Return ``error`` itself when it is an OSError, or the OS error a Rust library reports in its text, or None."""
    if isinstance(error, OSError):
        return error
    found = _RUST_OS_ERROR.search(str(error))
    if found is None:
        return None
    number = int(found.group(1) or found.group(2))
    return OSError(number, os.strerror(number))


def storage_error(exc: BaseException) -> OSError | None:
    """Return the full-disk / quota / read-only / permission OSError behind ``exc``, or None when there is none.

    An SQLite error meaning the same (see :func:`sqlite_storage_error`) counts
    too, and so does one a Rust library reports (:func:`os_error_of`).
    """
    for error in error_chain(exc):
        found = os_error_of(error)
        if found is not None and found.errno in STORAGE_ERRNOS:
            return found
        mapped = sqlite_storage_error(error)
        if mapped is not None:
            return mapped
    return None


def describe_storage_error(error: OSError, setting: str = "checkpoint_root_dir") -> str:
    """Return one line naming what ``error`` means, the path it hit, and what to do about it.

    ``setting`` is the configuration key that moves the failed writes elsewhere.
    """
    meaning = error.strerror or os.strerror(error.errno or 0)
    where = f" writing {error.filename}" if error.filename else ""
    fix = (
        f"make it writable for this user or point {setting} at a folder that is"
        if error.errno in (errno.EACCES, errno.EROFS)
        else f"free space there or point {setting} at a folder with room"
    )
    return (
        f"{meaning} (errno {errno.errorcode.get(error.errno or 0, error.errno)}){where}; files written before "
        f"(complete checkpoints included) are intact; {fix}, then rerun the same command to resume"
    )


def actor_death(exc: BaseException) -> str | None:
    """Return ``"Ray actor <Class> (pid N) died"`` when a Ray actor's death is behind ``exc``, else None.

    Ray's own text for it runs to a paragraph; this names the actor's class
    and process in a few words (the check needs no import of Ray).
    """
    for error in error_chain(exc):
        if not any(base.__name__ == "RayActorError" for base in type(error).__mro__):
            continue
        text = str(error)
        found = re.search(r"class_name: ([\w.<>]+)", text)
        pid = re.search(r"\bpid: (\d+)", text)
        name = f" {found.group(1).rpartition('.')[2]}" if found else ""
        process = f" (pid {pid.group(1)})" if pid else ""
        return f"Ray actor{name}{process} died"
    return None
