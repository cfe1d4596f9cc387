"""Importance-ratio surrogates: PPO (with dual clip), GSPO and plain importance sampling.

With ``r = exp(logp - old_logp)`` per token (the log-ratio clamped to
+-20), each returns ``(loss, metrics)`` reduced with ``loss_agg_mode``.
"""

from __future__ import annotations

import torch

from trinity.algorithm.arguments import check_decoupled
from trinity.algorithm.losses.common import MAX_LOG_RATIO, clip_bounds, log_ratio, mean_over_tokens
from trinity.algorithm.masked import masked_count, masked_mean
from trinity.algorithm.policy_loss import PolicyLossInputs


def _clipped_surrogate(
    advantages: torch.Tensor, ratio: torch.Tensor, bounds: tuple[float, float]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the per-token loss ``max(-A r, -A clip(r))`` and where clipping raised it."""
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(bounds[0], bounds[1])
    return torch.maximum(unclipped, clipped), clipped > unclipped


def _behaviour_weight(inputs: PolicyLossInputs, cap: float | None) -> tuple[torch.Tensor, dict[str, float]]:
    """Return the per-token weight ``exp(proximal_logp - old_logp)`` (no gradient) and its metrics.

    Tokens whose weight exceeds ``cap`` get weight 0. Metrics:
    ``behav_imp_weight_mean`` (before the cap), ``behav_approx_kl`` (mean
    ``old_logp - proximal_logp``) and, with a cap, ``behav_imp_weight_capped_frac``.
    """
    behaviour = inputs.require("old_logprobs", "ppo")
    logw = (inputs.require("proximal_logprobs", "ppo") - behaviour).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).detach()
    weight = logw.exp()
    metrics = {
        "behav_imp_weight_mean": mean_over_tokens(weight, inputs),
        "behav_approx_kl": mean_over_tokens(-logw, inputs),
    }
    if cap is not None:
        over = weight > cap
        weight = torch.where(over, torch.zeros_like(weight), weight)
        metrics["behav_imp_weight_capped_frac"] = mean_over_tokens(over.float(), inputs)
    return weight, metrics


def ppo_loss(
    inputs: PolicyLossInputs,
    *,
    clip_range: float | None = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    clip_ratio_c: float | None = 3.0,
    loss_agg_mode: str = "token-mean",
    enable_sequence_masking: bool = False,
    delta_sequence_masking: float = 0.1,
    fallback_to_policy_gradient: bool = False,
    decoupled: bool = False,
    behav_imp_weight_cap: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return the PPO clipped-surrogate loss with upstream's dual clip, and its metrics.

    The token loss is ``max(-A r, -A clip(r, 1 - low, 1 + high))``
    (``clip_range_low`` / ``clip_range_high`` default to ``clip_range``, 0.2 when unset); where
    ``A < 0`` it is further bounded by ``-A * clip_ratio_c`` (dual clip, Ye et
    al., 2020; ``None`` turns it off). ``enable_sequence_masking`` (DeepSeek-V3.2)
    zeroes the negative-advantage tokens of rows whose mean ``old_logp - logp``
    exceeds ``delta_sequence_masking``. ``fallback_to_policy_gradient`` uses
    ``r = exp(logp - sg(logp))`` (value 1, gradient of the log-prob), ignoring
    ``old_logprobs``.

    ``decoupled`` is the decoupled objective for stale rollouts (Fu et al.,
    2025): ``old_logprobs`` are the behaviour policy's (the engine that sampled
    the tokens), ``proximal_logprobs`` the trained policy's before this step's
    update. The ratio is then ``r = exp(logp - proximal_logp)`` (clipping and
    the dual clip as above, around the proximal policy) and each token's loss is
    multiplied by ``w = exp(proximal_logp - old_logp)`` (no gradient);
    ``behav_imp_weight_cap`` sets ``w`` to 0 on the tokens where it exceeds
    the cap. With ``proximal_logp == old_logp`` it is plain PPO.

    Metrics: ``pg_loss``, ``clip_frac``, ``dual_clip_frac``
    (with the dual clip), ``approx_kl`` (mean ``anchor_logp - logp``, the
    anchor being the proximal policy when decoupled, else the behaviour one),
    ``ratio_mean``, and ``seq_mask/masked_tokens`` / ``seq_mask/mean_sequence_kl``
    with sequence masking; decoupled adds ``behav_imp_weight_mean``,
    ``behav_approx_kl`` and, with a cap, ``behav_imp_weight_capped_frac``.
    Raises ValueError without ``advantages`` (or ``old_logprobs`` unless
    falling back, or ``proximal_logprobs`` when decoupled), for clip ranges
    out of bounds, ``clip_ratio_c <= 1``, a cap of 1 or less, a cap without
    ``decoupled``, or ``decoupled`` with ``fallback_to_policy_gradient``.
    """
    check_decoupled({"decoupled": decoupled, "behav_imp_weight_cap": behav_imp_weight_cap,
                     "fallback_to_policy_gradient": fallback_to_policy_gradient}, "ppo")
    bounds = clip_bounds("ppo", clip_range, clip_range_low, clip_range_high, (0.2, 0.2))
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"policy loss 'ppo': clip_ratio_c must be greater than 1, got {clip_ratio_c}")
    mask = inputs.mask
    advantages = inputs.require("advantages", "ppo")
    if fallback_to_policy_gradient:
        logprobs = inputs.masked_logprobs()
        logr = logprobs - logprobs.detach()
    else:
        logr = log_ratio(inputs, "ppo", "proximal_logprobs" if decoupled else "old_logprobs")
    ratio = logr.exp()
    token_loss, clipped = _clipped_surrogate(advantages, ratio, bounds)
    metrics: dict[str, float] = {}
    if clip_ratio_c is not None:
        bound = -advantages * clip_ratio_c
        bounded = (advantages < 0) & (token_loss > bound)
        token_loss = torch.where(bounded, bound, token_loss)
        metrics["dual_clip_frac"] = mean_over_tokens(bounded.float(), inputs)
    if enable_sequence_masking:
        sequence_kl = masked_mean(-logr.detach(), mask, dim=-1)
        dropped = (advantages < 0) & (sequence_kl > delta_sequence_masking).unsqueeze(-1)
        token_loss = torch.where(dropped, torch.zeros_like(token_loss), token_loss)
        metrics["seq_mask/masked_tokens"] = mean_over_tokens(dropped.float(), inputs)
        metrics["seq_mask/mean_sequence_kl"] = float(masked_mean(sequence_kl, masked_count(mask, dim=-1) > 0))
    if decoupled:
        weight, behaviour_metrics = _behaviour_weight(inputs, behav_imp_weight_cap)
        token_loss = token_loss * weight
        metrics.update(behaviour_metrics)
    loss = inputs.aggregate(token_loss, loss_agg_mode)
    metrics.update(
        pg_loss=float(loss.detach()),
        clip_frac=mean_over_tokens(clipped.float(), inputs),
        approx_kl=mean_over_tokens(-logr, inputs),
        ratio_mean=mean_over_tokens(ratio, inputs),
    )
    return loss, metrics


