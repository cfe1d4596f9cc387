"""Upstream Trinity-RFT's ``AlgorithmType`` classes, at upstream's import path.

A user's algorithm written from upstream's ``develop_algorithm.md`` is a
class with ``use_critic``, ``use_reference``, ``compute_advantage_in_trainer``,
``can_balance_batch``, ``schema`` and a ``default_config()`` naming its
pieces. It registers in :data:`ALGORITHM_TYPE`, trinity-rft's one algorithm
registry; the training plan reads it as an
:class:`~trinity.algorithm.algorithms.AlgorithmSpec` (:func:`spec_of`).
Importing this module imports no torch.
"""

from __future__ import annotations

from typing import Any

from trinity.algorithm.catalog import ALGORITHMS

#: Upstream's name of the algorithm registry.
ALGORITHM_TYPE = ALGORITHMS

#: The ``default_config()`` keys the plan reads; ``repeat_times`` is the config's (as for the built-ins).
_PIECES = ("advantage_fn", "policy_loss_fn", "kl_penalty_fn", "kl_loss_fn", "entropy_loss_fn", "sample_strategy")


class AlgorithmType:
    """A whole algorithm: which models it uses, where advantages are computed, and its default pieces."""

    use_critic: bool = False
    use_reference: bool = True
    compute_advantage_in_trainer: bool = False
    can_balance_batch: bool = True
    schema: str = "experience"

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """Return the pieces used when the config names none: ``advantage_fn``, ``policy_loss_fn``,
        ``kl_penalty_fn``, ``kl_loss_fn``, ``entropy_loss_fn``, ``sample_strategy`` (and ``repeat_times``)."""
        return {}


def is_algorithm_type(entry: object) -> bool:
    """Whether ``entry`` is an algorithm written in upstream's class shape."""
    return isinstance(entry, type) and issubclass(entry, AlgorithmType)


def spec_of(name: str, cls: type[AlgorithmType]) -> Any:
    """Return the :class:`~trinity.algorithm.algorithms.AlgorithmSpec` of the algorithm class ``cls``.

    Unset pieces take upstream's global defaults (``policy_loss_fn: ppo``,
    ``advantage_fn: ppo``, ``kl_penalty_fn: none``, ``kl_loss_fn: k2``,
    ``entropy_loss_fn: default``, ``sample_strategy: default``). Raises
    ValueError for a ``default_config()`` that is not a mapping or names an
    unknown key, UnknownNameError for a piece no registry knows.
    """
    from trinity.algorithm.algorithms import AlgorithmSpec

    config = cls.default_config()
    if not isinstance(config, dict):
        raise ValueError(f"algorithm {name!r}: {cls.__name__}.default_config() must return a dict, "
                         f"got {type(config).__name__}")
    unknown = sorted(set(config) - set(_PIECES) - {"repeat_times"})
    if unknown:
        raise ValueError(f"algorithm {name!r}: {cls.__name__}.default_config() has unknown keys {unknown} "
                         f"(known: {', '.join(_PIECES)}, repeat_times)")
    schema = str(cls.schema)
    if schema not in ("experience", "sft", "dpo"):
        raise ValueError(f"algorithm {name!r}: schema must be 'experience', 'sft' or 'dpo', got {schema!r}")
    advantage = config.get("advantage_fn", "ppo")
    advantage = None if advantage in (None, "none") else str(advantage)
    place = "none" if advantage is None else ("trainer" if cls.compute_advantage_in_trainer else "buffer")
    return AlgorithmSpec(
        name=name,
        policy_loss_fn=str(config.get("policy_loss_fn", "ppo")),
        advantage_fn=advantage,
        advantage_in=place,  # type: ignore[arg-type]
        kl_penalty_fn=str(config.get("kl_penalty_fn", "none")),
        kl_loss_fn=str(config.get("kl_loss_fn", "k2")),
        entropy_loss_fn=str(config.get("entropy_loss_fn", "default")),
        sample_strategy=str(config.get("sample_strategy", "default")),
        use_critic=bool(cls.use_critic),
        use_reference=bool(cls.use_reference),
        schema=schema,  # type: ignore[arg-type]
        can_balance_batch=bool(cls.can_balance_batch),
        summary=(cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else "",
    )


__all__ = ["ALGORITHM_TYPE", "AlgorithmType", "is_algorithm_type", "spec_of"]
