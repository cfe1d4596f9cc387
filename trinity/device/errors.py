"""Exceptions of the device layer.

Every message says what is wrong, where, and how to fix it; the CLI prints it as
one line and exits non-zero, so the text is part of the API.
"""

from __future__ import annotations

from trinity.errors import EXIT_USAGE, TrinityError


class DeviceError(TrinityError):
    """Base of every error the device layer raises on bad input or bad plugins (exit status 1)."""


class UnknownBackendError(DeviceError):
    """A backend was asked for by a name no installed distribution provides."""

    exit_code = EXIT_USAGE


class BackendUnavailableError(DeviceError):
    """A backend was asked for explicitly but cannot run here (probe said no)."""


class BackendLoadError(DeviceError):
    """A backend was asked for explicitly but failed to import or validate."""


class ConflictingChoiceError(DeviceError):
    """Two explicit device choices (argument/config and environment) disagree."""

    exit_code = EXIT_USAGE


class InvalidDeviceRequestError(DeviceError):
    """A device request is malformed (e.g. a negative local rank, a bad timeout)."""

    exit_code = EXIT_USAGE


class CollectiveGroupError(DeviceError):
    """A stateless process group (``trinity_stateless_process_group``) cannot be built for a collective."""


class UnsupportedDtypeError(DeviceError):
    """A model dtype was asked for that the selected device cannot compute in."""
