"""The reward-function registry and how workflows combine reward functions.

A reward function takes the response text and the task's reference answer
(plus optional keyword context such as ``prompt``) and returns a float,
usually in ``[0, 1]``. Functions are registered by name in :data:`REWARD_FNS`
and named in configs (``reward_fn: math_accuracy``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from trinity.common.registry import Registry


class RewardFn(Protocol):
    """What a registered reward function looks like."""

    def __call__(self, response: str, answer: Any, **context: Any) -> float:
        """Return the reward of ``response`` for a task whose reference answer is ``answer``."""
        ...


#: Reward functions by config name.
REWARD_FNS: Registry[RewardFn] = Registry("reward function")


def compute_reward(
    spec: str | Mapping[str, float], response: str, answer: Any, **context: Any
) -> tuple[float, dict[str, float]]:
    """Return the total reward and its parts for ``spec``: one name, or ``{name: weight}`` summed with weights.

    The parts are the unweighted values by name. Raises
    :class:`~trinity.common.registry.UnknownNameError` for an unknown name.
    """
    weights = {spec: 1.0} if isinstance(spec, str) else dict(spec)
    parts: dict[str, float] = {}
    total = 0.0
    for name, weight in weights.items():
        value = float(REWARD_FNS.get(name)(response, answer, **context))
        parts[name] = value
        total += weight * value
    return total, parts
