"""Reducing a per-token loss to a scalar by the aggregation mode a config names.

The modes live in :mod:`trinity.algorithm.aggregation_modes` and are declared
in :data:`LOSS_AGGREGATIONS`: ``token-mean``, ``seq-mean-token-sum``,
``seq-mean-token-mean`` and ``seq-mean-token-sum-norm``.
"""

from __future__ import annotations

import torch

from trinity.algorithm.catalog import LOSS_AGGREGATIONS
from trinity.algorithm.masked import as_mask

__all__ = ["LOSS_AGGREGATIONS", "aggregate"]


def aggregate(
    values: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean", *, normalizer: float | None = None
) -> torch.Tensor:
    """Return ``values`` reduced under ``mask`` by the aggregation named ``mode``.

    ``normalizer`` is the fixed length ``seq-mean-token-sum-norm`` divides by
    (ignored by the other modes). Raises
    :class:`~trinity.utils.registry.UnknownNameError` for an unknown mode and
    ValueError when ``values`` and ``mask`` are not matching ``[B, T-1]`` tensors.
    """
    result: torch.Tensor = LOSS_AGGREGATIONS.get(mode)(values, as_mask(mask), normalizer=normalizer)
    return result
