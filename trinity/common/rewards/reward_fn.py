"""Upstream Trinity-RFT's reward classes: ``RewardFn`` subclasses registered in ``REWARD_FUNCTIONS``.

Upstream writes a reward as a class, built with the task set's
``reward_fn_args`` and called with keyword arguments (``response``,
``truth``, ...) to return named parts (``{"accuracy": 1.0}``), summed into
the reward. The project's one reward registry (:data:`REWARD_FUNCTIONS` is
:data:`~trinity.common.rewards.base.REWARD_FNS`) holds both shapes:
functions (``fn(response, answer, **options)``) and these classes.
:func:`reward_class` gives upstream-shaped code a class for any entry, and
:func:`~trinity.common.rewards.base.compute_reward` scores with either.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

from trinity.common.rewards.base import REWARD_FNS

#: Upstream's name of the reward registry: the same registry as ``REWARD_FNS``.
REWARD_FUNCTIONS = REWARD_FNS


class RewardFn(ABC):
    """Base of upstream-style reward classes: ``Cls(**reward_fn_args)(**kwargs) -> {part: value}``."""

    @abstractmethod
    def __init__(self, **kwargs: Any) -> None:
        """Take the task set's ``reward_fn_args``."""

    @abstractmethod
    def __call__(self, **kwargs: Any) -> dict[str, float]:
        """Return the reward's named parts for one response (``response``, ``truth``, ... as keywords)."""


class FunctionRewardFn(RewardFn):
    """A registered reward function seen as an upstream reward class (see :func:`reward_class`)."""

    #: The function and its registered name (set on each generated subclass).
    function: Callable[..., Any]
    registered_name: str = ""

    def __init__(self, **kwargs: Any) -> None:
        self.options = kwargs

    def __call__(self, response: str = "", truth: Any = None, **kwargs: Any) -> dict[str, float]:
        """Score ``response`` against ``truth``; a float result is the part named after the function."""
        answer = truth if truth is not None else kwargs.pop("answer", None)
        result = type(self).function(response, answer, **{**kwargs, **self.options})
        if isinstance(result, Mapping):
            return {str(k): float(v) for k, v in result.items()}
        return {self.registered_name or "reward": float(result)}


_classes: dict[str, type[RewardFn]] = {}


def is_reward_class(entry: Any) -> bool:
    """Whether a registry entry is an upstream-style reward class (built, then called) rather than a function."""
    return isinstance(entry, type) and issubclass(entry, RewardFn)


def reward_class(name: str) -> type[RewardFn]:
    """Return the reward registered as ``name`` as an upstream reward class; raises UnknownNameError."""
    entry = REWARD_FUNCTIONS.get(name)
    if is_reward_class(entry):
        return entry  # type: ignore[no-any-return]
    if name not in _classes:
        _classes[name] = type(f"{name}_reward_fn", (FunctionRewardFn,),
                              {"function": staticmethod(entry), "registered_name": name})
    return _classes[name]


__all__ = ["REWARD_FUNCTIONS", "FunctionRewardFn", "RewardFn", "is_reward_class", "reward_class"]
