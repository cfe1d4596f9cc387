"""Upstream Trinity-RFT's KL classes, at upstream's import path.

A :class:`KLFn` subclass overrides :meth:`KLFn.calculate_kl` (the per-token
estimate) and registers in :data:`KL_FN`, trinity-rft's one KL registry. The
coefficient, its adaptive schedule, the reward penalty and the loss term
are the trainer's, from ``kl_penalty_fn_args`` / ``kl_loss_fn_args`` as for
the built-in estimators.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from trinity.algorithm.catalog import KL_DEFAULT_ARGS, KL_FNS

#: Upstream's name of the KL registry.
KL_FN = KL_FNS


class KLFn(ABC):
    """A per-token KL estimate between the policy and the reference model."""

    def __init__(self, adaptive: bool = False, kl_coef: float = 0.001, target_kl: float | None = None,
                 horizon: float | None = None) -> None:
        self.adaptive = adaptive
        self.kl_coef = kl_coef
        self.target_kl = target_kl
        self.horizon = horizon

    @abstractmethod
    def calculate_kl(self, logprob: Any, ref_logprob: Any) -> Any:
        """Return the per-token KL estimate, shaped like ``logprob``."""

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        """Upstream's defaults: no adaptive coefficient, ``kl_coef`` 0.001."""
        return dict(KL_DEFAULT_ARGS)


__all__ = ["KL_FN", "KLFn"]
