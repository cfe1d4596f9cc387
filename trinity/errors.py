"""The root of every error a user can cause, and the exit status each one ends ``trinity`` with.

Every family of user-facing errors (config, data, Ray connection, device
choice, storage, sync, checkpoints, command line) derives from
:class:`TrinityError`. The command line prints its message as one line and
exits with its :attr:`~TrinityError.exit_code`; nothing else needs to know
which classes exist. Importing this module imports nothing else.
"""

from __future__ import annotations

#: Exit status of a run or command that started correctly and then failed (a failed check, a full disk).
EXIT_FAILURE = 1
#: Exit status of bad input the user can fix: a wrong argument, an unknown name, a missing file or folder.
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