def gspo_loss(
    inputs: PolicyLossInputs,
    *,
    clip_range: float | None = None,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    loss_agg_mode: str = "seq-mean-token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return the GSPO loss (Group Sequence Policy Optimization, Zheng et al., 2025) and its metrics.

    GSPO clips a *sequence* ratio, the geometric mean of the token ratios:
    ``s_i = exp(mean_t (logp_t - old_logp_t))``, in the GSPO-token form: token
    ``t`` uses ``sg[s_i] * pi(y_t) / sg[pi(y_t)]``, equal to ``s_i`` in value,
    so the token loss is ``max(-A_t s_i, -A_t clip(s_i, 1 - low, 1 + high))``.
    Clip ranges default to 3e-4 (low) and 4e-4 (high); ``clip_range`` sets
    both. Metrics: ``pg_loss``, ``clip_frac``, ``seq_ratio_mean``,
    ``approx_kl`` and upstream's ``ppo_kl_seq`` (mean over sequences of
    ``mean_t (old_logp - logp)``), upstream's ``ppo_kl`` (the same mean over tokens).
    Raises ValueError without ``old_logprobs`` or ``advantages``, or for clip
    ranges out of bounds.
    """
    bounds = clip_bounds("gspo", clip_range, clip_range_low, clip_range_high, (3e-4, 4e-4))
    mask = inputs.mask
    advantages = inputs.require("advantages", "gspo")
    logprobs = inputs.masked_logprobs()
    token_log_ratio = (logprobs - inputs.require("old_logprobs", "gspo")).detach()
    seq_log_ratio = masked_mean(token_log_ratio, mask, dim=-1)
    seq_log_ratio = seq_log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    ratio = (seq_log_ratio.unsqueeze(1) + logprobs - logprobs.detach()).exp()
    token_loss, clipped = _clipped_surrogate(advantages, ratio, bounds)
    loss = inputs.aggregate(token_loss, loss_agg_mode)
    has_tokens = masked_count(mask, dim=-1) > 0
    return loss, {
        "pg_loss": float(loss.detach()),
        "clip_frac": mean_over_tokens(clipped.float(), inputs),
        "seq_ratio_mean": float(masked_mean(seq_log_ratio.exp(), has_tokens)),
        "approx_kl": float(masked_mean(-seq_log_ratio, has_tokens)),
        "ppo_kl": mean_over_tokens(-token_log_ratio, inputs),
        "ppo_kl_seq": float(masked_mean(-seq_log_ratio, has_tokens)),
    }


def importance_sampling_loss(
    inputs: PolicyLossInputs, *, loss_agg_mode: str = "token-mean"
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return the unclipped importance-sampling loss ``-A r``, reduced with ``loss_agg_mode``, and its metrics.

    Metrics: ``pg_loss``, ``ratio_mean``, ``approx_kl``. Raises ValueError
    without ``old_logprobs`` or ``advantages``.
    """
    advantages = inputs.require("advantages", "importance_sampling")
    logr = log_ratio(inputs, "importance_sampling")
    ratio = logr.exp()
    loss = inputs.aggregate(-advantages * ratio, loss_agg_mode)
    return loss, {
        "pg_loss": float(loss.detach()),
        "ratio_mean": mean_over_tokens(ratio, inputs),
        "approx_kl": mean_over_tokens(-logr, inputs),
    }
