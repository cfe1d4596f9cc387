"""Loss aggregation: reduce a per-token loss ``[B, T-1]`` under a mask to a scalar.

Every mode is well defined for empty input: a row with no kept token is left
out of the sequence modes, and an all-empty mask gives 0 (with a zero
gradient), never NaN. Masked positions never contribute, even if they hold NaN.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from trinity.algorithm.masked import as_mask, check_same_shape, masked_count, masked_mean, masked_sum
from trinity.common.registry import Registry

#: ``(values [B, T-1], mask [B, T-1]) -> scalar``
Aggregation = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: Loss aggregation modes, by name.
LOSS_AGGREGATIONS: Registry[Aggregation] = Registry("loss aggregation")


def _check(values: torch.Tensor, mask: torch.Tensor) -> None:
    check_same_shape(values=values, mask=mask)
    if values.dim() != 2:
        raise ValueError(f"values must be [B, T-1], got shape {tuple(values.shape)}")


def _mean_over_rows_with_tokens(per_row: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    has_tokens = masked_count(mask, dim=-1) > 0
    return masked_mean(per_row, has_tokens)


@LOSS_AGGREGATIONS.register("token-mean")
def token_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Return the mean over every kept token of the batch (long rows weigh more); 0 for an empty mask."""
    _check(values, mask)
    return masked_mean(values, mask)


@LOSS_AGGREGATIONS.register("seq-mean-token-mean")
def seq_mean_token_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Return the mean over rows of each row's token mean; rows with no kept token are left out; 0 if none is kept."""
    _check(values, mask)
    return _mean_over_rows_with_tokens(masked_mean(values, mask, dim=-1), mask)


@LOSS_AGGREGATIONS.register("seq-mean-token-sum")
def seq_mean_token_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Return the mean over rows of each row's token sum; rows with no kept token are left out; 0 if none is kept."""
    _check(values, mask)
    return _mean_over_rows_with_tokens(masked_sum(values, mask, dim=-1), mask)


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean") -> torch.Tensor:
    """Return ``values`` reduced under ``mask`` by the aggregation named ``mode``.

    Raises :class:`~trinity.common.registry.UnknownNameError` for an unknown mode and
    ValueError when ``values`` and ``mask`` are not matching ``[B, T-1]`` tensors.
    """
    return LOSS_AGGREGATIONS.get(mode)(values, as_mask(mask))
