"""Errors the command line itself raises; each ends the command as one line on stderr and an exit code."""

from __future__ import annotations

from trinity.errors import EXIT_FAILURE, EXIT_USAGE, TrinityError

__all__ = ["EXIT_FAILURE", "EXIT_USAGE", "CLIError", "UsageError"]


class CLIError(TrinityError):
    """A problem the user can fix; its message is printed as ``trinity: error: <message>``."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message, exit_code=exit_code)


class UsageError(CLIError):
    """The command line itself is wrong (unknown option, missing argument)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)
