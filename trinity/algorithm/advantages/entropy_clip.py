"""Clip_B and Clip_V: GRPO advantages plus a token filter driven by the policy's entropy dynamics.

As upstream Trinity-RFT's ``clipb`` / ``clipv`` (arXiv:2602.03392). Both keep
GRPO's advantages and take some negative-advantage tokens out of the loss,
judged by a per-token signal built from the policy before the update: the
probability ``p = exp(old log-prob)``, the entropy ``H`` and, for Clip_V,
``N = H * sum p^2 + sum p^2 log p``. With ``S = p (H + log p)``, Clip_B drops
tokens whose ``S`` lies more than ``mu`` batch standard deviations below the
batch mean; Clip_V drops tokens whose ``N - S`` lies more than ``mu`` standard
deviations above 0 (the statistics are over every response token of the
batch, population variance), at most ``max_frac`` of the tokens (the most
extreme first). The trainer recomputes ``entropies`` and ``nec`` before the
update and multiplies the response mask by the returned filter, so the loss,
its token counts and the KL and entropy terms all see the clipped mask.
"""

from __future__ import annotations

import torch

from trinity.algorithm.advantage import AdvantageInputs, TokenFilter
from trinity.algorithm.advantages.grpo import grpo_advantages

_FLAT = 1e-12


def _masked_mean_std(values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    weight = mask.to(torch.float32)
    count = weight.sum().clamp_min(1.0)
    mean = (values * weight).sum() / count
    variance = ((values - mean) ** 2 * weight).sum() / count
    return mean, variance.sqrt()


def _share_clipped(mask: torch.Tensor, keep: torch.Tensor, where: torch.Tensor) -> float:
    """Return the share of the response tokens at ``where`` that were dropped (0 when there are none there)."""
    selected = mask & where
    total = int(selected.sum())
    return 0.0 if total == 0 else 1.0 - int((selected & keep).sum()) / total


def _filter_metrics(mask: torch.Tensor, keep: torch.Tensor, advantages: torch.Tensor) -> dict[str, float]:
    everywhere = torch.ones_like(mask)
    return {
        "frac_clipped": _share_clipped(mask, keep, everywhere),
        "frac_clipped_pos": _share_clipped(mask, keep, advantages > 0),
        "frac_clipped_neg": _share_clipped(mask, keep, advantages < 0),
    }


def _entropy_signal(inputs: AdvantageInputs, user: str) -> torch.Tensor:
    """Return ``S = p (H + log p)`` per token, in float32, from the old log-probs and the entropies."""
    logprobs = inputs.require("old_logprobs", user).to(torch.float32)
    entropies = inputs.require("entropies", user).to(torch.float32)
    return logprobs.exp() * (entropies + logprobs)


def clipb_advantages(
    inputs: AdvantageInputs, *, epsilon: float = 1e-6, mu: float = 2.5
) -> tuple[torch.Tensor, torch.Tensor, TokenFilter]:
    """Return GRPO ``(advantages, returns)`` and the Clip_B filter: every token is kept except negative-advantage
    tokens whose ``S`` is below ``mean(S) - mu * std(S)``; all are kept when ``S`` does not vary.

    Raises ValueError without ``group_index``, ``old_logprobs`` or ``entropies``.
    """
    advantages, returns = grpo_advantages(inputs, epsilon=epsilon)
    mask = inputs.mask
    with torch.no_grad():
        signal = _entropy_signal(inputs, "clipb")
        mean, std = _masked_mean_std(signal, mask)
        if float(std) < _FLAT:
            keep = torch.ones_like(mask)
        else:
            keep = (advantages >= 0) | (signal - mean >= -(mu * std))
    metrics = {**_filter_metrics(mask, keep, advantages), "ES": float(mean), "varS": float(std**2)}
    return advantages, returns, TokenFilter(keep=keep, metrics=metrics)


def clipv_advantages(
    inputs: AdvantageInputs, *, epsilon: float = 1e-6, mu: float = 2.0, max_frac: float = 1e-4
) -> tuple[torch.Tensor, torch.Tensor, TokenFilter]:
    """Return GRPO ``(advantages, returns)`` and the Clip_V filter.

    ``D = N - S`` per token; tokens with a non-positive advantage and ``D``
    above ``mu * std(D)`` leave the loss. When that is more than ``max_frac``
    of the tokens and the negative-advantage ones among them are more than
    ``max(1, int(max_frac * tokens))``, only that many negative-advantage
    tokens leave it, those of highest ``D`` (zero-advantage ones found above
    still leave, as upstream). Raises ValueError without ``group_index``,
    ``old_logprobs``, ``entropies`` or ``nec``.
    """
    advantages, returns = grpo_advantages(inputs, epsilon=epsilon)
    mask = inputs.mask
    with torch.no_grad():
        gap = inputs.require("nec", "clipv").to(torch.float32) - _entropy_signal(inputs, "clipv")
        _, std = _masked_mean_std(gap, mask)
        if float(std) < _FLAT:
            keep = torch.ones_like(mask)
        else:
            within = gap <= mu * std
            keep = (advantages > 0) | within
            tokens = int(mask.sum())
            clipped = int((mask & ~keep).sum())
            budget = max(int(max_frac * max(tokens, 1)), 1)
            negative = mask & (advantages < 0) & ~within
            if clipped > max_frac * max(tokens, 1) and int(negative.sum()) > budget:
                scores = gap.masked_fill(~negative, float("-inf")).flatten()
                worst = torch.topk(scores, budget).indices
                chosen = torch.zeros_like(scores, dtype=torch.bool)
                chosen[worst] = True
                keep = keep | negative
                keep = keep & ~chosen.view_as(keep)
    metrics = {**_filter_metrics(mask, keep, advantages), "stdD": float(std)}
    return advantages, returns, TokenFilter(keep=keep, metrics=metrics)
