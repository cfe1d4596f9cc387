"""Losses over a batch mixing rollouts and expert (SFT) rows: ``mix`` and CHORD's ``mix_chord``.

Rows marked in ``expert_mask`` get an SFT loss, the others the PPO loss, and
the two are combined as ``(1 - mu) * PPO + mu * SFT``. Each part is
aggregated over its own rows; when the trainer splits a step into pieces it
passes each piece's ``usual_share`` / ``expert_share`` (its fraction of the
step's rollout / expert loss units), so the pieces add up to the whole step's
loss. Upstream's bookkeeping options (``use_dynamic_bsz``,
``ppo_mini_batch_size``, ``ppo_micro_batch_size_per_gpu``, ``ngpus_trainer``,
``train_batch_size_usual``, ``train_batch_size_expert``) only served that
weighting there; they are accepted and not needed here.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from trinity.algorithm.losses.clipped import ppo_loss
from trinity.algorithm.losses.common import chord_mu
from trinity.algorithm.losses.supervised import sft_loss, sft_phi_loss
from trinity.algorithm.policy_loss import PolicyLossInputs

_SFT = Callable[..., tuple[torch.Tensor, dict[str, float]]]


def _mixed(
    user: str,
    inputs: PolicyLossInputs,
    mu: float,
    *,
    sft: _SFT,
    clip: tuple[float | None, float | None, float | None],
    agg_modes: tuple[str, str | None, str | None],
) -> tuple[torch.Tensor, dict[str, float]]:
    if not 0.0 <= mu <= 1.0:
        raise ValueError(f"policy loss {user!r}: mu must be in [0, 1], got {mu}")
    expert = inputs.require_expert_mask(user)
    loss_agg_mode, sft_agg, grpo_agg = agg_modes
    usual_loss, usual_metrics = ppo_loss(
        inputs.restricted(~expert),
        clip_range=clip[0],
        clip_range_low=clip[1],
        clip_range_high=clip[2],
        loss_agg_mode=grpo_agg or loss_agg_mode,
    )
    expert_loss, expert_metrics = sft(inputs.restricted(expert), loss_agg_mode=sft_agg or loss_agg_mode)
    usual_share = 1.0 if inputs.usual_share is None else inputs.usual_share
    expert_share = 1.0 if inputs.expert_share is None else inputs.expert_share
    loss = (1.0 - mu) * usual_loss * usual_share + mu * expert_loss * expert_share
    metrics = {f"usual/{k}": v for k, v in usual_metrics.items()}
    metrics.update({f"expert/{k}": v for k, v in expert_metrics.items()})
    metrics["loss"] = float(loss.detach())
    metrics["expert_row_frac"] = float(expert.float().mean()) if expert.numel() else 0.0
    return loss, metrics


def mix_loss(
    inputs: PolicyLossInputs,
    *,
    mu: float = 0.1,
    clip_range: float | None = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    use_dynamic_bsz: bool | None = None,
    ppo_mini_batch_size: int = 1,
    ppo_micro_batch_size_per_gpu: int = 1,
    ngpus_trainer: int = 1,
    train_batch_size_usual: int = 1,
    train_batch_size_expert: int = 1,
    loss_agg_mode: str = "token-mean",
    sft_loss_agg_mode: str | None = None,
    grpo_loss_agg_mode: str | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return ``(1 - mu) * PPO(rollout rows) * usual_share + mu * SFT(expert rows) * expert_share`` and metrics.

    The PPO part (with upstream's default dual clip 3.0) is aggregated with
    ``grpo_loss_agg_mode`` (default ``loss_agg_mode``), the SFT part with
    ``sft_loss_agg_mode`` (default ``loss_agg_mode``). The bookkeeping options
    are accepted and unused (see the module docstring). Metrics: ``usual/*``
    (PPO's), ``expert/sft_loss``, ``loss``, ``expert_row_frac``. Raises
    ValueError without ``expert_mask`` (or what PPO needs on rollout rows), or
    for ``mu`` outside [0, 1].
    """
    return _mixed(
        "mix",
        inputs,
        mu,
        sft=sft_loss,
        clip=(clip_range, clip_range_low, clip_range_high),
        agg_modes=(loss_agg_mode, sft_loss_agg_mode, grpo_loss_agg_mode),
    )


def mix_chord_loss(
    inputs: PolicyLossInputs,
    *,
    mu_warmup_steps: int = 0,
    mu_decay_steps: int = 0,
    mu_peak: float = 0.1,
    mu_valley: float = 0.1,
    enable_phi_function: bool = True,
    clip_range: float | None = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    use_dynamic_bsz: bool | None = None,
    ppo_mini_batch_size: int = 1,
    ppo_micro_batch_size_per_gpu: int = 1,
    ngpus_trainer: int = 1,
    train_batch_size_usual: int = 1,
    train_batch_size_expert: int = 1,
    loss_agg_mode: str = "token-mean",
    sft_loss_agg_mode: str | None = None,
    grpo_loss_agg_mode: str | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return CHORD's mixed loss: :func:`mix_loss` with ``mu`` scheduled over the training step.

    ``mu`` is :func:`~trinity.algorithm.losses.common.chord_mu` at
    ``global_step`` (warmup to ``mu_peak`` over ``mu_warmup_steps``, cosine
    decay to ``mu_valley`` over ``mu_decay_steps``); the expert rows get the
    phi-weighted SFT loss (``enable_phi_function``, CHORD-phi) or plain SFT
    (CHORD-mu). Metrics: as :func:`mix_loss`, plus ``mu``. Raises ValueError
    without ``global_step`` or ``expert_mask``.
    """
    if inputs.global_step is None:
        raise ValueError("policy loss 'mix_chord' needs global_step, which was not given")
    mu = chord_mu(inputs.global_step, mu_warmup_steps, mu_decay_steps, mu_peak, mu_valley)
    loss, metrics = _mixed(
        "mix_chord",
        inputs,
        mu,
        sft=sft_phi_loss if enable_phi_function else sft_loss,
        clip=(clip_range, clip_range_low, clip_range_high),
        agg_modes=(loss_agg_mode, sft_loss_agg_mode, grpo_loss_agg_mode),
    )
    metrics["mu"] = mu
    return loss, metrics
