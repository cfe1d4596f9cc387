"""Helpers shared by the advantage functions (none of them is registered)."""

from __future__ import annotations

import torch

from trinity.algorithm.advantage import AdvantageInputs


def spread(per_row: torch.Tensor, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(advantages, returns)``: the [B] ``per_row`` value on each row's response tokens, 0 elsewhere."""
    advantages = torch.where(inputs.mask, per_row.unsqueeze(1).to(inputs.rewards.dtype), per_row.new_zeros(()))
    return advantages, advantages.clone()


def masked_tokens(per_token: torch.Tensor, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(advantages, returns)``: ``per_token`` [B, T-1] kept at response tokens, 0 elsewhere."""
    advantages = torch.where(inputs.mask, per_token, per_token.new_zeros(()))
    return advantages, advantages.clone()


def check_choice(user: str, option: str, value: object, choices: tuple[object, ...]) -> None:
    """Raise ValueError (one line, naming ``user`` and ``option``) unless ``value`` is one of ``choices``."""
    if value not in choices:
        listing = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{user}: {option} must be one of {listing}, got {value!r}")


def sample_std(values: torch.Tensor) -> torch.Tensor:
    """Return the sample standard deviation (n - 1) of a 1-D tensor, or 1 when it has at most one value.

    This is upstream's batch-level standard deviation (``std_cal_level: batch``).
    """
    if values.numel() <= 1:
        return values.new_ones(())
    return values.std()
