"""GRPO-style advantages: each reward centred on its group's mean and scaled by a standard deviation.

As upstream Trinity-RFT: the standard deviation is the sample one (n - 1); a
group of one has mean 0 and standard deviation 1 (so its advantage is its
reward over ``1 + epsilon``); equal rewards give 0. Each row is scored by
:meth:`~trinity.algorithm.advantage.AdvantageInputs.sequence_rewards` (its
reward, less any KL penalty when the trainer gives token-level rewards).
"""

from __future__ import annotations

import torch

from trinity.algorithm.advantage import AdvantageInputs
from trinity.algorithm.advantages.common import check_choice, sample_std, spread
from trinity.algorithm.catalog import OPTION_CHOICES
from trinity.algorithm.groups import group_inverse, group_stats, rank_in_group
from trinity.algorithm.masked import masked_mean

_STD_LEVELS = OPTION_CHOICES["std_cal_level"]


def grpo_advantages(
    inputs: AdvantageInputs,
    *,
    epsilon: float = 1e-6,
    std_threshold: float | None = None,
    duplicate_experiences: bool = False,
    rank_penalty: float | None = None,
    std_cal_level: str = "group",
    std_normalize: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return GRPO ``(advantages, returns)``: ``(r - mean_group) / (std + epsilon)`` on every response token.

    ``std`` is the group's sample standard deviation, or with
    ``std_cal_level="batch"`` that of every reward of the batch (the mean stays
    the group's). ``std_normalize=False`` keeps only the mean subtraction (Dr.
    GRPO; our addition). ``rank_penalty`` (upstream's, arXiv:2506.02355) scales
    each reward by ``1 - rank * rank_penalty`` for the group statistics only,
    ``rank`` being the row's rank by mean old log-prob divided by the group
    size; the numerator keeps the raw reward, as upstream. With
    ``std_threshold``, a group of one or whose standard deviation is at most the
    threshold is *skipped*: its rows get 0 here, and the buffer should drop them
    (:func:`~trinity.algorithm.group_filter.kept_rows`, which also applies
    ``duplicate_experiences``). Returns equal advantages and returns. Raises
    ValueError without ``group_index`` (or ``old_logprobs`` with
    ``rank_penalty``), or for an unknown ``std_cal_level``.
    """
    group_index = inputs.require("group_index", "grpo")
    check_choice("advantage function 'grpo'", "std_cal_level", std_cal_level, _STD_LEVELS)
    with torch.no_grad():
        rewards = inputs.sequence_rewards()
        scored = rewards
        if rank_penalty is not None:
            mean_logprob = masked_mean(inputs.require("old_logprobs", "grpo"), inputs.mask, dim=-1)
            stats = group_stats(rewards, group_index)
            rank = rank_in_group(mean_logprob, group_index).to(rewards.dtype) / stats.size
            scored = rewards * (1 - rank * rank_penalty)
        stats = group_stats(scored, group_index)
        single = stats.size == 1
        mean = torch.where(single, torch.zeros_like(stats.mean), stats.mean)
        std = torch.where(single, torch.ones_like(stats.std), stats.std)
        if std_cal_level == "batch":
            std = sample_std(rewards).expand_as(std)
        centred = rewards - mean
        per_row = centred / (std + epsilon) if std_normalize else centred
        if std_threshold is not None:
            skipped = single | (stats.std <= std_threshold)
            per_row = torch.where(skipped, torch.zeros_like(per_row), per_row)
        return spread(per_row, inputs)


def grpo_verl_advantages(
    inputs: AdvantageInputs, *, epsilon: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return :func:`grpo_advantages` with only ``epsilon`` settable (upstream's trainer-side GRPO); raises alike."""
    return grpo_advantages(inputs, epsilon=epsilon)


def step_wise_grpo_advantages(
    inputs: AdvantageInputs,
    *,
    epsilon: float = 1e-6,
    enable_step_norm: bool = False,
    std_cal_level: str = "group",
    std_threshold: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return multi-step GRPO ``(advantages, returns)``: each episode's normalised last-step reward on all its steps.

    The rows of one episode share ``run_index`` and come in step order, so an
    episode's last row holds its reward. Within each group (task), the last-step
    rewards of its episodes are centred on their mean and divided by their
    sample standard deviation plus ``epsilon`` (a group of one episode: mean 0,
    std 1; ``std_cal_level="batch"``: the std of every last-step reward of the
    batch). Every step of the episode gets that score on its response tokens,
    divided by the episode's number of steps with ``enable_step_norm``. With
    ``std_threshold``, a group of one episode or with std at most the threshold
    is skipped (0 here; the buffer should drop it). Without ``run_index`` each
    row is an episode of its own. Returns equal advantages and returns. Raises
    ValueError without ``group_index`` or for an unknown ``std_cal_level``.
    """
    group_index = inputs.require("group_index", "step_wise_grpo")
    check_choice("advantage function 'step_wise_grpo'", "std_cal_level", std_cal_level, _STD_LEVELS)
    rows = inputs.rewards.shape[0]
    order = torch.arange(rows, device=inputs.rewards.device)
    run_index = inputs.run_index if inputs.run_index is not None else order
    with torch.no_grad():
        run, runs = group_inverse(run_index)
        last_row = order.new_full((runs,), -1).scatter_reduce(0, run, order, reduce="amax")
        steps = torch.zeros(runs, dtype=inputs.rewards.dtype, device=order.device).index_add(
            0, run, torch.ones_like(inputs.rewards)
        )
        last_rewards = inputs.sequence_rewards()[last_row]
        last_groups = group_index[last_row]
        stats = group_stats(last_rewards, last_groups)
        single = stats.size == 1
        mean = torch.where(single, torch.zeros_like(stats.mean), stats.mean)
        std = torch.where(single, torch.ones_like(stats.std), stats.std)
        if std_cal_level == "batch":
            std = sample_std(last_rewards).expand_as(std)
        score = (last_rewards - mean) / (std + epsilon)
        if enable_step_norm:
            score = score / steps
        if std_threshold is not None:
            skipped = single | (stats.std <= std_threshold)
            score = torch.where(skipped, torch.zeros_like(score), score)
        return spread(score[run], inputs)
