"""Upstream Trinity-RFT's entropy loss classes, at upstream's import path.

An :class:`EntropyLossFn` subclass is built with ``entropy_loss_fn_args``
(``entropy_coef``) and called with ``entropy``, ``action_mask`` and
``loss_agg_mode``; it returns the term the trainer *subtracts* from the loss,
and metrics. It registers in :data:`ENTROPY_LOSS_FN`, trinity-rft's one
entropy registry.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from trinity.algorithm.catalog import ENTROPY_LOSS_FNS

#: Upstream's name of the entropy registry.
ENTROPY_LOSS_FN = ENTROPY_LOSS_FNS


class EntropyLossFn(ABC):
    """An entropy term: ``fn(entropy, action_mask, loss_agg_mode=...) -> (term, metrics)``."""

    @abstractmethod
    def __call__(self, entropy: Any, action_mask: Any, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Return the entropy term (subtracted from the loss) and metrics to log."""

    @classmethod
    def default_args(cls) -> dict[str, Any]:
        """Upstream's default: no entropy bonus."""
        return {"entropy_coef": 0.0}


__all__ = ["ENTROPY_LOSS_FN", "EntropyLossFn"]
