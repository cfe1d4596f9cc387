"""Upstream Trinity-RFT's algorithm helpers, at upstream's import path, on trinity-rft's own reductions.

``aggregate_loss`` (also reachable as ``masked_loss``, the name upstream's
``develop_algorithm.md`` uses) reduces a per-token loss by an aggregation
mode; ``masked_mean`` / ``masked_sum`` take upstream's ``axis`` keyword.
"""

from __future__ import annotations

import torch

from trinity.algorithm.aggregation import aggregate
from trinity.algorithm.masked import as_mask
from trinity.algorithm.masked import masked_mean as _masked_mean
from trinity.algorithm.masked import masked_sum as _masked_sum


def aggregate_loss(values: torch.Tensor, mask: torch.Tensor, loss_agg_mode: str = "token-mean",
                   normalizer: float | None = None) -> torch.Tensor:
    """Return ``values`` reduced over ``mask`` by ``loss_agg_mode`` (``token-mean``, ``seq-mean-token-sum``,
    ``seq-mean-token-mean``, ``seq-mean-token-sum-norm``); raises UnknownNameError for another mode."""
    return aggregate(values, mask, loss_agg_mode, normalizer=normalizer)


#: The name upstream's developer guide uses for :func:`aggregate_loss`.
masked_loss = aggregate_loss


def masked_sum(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Return the sum of ``values`` where ``mask`` is set (over ``axis``, or all)."""
    return _masked_sum(values, as_mask(mask), dim=axis)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Return the mean of ``values`` where ``mask`` is set (over ``axis``, or all)."""
    return _masked_mean(values, as_mask(mask), dim=axis)


__all__ = ["aggregate_loss", "masked_loss", "masked_mean", "masked_sum"]
