"""Policy-gradient losses ``-w A logp`` with a stopped-gradient weight ``w`` built from the ratio: TOPR, CISPO, SAPO,
sPPO and REC.

``r = exp(logp - old_logp)`` per token (the log-ratio clamped to +-20). Each
returns ``(loss, metrics)``; the weights carry no gradient, as upstream.
"""

from __future__ import annotations

import torch

from trinity.algorithm.catalog import OPTION_CHOICES
from trinity.algorithm.losses.common import log_ratio, mean_over_tokens
from trinity.algorithm.masked import masked_mean
from trinity.algorithm.policy_loss import PolicyLossInputs


def topr_loss(
    inputs: PolicyLossInputs, *, advantage_threshold: float = 0.0, loss_agg_mode: str = "token-mean"
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return the TOPR loss (Tapered Off-Policy REINFORCE, arXiv:2503.14286) and its metrics.

    Token loss ``-sg(alpha) A logp`` with ``alpha = clamp(r, 0, 1)`` where
    ``A <= advantage_threshold`` and 1 elsewhere. Metrics: ``topr_loss``,
    ``avg_alpha``, ``avg_ratio``. Raises ValueError without ``old_logprobs`` or ``advantages``.
    """
    advantages = inputs.require("advantages", "topr")
    ratio = log_ratio(inputs, "topr").exp()
    alpha = torch.where(advantages <= advantage_threshold, ratio.clamp(0.0, 1.0), torch.ones_like(ratio)).detach()
    loss = inputs.aggregate(-alpha * advantages * inputs.masked_logprobs(), loss_agg_mode)
    return loss, {
        "topr_loss": float(loss.detach()),
        "avg_alpha": mean_over_tokens(alpha, inputs),
        "avg_ratio": mean_over_tokens(ratio, inputs),
    }


def cispo_loss(
    inputs: PolicyLossInputs,
    *,
    clip_range_low: float = 1.0,
    clip_range_high: float = 0.28,
    enable_mask_clip: bool = False,
    mask_clip_range_low: float = 1.0,
    mask_clip_range_high: float = 0.28,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return the CISPO loss (arXiv:2506.13585) and its metrics.

    Token loss ``-A sg(clamp(r, 1 - clip_range_low, 1 + clip_range_high)) sg(m) logp``
    where ``m`` is 1, or with ``enable_mask_clip`` 0 at tokens with
    ``r > 1 + mask_clip_range_high`` and ``A > 0`` or ``r < 1 - mask_clip_range_low``
    and ``A < 0``. Metrics: ``cispo_loss``, ``approx_kl``, ``unmasked_frac``.
    Raises ValueError without ``old_logprobs`` or ``advantages``.
    """
    advantages = inputs.require("advantages", "cispo")
    logr = log_ratio(inputs, "cispo")
    ratio = logr.exp()
    weight = ratio.clamp(1.0 - clip_range_low, 1.0 + clip_range_high)
    keep = torch.ones_like(ratio)
    if enable_mask_clip:
        too_high = (ratio > 1.0 + mask_clip_range_high) & (advantages > 0)
        too_low = (ratio < 1.0 - mask_clip_range_low) & (advantages < 0)
        keep = torch.where(too_high | too_low, torch.zeros_like(keep), keep)
    token_loss = -advantages * (weight * keep).detach() * inputs.masked_logprobs()
    loss = inputs.aggregate(token_loss, loss_agg_mode)
    return loss, {
        "cispo_loss": float(loss.detach()),
        "approx_kl": mean_over_tokens(-logr, inputs),
        "unmasked_frac": mean_over_tokens(keep, inputs),
    }


def sapo_loss(
    inputs: PolicyLossInputs, *, tau_pos: float = 1.0, tau_neg: float = 1.05, loss_agg_mode: str = "token-mean"
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return the SAPO loss (Soft Adaptive Policy Optimization, arXiv:2511.20347) and its metrics.

    Token loss ``-A sg(f(r)) logp`` with the soft gate ``f(r) = sigmoid(tau (r - 1)) * 4 / tau``,
    ``tau = tau_pos`` where ``A > 0`` else ``tau_neg``. Metrics: ``sapo_loss``,
    ``approx_kl``, ``avg_soft_gate``, ``avg_ratio``, ``pos_adv_frac``. Raises
    ValueError without ``old_logprobs`` or ``advantages``, for a non-positive
    temperature, or ``tau_neg < tau_pos``.
    """
    if tau_pos <= 0 or tau_neg < tau_pos:
        raise ValueError(f"policy loss 'sapo': need 0 < tau_pos <= tau_neg, got tau_pos={tau_pos}, tau_neg={tau_neg}")
    advantages = inputs.require("advantages", "sapo")
    logr = log_ratio(inputs, "sapo")
    ratio = logr.exp()
    tau = torch.where(advantages > 0, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau
    loss = inputs.aggregate(-advantages * gate.detach() * inputs.masked_logprobs(), loss_agg_mode)
    return loss, {
        "sapo_loss": float(loss.detach()),
        "approx_kl": mean_over_tokens(-logr, inputs),
        "avg_soft_gate": mean_over_tokens(gate, inputs),
        "avg_ratio": mean_over_tokens(ratio, inputs),
        "pos_adv_frac": mean_over_tokens((advantages > 0).float(), inputs),
    }


def sppo_loss(
    inputs: PolicyLossInputs, *, epsilon: float = 0.3, loss_agg_mode: str = "token-mean"
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return the sPPO loss (arXiv:2108.05828) and its metrics.

    Token loss ``-A (logp - old_logp)`` where ``1 / (1 + epsilon) <= r <= 1 + epsilon``,
    0 elsewhere. Metrics: ``pg_loss``, ``clip_frac`` (tokens outside the range).
    Raises ValueError without ``old_logprobs`` or ``advantages``, or for ``epsilon <= 0``.
    """
    if epsilon <= 0:
        raise ValueError(f"policy loss 'sppo': epsilon must be positive, got {epsilon}")
    advantages = inputs.require("advantages", "sppo")
    logr = log_ratio(inputs, "sppo")
    ratio = logr.detach().exp()
    inside = (ratio >= 1.0 / (1.0 + epsilon)) & (ratio <= 1.0 + epsilon)
    token_loss = torch.where(inside, -advantages * logr, torch.zeros_like(logr))
    loss = inputs.aggregate(token_loss, loss_agg_mode)
    return loss, {"pg_loss": float(loss.detach()), "clip_frac": mean_over_tokens((~inside).float(), inputs)}




def _rec_in_range(
    clip_mode: str,
    ratio: torch.Tensor,
    seq_ratio: torch.Tensor,
    advantages: torch.Tensor,
    bounds: tuple[float, float, float, float],
) -> torch.Tensor:
    low, high, low_prime, high_prime = bounds
    positive, negative = advantages >= 0, advantages <= 0
    if clip_mode == "two-side":
        return (ratio >= 1 - low) & (ratio <= 1 + high)
    if clip_mode == "one-side":
        return ((ratio <= 1 + high) & positive) | ((ratio >= 1 - low) & negative)
    if clip_mode == "gspo-one-side":
        return ((seq_ratio <= 1 + high) & positive) | ((seq_ratio >= 1 - low) & negative)
    if clip_mode == "ring":
        inside = (ratio >= 1 - low) & (ratio <= 1 + high)
        return inside | (positive & (ratio <= 1 - low_prime)) | (negative & (ratio >= 1 + high_prime))
    return torch.ones_like(ratio, dtype=torch.bool)


def _check_rec(
    clip_mode: str, weight: str, regularizer: str, bounds: tuple[float, ...], *, coef: float, temp: float
) -> None:
    for option, value in (("clip_mode", clip_mode), ("weight", weight), ("regularizer", regularizer)):
        choices = OPTION_CHOICES[option]
        if value not in choices:
            raise ValueError(f"policy loss 'rec': {option} must be one of {', '.join(choices)}, got {value!r}")
    low, high, low_prime, high_prime = bounds
    if not (0.0 < low <= 1.0 and high > 0.0 and 0.0 < low_prime <= 1.0 and high_prime > 0.0):
        raise ValueError(
            "policy loss 'rec': need 0 < epsilon_low <= 1, 0 < epsilon_high, 0 < epsilon_low_prime <= 1 and "
            f"0 < epsilon_high_prime, got {low}, {high}, {low_prime}, {high_prime}"
        )
    if coef < 0.0 or temp <= 0.0:
        raise ValueError(f"policy loss 'rec': need regularizer_coef >= 0 and temp > 0, got {coef} and {temp}")


def rec_loss(
    inputs: PolicyLossInputs,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    epsilon_low_prime: float = 0.4,
    epsilon_high_prime: float = 0.4,
    clip_mode: str = "none",
    weight: str = "none",
    regularizer: str = "none",
    regularizer_coef: float = 0.0,
    temp: float = 1.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return the REC-token loss (upstream Trinity-RFT's) and its metrics.

    Token loss ``-A' logp`` on tokens whose (stopped) ratio is in range, 0
    elsewhere. ``clip_mode``: ``none`` (all in range), ``two-side``
    (``1 - epsilon_low <= r <= 1 + epsilon_high``), ``one-side`` (the upper
    bound where ``A >= 0``, the lower where ``A <= 0``), ``gspo-one-side``
    (one-side on the sequence ratio ``exp(mean_t (logp - old_logp))``) or
    ``ring`` (two-side, plus ``r <= 1 - epsilon_low_prime`` where ``A >= 0``
    and ``r >= 1 + epsilon_high_prime`` where ``A <= 0``). ``A'`` is ``A``
    (``weight: none``), ``A r`` (``importance_sampling``), ``A`` times the
    sequence ratio (``gspo_importance_sampling``) or ``A exp(A / temp)``
    (``advantage``). ``regularizer``: ``forward-kl`` subtracts
    ``regularizer_coef * logp``, ``k2`` adds ``regularizer_coef * (logp - old_logp)^2``.
    Reduced by token mean (sequence mean of token means with ``gspo-one-side``),
    whatever ``algorithm.loss_agg_mode`` says, as upstream. Metrics: ``pg_loss``,
    ``clip_frac``. Raises ValueError without ``old_logprobs`` or ``advantages``,
    or for an unknown mode or an out-of-range option.
    """
    bounds = (epsilon_low, epsilon_high, epsilon_low_prime, epsilon_high_prime)
    _check_rec(clip_mode, weight, regularizer, bounds, coef=regularizer_coef, temp=temp)
    mask = inputs.mask
    advantages = inputs.require("advantages", "rec")
    logprobs = inputs.masked_logprobs()
    logr = log_ratio(inputs, "rec")
    ratio = logr.detach().exp()
    seq_ratio = masked_mean(logr.detach(), mask, dim=-1).exp().unsqueeze(-1)
    in_range = _rec_in_range(clip_mode, ratio, seq_ratio, advantages, bounds)
    if weight == "importance_sampling":
        advantages = advantages * ratio
    elif weight == "gspo_importance_sampling":
        advantages = advantages * seq_ratio
    elif weight == "advantage":
        advantages = advantages * torch.exp(advantages / temp)
    token_loss = torch.where(in_range, -advantages * logprobs, torch.zeros_like(logprobs))
    if regularizer == "forward-kl":
        token_loss = token_loss - regularizer_coef * logprobs
    elif regularizer == "k2":
        token_loss = token_loss + regularizer_coef * logr.square()
    loss = inputs.aggregate(token_loss, "seq-mean-token-mean" if clip_mode == "gspo-one-side" else "token-mean")
    return loss, {"pg_loss": float(loss.detach()), "clip_frac": mean_over_tokens((~in_range).float(), inputs)}
