"""Loss aggregation modes: reduce a per-token loss ``[B, T-1]`` under a mask to a scalar.

Each mode is declared in :data:`~trinity.algorithm.catalog.LOSS_AGGREGATIONS`
under upstream Trinity-RFT's name. Every mode is well defined for empty
input: a row with no kept token is left out of the ``seq-mean-*`` modes, and an
all-empty mask gives 0 (with a zero gradient), never NaN. Masked positions
never contribute, even if they hold NaN.
"""

from __future__ import annotations

import torch

from trinity.algorithm.masked import as_mask, check_same_shape, masked_count, masked_mean, masked_sum


def _check(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    check_same_shape(values=values, mask=mask)
    if values.dim() != 2:
        raise ValueError(f"values must be [B, T-1], got shape {tuple(values.shape)}")
    return as_mask(mask)


def _mean_over_rows_with_tokens(per_row: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    has_tokens = masked_count(mask, dim=-1) > 0
    return masked_mean(per_row, has_tokens)


def token_mean(values: torch.Tensor, mask: torch.Tensor, *, normalizer: float | None = None) -> torch.Tensor:
    """Return the mean over every kept token of the batch (long rows weigh more); 0 for an empty mask.

    ``normalizer`` is ignored. Raises ValueError unless ``values`` and ``mask`` are matching ``[B, T-1]``.
    """
    mask = _check(values, mask)
    return masked_mean(values, mask)


def seq_mean_token_mean(values: torch.Tensor, mask: torch.Tensor, *, normalizer: float | None = None) -> torch.Tensor:
    """Return the mean over rows of each row's token mean; rows with no kept token are left out; 0 if none is kept.

    ``normalizer`` is ignored. Raises ValueError unless ``values`` and ``mask`` are matching ``[B, T-1]``.
    """
    mask = _check(values, mask)
    return _mean_over_rows_with_tokens(masked_mean(values, mask, dim=-1), mask)


def seq_mean_token_sum(values: torch.Tensor, mask: torch.Tensor, *, normalizer: float | None = None) -> torch.Tensor:
    """Return the mean over rows of each row's token sum; rows with no kept token are left out; 0 if none is kept.

    ``normalizer`` is ignored. Raises ValueError unless ``values`` and ``mask`` are matching ``[B, T-1]``.
    """
    mask = _check(values, mask)
    return _mean_over_rows_with_tokens(masked_sum(values, mask, dim=-1), mask)


def seq_mean_token_sum_norm(
    values: torch.Tensor, mask: torch.Tensor, *, normalizer: float | None = None
) -> torch.Tensor:
    """Return the sum over every kept token divided by ``normalizer + 1e-8`` (Dr. GRPO's fixed-length mean).

    As upstream, the sum is *not* divided by the number of rows, and
    ``normalizer`` defaults to the mask's width ``T-1``; pass a constant (the
    maximum response length) so that it does not depend on padding. Raises
    ValueError unless ``values`` and ``mask`` are matching ``[B, T-1]``, or for
    ``normalizer <= 0``.
    """
    mask = _check(values, mask)
    norm = float(mask.shape[-1]) if normalizer is None else float(normalizer)
    if norm <= 0:
        raise ValueError(f"the seq-mean-token-sum-norm normalizer must be positive, got {norm}")
    return masked_sum(values, mask) / (norm + 1e-8)
