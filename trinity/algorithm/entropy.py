"""Policy entropy from logits, and the entropy term of the loss.

The terms (``default``, ``mix``, ``none``) are declared in
:data:`ENTROPY_LOSS_FNS` and live in :mod:`trinity.algorithm.entropy_terms`.
"""

from __future__ import annotations

from typing import Any

import torch

from trinity.algorithm.catalog import ENTROPY_LOSS_FNS
from trinity.algorithm.options import call_registered

__all__ = ["ENTROPY_LOSS_FNS", "entropy_bonus", "entropy_from_logits", "entropy_loss", "nec_from_logits"]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Return the entropy of ``softmax(logits)`` over the last dimension: ``[..., V] -> [...]``.

    Computed as ``-sum(p * log p)`` with ``log p = logits - logsumexp(logits)``,
    so large logits do not overflow; a ``-inf`` logit (a banned token) adds 0.
    Half-precision logits are computed in float32 and the result is float32.
    Gradient flows to ``logits`` (finite even with ``-inf`` logits). Raises ValueError for a 0-d tensor.
    """
    if logits.dim() == 0:
        raise ValueError("logits must have a vocabulary dimension")
    if logits.dtype in _LOW_PRECISION:
        logits = logits.float()
    log_p = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    p = log_p.exp()
    # p == 0 exactly where log p is -inf; zeroing log p there keeps 0 * -inf (NaN) out of values and gradients.
    finite_log_p = torch.where(p > 0, log_p, log_p.new_zeros(()))
    return -(p * finite_log_p).sum(dim=-1)


def nec_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Return Clip_V's ``N = H * sum p^2 + sum p^2 log p`` of ``softmax(logits)``: ``[..., V] -> [...]`` (float32).

    ``H`` is the entropy; a ``-inf`` logit adds 0. No gradient is meant to flow
    (the trainer computes it before the update). Raises ValueError for a 0-d tensor.
    """
    if logits.dim() == 0:
        raise ValueError("logits must have a vocabulary dimension")
    log_p = torch.log_softmax(logits.float(), dim=-1)
    p = log_p.exp()
    finite_log_p = torch.where(p > 0, log_p, log_p.new_zeros(()))
    squared = p * p
    entropy = -(p * finite_log_p).sum(dim=-1)
    return entropy * squared.sum(dim=-1) + (squared * finite_log_p).sum(dim=-1)


def entropy_loss(
    name: str, entropy: torch.Tensor, response_mask: torch.Tensor, **options: Any
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return ``(term, metrics)`` of the entropy term ``name``: the term to *subtract* from the loss.

    ``options`` are the term's keyword arguments (``entropy_coef``,
    ``loss_agg_mode``, ``expert_mask``, ``normalizer``). Raises
    UnknownNameError / UnknownOptionError (one line), and whatever the term raises.
    """
    entry = ENTROPY_LOSS_FNS.get(name)
    if isinstance(entry, type):  # upstream's shape: an EntropyLossFn class
        from trinity.algorithm.class_adapters import call_entropy

        return call_entropy(entry, entropy, response_mask, options)
    result: tuple[torch.Tensor, dict[str, float]] = call_registered(
        ENTROPY_LOSS_FNS, name, entropy, response_mask, **options
    )
    return result


def entropy_bonus(
    entropy: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    coef: float,
    aggregation: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return ``(coef * aggregated entropy, metrics)``: the ``default`` term, to *subtract* from the loss.

    Metrics: ``entropy`` (before ``coef``). Raises ValueError on mismatched
    shapes, UnknownNameError for an unknown aggregation.
    """
    return entropy_loss("default", entropy, response_mask, entropy_coef=coef, loss_agg_mode=aggregation)
