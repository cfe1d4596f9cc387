"""Priority functions of experience replay: how eagerly a stored group is trained on again.

A priority function is called with one group (its experiences, each with
``info["model_version"]`` and ``info["use_count"]`` filled in) whenever the
group enters the replay pool: fresh from the explorer, or back from its
cooldown after a use. It returns ``(priority, keep)``: the pool serves the
highest priority first, and a group with ``keep`` False leaves the pool for
good. Upstream's classes (``PriorityFunction`` subclasses registered in
``PRIORITY_FUNC``) run unchanged.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from trinity.common.experience import Experience


class PriorityFunction(ABC):
    """A replay priority: ``fn(item) -> (priority, keep)`` for one group of experiences."""

    @abstractmethod
    def __call__(self, item: Sequence[Experience]) -> tuple[float, bool]:
        """Return the group's priority and whether it stays in the pool."""

    @classmethod
    @abstractmethod
    def default_config(cls) -> dict[str, Any]:
        """Return the default keyword arguments of the constructor."""


def _version_and_uses(item: Sequence[Experience]) -> tuple[float, int]:
    first = item[0]
    return float(first.info.get("model_version", first.model_version)), int(first.info.get("use_count", 0))


class LinearDecayPriority(PriorityFunction):
    """``model_version - decay * use_count``; a group always returns after its cooldown (``linear_decay``)."""

    def __init__(self, decay: float = 2.0) -> None:
        """Lower a group's priority by ``decay`` per use."""
        self.decay = float(decay)

    def __call__(self, item: Sequence[Experience]) -> tuple[float, bool]:
        """Return ``(model_version - decay * use_count, True)``."""
        version, uses = _version_and_uses(item)
        return version - self.decay * uses, True

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """Return ``{"decay": 2.0}``."""
        return {"decay": 2.0}


class DecayLimitRandomizationPriority(PriorityFunction):
    """``linear_decay`` plus Gaussian noise of ``sigma``; a group leaves after ``use_count_limit`` uses.

    Registered as ``decay_limit_randomization``. A ``use_count_limit`` of 0
    (or less) means no limit.
    """

    def __init__(self, decay: float = 2.0, use_count_limit: int = 3, sigma: float = 0.0) -> None:
        """Raise ValueError for a negative ``sigma``."""
        if sigma < 0:
            raise ValueError(f"sigma must not be negative, got {sigma}")
        self.decay = float(decay)
        self.use_count_limit = int(use_count_limit)
        self.sigma = float(sigma)
        self._noise = random.Random()

    def __call__(self, item: Sequence[Experience]) -> tuple[float, bool]:
        """Return the decayed, perturbed priority and whether the group has uses left."""
        version, uses = _version_and_uses(item)
        priority = version - self.decay * uses
        if self.sigma > 0:
            priority += self._noise.gauss(0.0, self.sigma)
        return priority, self.use_count_limit <= 0 or uses < self.use_count_limit

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """Return ``{"decay": 2.0, "use_count_limit": 3, "sigma": 0.0}``."""
        return {"decay": 2.0, "use_count_limit": 3, "sigma": 0.0}


def make_priority_function(name: str, args: dict[str, Any] | None = None) -> PriorityFunction:
    """Return the registered priority function ``name`` built with its defaults updated by ``args``.

    Raises UnknownNameError for an unknown name and ValueError (one line) for
    an argument its constructor does not take.
    """
    from trinity.buffer.catalog import PRIORITY_FUNCTIONS

    cls = PRIORITY_FUNCTIONS.get(name)
    defaults = cls.default_config() if hasattr(cls, "default_config") else {}
    options = {**defaults, **(args or {})}
    try:
        fn = cls(**options)
    except TypeError as exc:
        raise ValueError(f"priority function {name!r} does not take {sorted(options)}: {exc}") from None
    if not callable(fn):
        raise ValueError(f"priority function {name!r} built a {type(fn).__name__}, which cannot be called")
    return fn  # type: ignore[no-any-return]
