"""Helpers shared by the policy losses (none of them is registered)."""

from __future__ import annotations

import math

import torch

from trinity.algorithm.masked import masked_mean
from trinity.algorithm.policy_loss import PolicyLossInputs

#: Log-ratios are clamped to this range before exponentiation, so a ratio never overflows.
MAX_LOG_RATIO = 20.0


def clip_bounds(
    user: str, clip_range: float | None, low: float | None, high: float | None, default: tuple[float, float]
) -> tuple[float, float]:
    """Return ``(1 - low, 1 + high)``; ``low``/``high`` override ``clip_range``, which overrides ``default``.

    Raises ValueError (naming ``user``) for a lower range outside [0, 1) or a negative upper range.
    """
    lo = low if low is not None else clip_range if clip_range is not None else default[0]
    hi = high if high is not None else clip_range if clip_range is not None else default[1]
    if not 0.0 <= lo < 1.0:
        raise ValueError(f"policy loss {user!r}: the lower clip range must be in [0, 1), got {lo}")
    if hi < 0.0:
        raise ValueError(f"policy loss {user!r}: the upper clip range must be at least 0, got {hi}")
    return 1.0 - lo, 1.0 + hi


def log_ratio(inputs: PolicyLossInputs, user: str, against: str = "old_logprobs") -> torch.Tensor:
    """Return ``logprobs - <against>`` [B, T-1] clamped to +-:data:`MAX_LOG_RATIO`, 0 outside the mask.

    ``against`` names the token field of the policy the ratio is taken to (the
    behaviour policy's ``old_logprobs`` by default). Raises ValueError (naming
    ``user``) when that field is missing.
    """
    diff = inputs.masked_logprobs() - inputs.require(against, user)
    return diff.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)


def mean_over_tokens(values: torch.Tensor, inputs: PolicyLossInputs) -> float:
    """Return the detached mean of ``values`` over the response tokens, as a float (for metrics)."""
    return float(masked_mean(values.detach().to(torch.float64), inputs.mask))


def chord_mu(step: int, warmup_steps: int, decay_steps: int, peak: float, valley: float) -> float:
    """Return CHORD's SFT weight at training step ``step``: linear warmup to ``peak``, cosine decay to ``valley``.

    ``step < warmup_steps``: ``peak * step / warmup_steps``; ``step >= warmup_steps + decay_steps``:
    ``valley``; in between ``valley + (peak - valley) * (1 + cos(pi * (step - warmup_steps) / decay_steps)) / 2``.
    """
    if step < warmup_steps:
        return step / warmup_steps * peak
    if step >= warmup_steps + decay_steps:
        return valley
    cosine = 0.5 * (1.0 + math.cos(math.pi * (step - warmup_steps) / decay_steps))
    return (peak - valley) * cosine + valley
