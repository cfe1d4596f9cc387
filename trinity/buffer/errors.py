"""Errors of the buffer: one family per failure, each message one line saying what, where and what to do."""

from __future__ import annotations

from trinity.errors import EXIT_USAGE, TrinityError


class TrinityBufferError(TrinityError):
    """Base of every buffer error (exit status 1 unless a family says otherwise)."""


class TaskFileError(TrinityBufferError, ValueError):
    """A task set cannot be read: missing file, unsupported format, malformed line, missing key."""

    exit_code = EXIT_USAGE


class DatasetError(TrinityBufferError, ValueError):
    """A data set cannot be read: missing path, split or subset, empty, malformed or unreachable."""

    exit_code = EXIT_USAGE


class FormatError(TrinityBufferError, ValueError):
    """A record does not fit its data set's format: missing key, malformed messages, unusable chat template."""

    exit_code = EXIT_USAGE


class ChatTemplateError(TrinityBufferError, ValueError):
    """A conversation cannot be rendered, or its assistant turns cannot be found, with the chat template."""

    exit_code = EXIT_USAGE


class TaskPositionError(TrinityBufferError, ValueError):
    """A saved task position does not fit the task set it is restored into."""

    exit_code = EXIT_USAGE


class StorageError(TrinityBufferError):
    """An experience storage failed (bad path, unusable file, bad state)."""


class StorageTimeoutError(StorageError, TimeoutError):
    """A storage read or write did not complete within its timeout."""


class StorageClosedError(StorageError):
    """A write was attempted on a storage that was closed for writing."""


class BufferExhaustedError(StorageError):
    """The storage was closed by its writers and every experience in it has been read."""
