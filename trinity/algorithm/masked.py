"""Masked statistics over padded ``[B, T-1]`` tensors.

Masked positions never contribute, even when they hold NaN or infinity
(padding logits can): values are selected with :func:`torch.where`, not
multiplied by the mask. Empty masks give 0, never NaN.
"""

from __future__ import annotations

import torch


def as_mask(mask: torch.Tensor) -> torch.Tensor:
    """Return ``mask`` as a bool tensor (nonzero means kept)."""
    return mask if mask.dtype == torch.bool else mask != 0


def check_same_shape(**tensors: torch.Tensor | None) -> None:
    """Raise ValueError naming the first tensor whose shape differs from the first one given."""
    given = [(name, t) for name, t in tensors.items() if t is not None]
    if not given:
        return
    first_name, first = given[0]
    for name, tensor in given[1:]:
        if tensor.shape != first.shape:
            raise ValueError(
                f"{name} has shape {tuple(tensor.shape)} but {first_name} has {tuple(first.shape)}; they must match"
            )


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Return the sum of ``values`` where ``mask`` is set (over ``dim``, or everything when None)."""
    kept = torch.where(as_mask(mask), values, torch.zeros((), dtype=values.dtype, device=values.device))
    return kept.sum() if dim is None else kept.sum(dim=dim)


def masked_count(mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Return how many positions ``mask`` keeps (over ``dim``, or everything when None), as a long tensor."""
    kept = as_mask(mask)
    return kept.sum() if dim is None else kept.sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Return the mean of ``values`` where ``mask`` is set; 0 where nothing is kept."""
    count = masked_count(mask, dim).to(values.dtype)
    return masked_sum(values, mask, dim) / count.clamp(min=1)


def masked_var(values: torch.Tensor, mask: torch.Tensor, *, unbiased: bool = False) -> torch.Tensor:
    """Return the variance of the kept values; 0 when at most one is kept.

    Population variance (divided by n) by default; ``unbiased=True`` divides by
    n - 1 (Bessel's correction, as upstream Trinity-RFT's whitening does).
    """
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        count = masked_count(mask).to(values.dtype)
        variance = variance * count / (count - 1).clamp(min=1)
    return variance


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8, *, unbiased: bool = False
) -> torch.Tensor:
    """Return ``(values - mean) / sqrt(var + eps)`` over the kept positions, 0 at masked positions.

    Mean and variance (see :func:`masked_var` for ``unbiased``) are taken over
    every kept position of the whole tensor.
    """
    mean = masked_mean(values, mask)
    var = masked_var(values, mask, unbiased=unbiased)
    whitened = (values - mean) * torch.rsqrt(var + eps)
    return torch.where(as_mask(mask), whitened, torch.zeros((), dtype=values.dtype, device=values.device))
