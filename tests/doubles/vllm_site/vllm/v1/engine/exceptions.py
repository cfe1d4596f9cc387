"""Errors of the V1 engine."""

from __future__ import annotations


class EngineGenerateError(Exception):
    """A request failed, but the engine is still usable."""


class EngineDeadError(Exception):
    """The engine is gone (shut down or failed): no request can be served any more."""

    def __init__(self, *args: object) -> None:
        """Default to vLLM-like wording when no message is given."""
        super().__init__(*(args or ("EngineCore is no longer running (shut down or failed).",)))
