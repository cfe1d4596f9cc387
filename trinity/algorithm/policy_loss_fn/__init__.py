"""Upstream Trinity-RFT's policy loss classes, at upstream's import path.

A :class:`PolicyLossFn` subclass names the tensors it reads in its
``__call__`` parameters, in upstream's names (``logprob``, ``old_logprob``,
``action_mask``, ``advantages``, ``ref_logprob``, ``expert_mask``), and
returns ``(loss, metrics)``. It registers in :data:`POLICY_LOSS_FN`, which is
trinity-rft's one policy loss registry; the trainer builds it once with the
config's ``policy_loss_fn_args`` (or its ``default_args()``) and calls it with
the parameters it names (:mod:`trinity.algorithm.class_adapters`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from trinity.algorithm.catalog import POLICY_LOSS_FNS

#: Upstream's name of the policy loss registry.
POLICY_LOSS_FN = POLICY_LOSS_FNS


class PolicyLossFn(ABC):
    """A policy loss: ``fn(logprob, <the tensors its parameters name>) -> (loss, metrics)``."""

    #: How token losses are reduced when the constructor does not take ``loss_agg_mode`` (the config's wins).
    loss_agg_mode: str = "token-mean"

    def __init__(self, backend: str = "trinity") -> None:
        self.backend = backend

    @abstractmethod
    def __call__(self, logprob: Any, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Return the loss to minimise (a 0-d tensor) and metrics to log."""

    @classmethod
    @abstractmethod
    def default_args(cls) -> dict[str, Any]:
        """Return the constructor's arguments used when the config gives no ``policy_loss_fn_args``."""


__all__ = ["POLICY_LOSS_FN", "PolicyLossFn"]
