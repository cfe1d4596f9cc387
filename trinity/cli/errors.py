"""Errors the command line turns into one line on stderr and an exit code."""

from __future__ import annotations

#: Exit status of a command that ran and found a problem (failed check, unusable backend).
EXIT_FAILURE = 1
#: Exit status of bad input: a wrong argument, an unknown name, a malformed setting.
EXIT_USAGE = 2


class CLIError(Exception):
    """A problem the user can fix; its message is printed as ``trinity: error: <message>``."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        #: The process exit status this error ends the command with.
        self.exit_code = exit_code


class UsageError(CLIError):
    """The command line itself is wrong (unknown option, missing argument)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)
