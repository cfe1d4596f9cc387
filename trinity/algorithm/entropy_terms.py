"""Entropy terms of the loss, declared in :data:`~trinity.algorithm.catalog.ENTROPY_LOSS_FNS`.

Each returns ``(entropy_coef * aggregated entropy, metrics)``: the term to
*subtract* from the loss (an exploration bonus), as upstream Trinity-RFT's
entropy loss functions do. ``entropy`` and ``response_mask`` are ``[B, T-1]``.
"""

from __future__ import annotations

import torch

from trinity.algorithm.aggregation import aggregate
from trinity.algorithm.masked import as_mask, check_same_shape


def default_entropy_loss(
    entropy: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    entropy_coef: float = 0.0,
    loss_agg_mode: str = "token-mean",
    expert_mask: torch.Tensor | None = None,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return ``entropy_coef`` times the entropy aggregated over the response tokens, and its metrics.

    ``expert_mask`` is ignored. Metrics: ``entropy`` (before the coefficient).
    Raises ValueError on mismatched shapes, UnknownNameError for an unknown ``loss_agg_mode``.
    """
    check_same_shape(entropy=entropy, response_mask=response_mask)
    value = aggregate(entropy, response_mask, loss_agg_mode, normalizer=normalizer)
    return entropy_coef * value, {"entropy": float(value.detach())}


def mix_entropy_loss(
    entropy: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    entropy_coef: float = 0.0,
    loss_agg_mode: str = "token-mean",
    expert_mask: torch.Tensor | None = None,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return ``entropy_coef`` times the entropy aggregated over the rows *not* marked in ``expert_mask`` [B].

    The mix algorithms' term: expert (SFT) rows add no entropy bonus. Metrics:
    ``entropy``. Raises ValueError without ``expert_mask`` or on mismatched shapes.
    """
    if expert_mask is None:
        raise ValueError("entropy loss 'mix' needs expert_mask, which was not given")
    if expert_mask.shape != entropy.shape[:1]:
        raise ValueError(f"expert_mask must be [B={entropy.shape[0]}], got shape {tuple(expert_mask.shape)}")
    usual = as_mask(response_mask) & ~as_mask(expert_mask).unsqueeze(-1)
    return default_entropy_loss(
        entropy, usual, entropy_coef=entropy_coef, loss_agg_mode=loss_agg_mode, normalizer=normalizer
    )


def no_entropy_loss(
    entropy: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    entropy_coef: float = 0.0,
    loss_agg_mode: str = "token-mean",
    expert_mask: torch.Tensor | None = None,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return a zero term (on ``entropy``'s device) and no metrics: the entropy is not part of the loss."""
    return entropy.new_zeros(()), {}
