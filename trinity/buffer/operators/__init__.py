"""Experience operators, upstream Trinity-RFT's extension point for the experience pipeline, at upstream's path.

An operator sees every experience one explorer step produced and returns
those to keep (changed or not) and metrics. Upstream's two shapes work:

* :class:`ExperienceOperatorV1` (``async def process(exps) -> (exps, metrics)``);
* :class:`ExperienceOperator` (the older, synchronous ``process``).

Operators register in :data:`EXPERIENCE_OPERATORS`, the same registry as
trinity-rft's reward shapers (functions ``shaper(reward, experience, **args)``),
and a config lists them in ``data_processor.experience_pipeline.operators``
(``name`` and ``args``), applied in order before group advantages. The
built-ins are upstream's filters and mappers (:mod:`.filters`, :mod:`.mappers`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from trinity.buffer.catalog import EXPERIENCE_OPERATORS


class ExperienceOperatorV1(ABC):
    """An operator on one explorer step's experiences; ``process`` is a coroutine."""

    #: OpenAI clients of the run's auxiliary models by name (set before the first ``process``).
    auxiliary_models: dict[str | int, list[Any]]

    def set_auxiliary_model(self, auxiliary_models: dict[str | int, list[Any]] | None = None) -> None:
        """Give the operator the run's auxiliary models (``{name: [AsyncOpenAI, ...]}``)."""
        self.auxiliary_models = auxiliary_models or {}

    async def prepare(self) -> None:  # noqa: B027 - optional, as upstream's
        """Prepare anything asynchronous, once, before the first ``process``."""

    @abstractmethod
    async def process(self, exps: list[Any]) -> tuple[list[Any], dict[str, Any]]:
        """Return the experiences to keep and metrics to log."""

    async def close(self) -> None:  # noqa: B027 - optional, as upstream's
        """Release what the operator holds, when the run ends."""


class ExperienceOperator(ABC):
    """An operator on one explorer step's experiences, synchronous (upstream's older interface)."""

    @abstractmethod
    def process(self, exps: list[Any]) -> tuple[list[Any], dict[str, Any]]:
        """Return the experiences to keep and metrics to log."""

    def close(self) -> None:  # noqa: B027 - optional, as upstream's
        """Release what the operator holds, when the run ends."""


__all__ = ["EXPERIENCE_OPERATORS", "ExperienceOperator", "ExperienceOperatorV1"]
