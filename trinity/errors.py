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
    """Yield ``exc`` and every exception behind it: causes, contexts, a Ray task's cause, DCP's per-rank failures."""
    pending, seen = [exc], set()
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending.extend(e for e in (getattr(current, "cause", None), current.__cause__, current.__context__)
                       if isinstance(e, BaseException))
        failures = getattr(current, "failures", None)
        if isinstance(failures, dict):
            pending.extend(f[0] for f in failures.values()
                           if isinstance(f, tuple) and f and isinstance(f[0], BaseException))


def storage_error(exc: BaseException) -> OSError | None:
    """Return the full-disk / quota / read-only / permission OSError behind ``exc``, or None when there is none."""
    for error in error_chain(exc):
        if isinstance(error, OSError) and error.errno in STORAGE_ERRNOS:
            return error
    return None


def describe_storage_error(error: OSError) -> str:
    """Return one line naming what ``error`` means, the path it hit, and what to do about it."""
    meaning = error.strerror or os.strerror(error.errno or 0)
    where = f" writing {error.filename}" if error.filename else ""
    fix = ("make it writable for this user or point checkpoint_root_dir at a folder that is"
           if error.errno in (errno.EACCES, errno.EROFS)
           else "free space there or point checkpoint_root_dir at a folder with room")
    return (f"{meaning} (errno {errno.errorcode.get(error.errno or 0, error.errno)}){where}; files written before "
            f"(complete checkpoints included) are intact; {fix}, then rerun the same command to resume")
