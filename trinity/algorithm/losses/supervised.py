"""Likelihood-based losses: SFT and its CHORD variants, DPO, and OPMD's regularised policy gradient."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from trinity.algorithm.masked import masked_sum
from trinity.algorithm.policy_loss import PolicyLossInputs


def sft_loss(inputs: PolicyLossInputs, *, loss_agg_mode: str = "token-mean") -> tuple[torch.Tensor, dict[str, float]]:
    """Return the negative log-likelihood of the response tokens, reduced with ``loss_agg_mode``.

    Metrics: ``sft_loss``. Raises UnknownNameError for an unknown aggregation.
    """
    loss = inputs.aggregate(-inputs.masked_logprobs(), loss_agg_mode)
    return loss, {"sft_loss": float(loss.detach())}


def sft_is_loss(
    inputs: PolicyLossInputs, *, loss_agg_mode: str = "token-mean"
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return the SFT loss with each token weighted by its stopped probability: ``-sg(p) logp`` (CHORD).

    Metrics: ``sft_is_loss``. Raises UnknownNameError for an unknown aggregation.
    """
    logprobs = inputs.masked_logprobs()
    loss = inputs.aggregate(-logprobs * logprobs.detach().exp(), loss_agg_mode)
    return loss, {"sft_is_loss": float(loss.detach())}


def sft_phi_loss(
    inputs: PolicyLossInputs, *, loss_agg_mode: str = "token-mean", cutoff_prob: float = 1.0
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return the SFT loss weighted by ``sg(p (1 - p))`` (CHORD's phi, which down-weights near-certain tokens).

    With ``cutoff_prob < 1`` the log-prob is clamped at ``log(cutoff_prob)``
    (tokens above it get no gradient); the weight uses the unclamped ``p``.
    Metrics: ``sft_phi_loss``. Raises ValueError for ``cutoff_prob`` outside (0, 1].
    """
    if not 0.0 < cutoff_prob <= 1.0:
        raise ValueError(f"policy loss 'sft_phi': cutoff_prob must be in (0, 1], got {cutoff_prob}")
    logprobs = inputs.masked_logprobs()
    prob = logprobs.detach().exp()
    if cutoff_prob < 1.0:
        logprobs = logprobs.clamp(max=math.log(cutoff_prob))
    loss = inputs.aggregate(-logprobs * prob * (1.0 - prob), loss_agg_mode)
    return loss, {"sft_phi_loss": float(loss.detach())}


def opmd_loss(
    inputs: PolicyLossInputs, *, tau: float = 1.0, loss_agg_mode: str = "token-mean"
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return OPMD's loss ``aggregate(-A logp) / (1 + tau)`` and its metrics.

    ``tau`` is the strength of the mirror-descent regulariser (0: plain policy
    gradient, as AsymRE uses it). Metrics: ``opmd_loss``. Raises ValueError
    without ``advantages`` or for ``tau < 0``.
    """
    if tau < 0:
        raise ValueError(f"policy loss 'opmd': tau must be at least 0, got {tau}")
    advantages = inputs.require("advantages", "opmd")
    loss = inputs.aggregate(-advantages * inputs.masked_logprobs(), loss_agg_mode) / (1.0 + tau)
    return loss, {"opmd_loss": float(loss.detach())}


def dpo_loss(
    inputs: PolicyLossInputs, *, beta: float = 0.1, label_smoothing: float = 0.0
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return the DPO loss (Rafailov et al., 2023) averaged over preference pairs, and its metrics.

    Rows come in pairs, interleaved: row ``2k`` is the chosen response and row
    ``2k + 1`` the rejected one of the same prompt (see
    :func:`~trinity.algorithm.policy_loss.interleave_pairs`). With
    ``c = sum(logp - ref_logp)`` over the chosen row's response and ``r`` the
    same for the rejected row, the loss of a pair is
    ``-(1 - eps) log sigmoid(beta (c - r)) - eps log sigmoid(-beta (c - r))``
    with ``eps = label_smoothing``. Metrics: ``dpo_loss``, ``chosen_reward``
    (mean ``beta c``), ``rejected_reward``, ``reward_margin``,
    ``reward_accuracy`` (fraction of pairs with ``c > r``). Raises ValueError
    without ``ref_logprobs``, for an odd or zero number of rows, or
    ``label_smoothing`` outside [0, 0.5).
    """
    rows = inputs.logprobs.shape[0]
    if rows == 0 or rows % 2:
        raise ValueError(f"policy loss 'dpo': got {rows} rows; needs an even, nonzero number (chosen, rejected, ...)")
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"policy loss 'dpo': label_smoothing must be in [0, 0.5), got {label_smoothing}")
    mask = inputs.mask
    policy = masked_sum(inputs.masked_logprobs(), mask, dim=-1)
    reference = masked_sum(inputs.require("ref_logprobs", "dpo"), mask, dim=-1).detach()
    implicit = policy - reference
    chosen, rejected = implicit[0::2], implicit[1::2]
    margin = beta * (chosen - rejected)
    losses = -(1.0 - label_smoothing) * F.logsigmoid(margin) - label_smoothing * F.logsigmoid(-margin)
    loss = losses.mean()
    return loss, {
        "dpo_loss": float(loss.detach()),
        "chosen_reward": float(beta * chosen.detach().mean()),
        "rejected_reward": float(beta * rejected.detach().mean()),
        "reward_margin": float(margin.detach().mean()),
        "reward_accuracy": float((chosen > rejected).float().mean()),
    }
