"""Policy entropy from logits, and the entropy bonus that encourages exploration."""

from __future__ import annotations

import torch

from trinity.algorithm.aggregation import aggregate
from trinity.algorithm.masked import check_same_shape

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


def entropy_bonus(
    entropy: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    coef: float,
    aggregation: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return ``(coef * aggregated entropy, metrics)``: the bonus to *subtract* from the loss.

    ``entropy`` and ``response_mask`` are ``[B, T-1]`` (``entropy_from_logits(logits[:, :-1])``).
    Metrics: ``entropy`` (the aggregated entropy before ``coef``). Raises
    ValueError on mismatched shapes, UnknownNameError for an unknown aggregation.
    """
    check_same_shape(entropy=entropy, response_mask=response_mask)
    value = aggregate(entropy, response_mask, aggregation)
    return coef * value, {"entropy": float(value.detach())}
