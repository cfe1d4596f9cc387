"""The reward-function registry and how workflows combine reward functions.

A reward function takes the response text and the task's reference answer
(plus keyword context such as ``prompt`` or ``response_length``, the number
of response tokens) and returns a float, usually in ``[0, 1]``, or, like
upstream Trinity-RFT's reward classes, a mapping of named parts
(``{"accuracy": 1.0, "format_score": -0.1}``) whose sum is the reward.
Functions are registered by name in :data:`REWARD_FNS` and named in configs
(``reward_fn: math_accuracy``).

*Options* are a function's keyword-only parameters; a task set sets them
with ``reward_fn_args`` (``{penalty_factor: 1.0}``) and
:func:`compute_reward` passes them on, refusing a name no function takes.
Context keys a function does not name land in its ``**context`` and are
ignored.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from trinity.utils.registry import Registry

#: What a reward function returns: the reward, or named parts summed into it.
RewardValue = float | Mapping[str, float]


class RewardFunction(Protocol):
    """What a registered reward function looks like (upstream-style reward classes are registered too: see
    :mod:`trinity.common.rewards.reward_fn`)."""

    def __call__(self, response: str, answer: Any, **context: Any) -> RewardValue:
        """Return the reward of ``response`` for a task whose reference answer is ``answer``."""
        ...


class RewardOptionError(ValueError):
    """A reward function was given an option it does not take, or a bad option value."""


#: Reward functions by config name.
REWARD_FNS: Registry[Any] = Registry("reward function")


def reward_options(fn: Callable[..., Any]) -> tuple[str, ...]:
    """Return the option names of reward function ``fn``: its keyword-only parameters, in order."""
    try:
        return _options_of(fn)
    except TypeError:  # an unhashable callable: read its signature every time
        return _options_of.__wrapped__(fn)


@functools.lru_cache(maxsize=256)
def _options_of(fn: Callable[..., Any]) -> tuple[str, ...]:
    # every rollout's reward asks: reading a signature costs ~10 us, a cache hit 0.1 us
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or an odd callable: no declared options
        return ()
    return tuple(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)


def _names(spec: str | Mapping[str, float]) -> dict[str, float]:
    return {spec: 1.0} if isinstance(spec, str) else dict(spec)


def split_options(
    spec: str | Mapping[str, float], options: Mapping[str, Any] | None
) -> dict[str, dict[str, Any]]:
    """Return ``{name: the options it takes}`` for the functions of ``spec``.

    Raises :class:`RewardOptionError` for an option no function of ``spec``
    takes, and UnknownNameError for an unknown function name.
    """
    from trinity.common.rewards.reward_fn import is_reward_class

    per_fn: dict[str, dict[str, Any]] = {}
    known: set[str] = set()
    for name in _names(spec):
        entry = REWARD_FNS.get(name)
        takes = tuple(options or {}) if is_reward_class(entry) else reward_options(entry)  # a class takes them all
        known.update(takes)
        per_fn[name] = {k: v for k, v in (options or {}).items() if k in takes}
    unknown = sorted(set(options or {}) - known)
    if unknown:
        names = ", ".join(repr(n) for n in _names(spec))
        raise RewardOptionError(
            f"reward function {names} takes no option {', '.join(repr(u) for u in unknown)} "
            f"(its options: {', '.join(sorted(known)) or 'none'}); fix the task set's reward_fn_args"
        )
    return per_fn


def check_reward_options(spec: str | Mapping[str, float], options: Mapping[str, Any] | None) -> None:
    """Raise :class:`RewardOptionError` when ``options`` holds a name no function of ``spec`` takes."""
    split_options(spec, options)


def _value_of(name: str, result: Any) -> tuple[float, dict[str, float]]:
    """Return the reward of one function's ``result`` and its named parts (``name/part``)."""
    if isinstance(result, Mapping):
        parts = {f"{name}/{k}": float(v) for k, v in result.items()}
        return sum(parts.values()), parts
    return float(result), {}


def compute_reward(
    spec: str | Mapping[str, float],
    response: str,
    answer: Any,
    *,
    options: Mapping[str, Any] | None = None,
    **context: Any,
) -> tuple[float, dict[str, float]]:
    """Return the total reward and its parts for ``spec``: one name, or ``{name: weight}`` summed with weights.

    ``options`` (a task set's ``reward_fn_args``) go to the functions that
    take them (they win over ``context`` keys of the same name). The parts
    are the unweighted values by name; a function returning named parts adds
    them as ``name/part`` too. Raises UnknownNameError for an unknown name,
    :class:`RewardOptionError` for an option no function takes or a bad value.
    """
    from trinity.common.rewards.reward_fn import is_reward_class

    per_fn = split_options(spec, options)
    parts: dict[str, float] = {}
    total = 0.0
    for name, weight in _names(spec).items():
        entry = REWARD_FNS.get(name)
        if is_reward_class(entry):  # upstream's shape: built with the options, called with keywords
            result = entry(**per_fn[name])(response=response, truth=answer, **context)
        else:
            result = entry(response, answer, **{**context, **per_fn[name]})
        value, named = _value_of(name, result)
        parts[name] = value
        parts.update(named)
        total += weight * value
    return total, parts
