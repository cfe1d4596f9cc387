"""Advantage functions: from rewards (and critic values, teacher log-probs, ...) to per-token advantages.

Calling convention, the same for every entry of :data:`ADVANTAGE_FNS`::

    inputs = AdvantageInputs.from_batch(batch)            # or AdvantageInputs(rewards=..., ...)
    advantages, returns = ADVANTAGE_FNS.get("grpo")(inputs, epsilon=1e-6)
    # or, checking option names from a config: compute_advantages("grpo", inputs, **options)

The data travels in one :class:`AdvantageInputs`; options are keyword-only.
Both outputs are ``[B, T-1]`` tensors (the :class:`~trinity.common.experience.Batch`
alignment), computed without gradient and 0 outside ``response_mask``. The
functions live in :mod:`trinity.algorithm.advantages`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from trinity.algorithm.catalog import ADVANTAGE_FNS
from trinity.algorithm.masked import as_mask, masked_sum
from trinity.algorithm.options import call_registered
from trinity.algorithm.returns import outcome_token_rewards
from trinity.common.experience import Batch

__all__ = ["ADVANTAGE_FNS", "AdvantageInputs", "TokenFilter", "compute_advantages", "compute_filtered_advantages"]

_ROW_FIELDS = ("group_index", "run_index", "reward_baselines")
_TOKEN_FIELDS = ("values", "token_level_rewards", "old_logprobs", "teacher_logprobs", "entropies", "nec")


@dataclass(frozen=True)
class AdvantageInputs:
    """What an advantage function may read; each function says which optional fields it needs."""

    #: [B] scalar reward of each rollout.
    rewards: torch.Tensor
    #: [B, T-1] 1 (or True) at trained response tokens.
    response_mask: torch.Tensor
    #: [B] rows sharing a value are rollouts of one task (GRPO-style groups).
    group_index: torch.Tensor | None = None
    #: [B] rows sharing a value are the steps of one episode, in row order (multi-step GRPO).
    run_index: torch.Tensor | None = None
    #: [B, T-1] critic values (PPO/GAE).
    values: torch.Tensor | None = None
    #: [B, T-1] token-level rewards (e.g. after a KL penalty); when None, each reward sits on its row's last token.
    token_level_rewards: torch.Tensor | None = None
    #: [B, T-1] behaviour-policy log-probs (distillation; GRPO's rank penalty).
    old_logprobs: torch.Tensor | None = None
    #: [B, T-1] a teacher model's log-probs of the sampled tokens (distillation).
    teacher_logprobs: torch.Tensor | None = None
    #: [B] a baseline reward per row (ReMax: the reward of the greedy rollout of the same prompt).
    reward_baselines: torch.Tensor | None = None
    #: [B, T-1] the policy's entropy at each token before the update (recomputed by the trainer; Clip_B/Clip_V).
    entropies: torch.Tensor | None = None
    #: [B, T-1] Clip_V's ``N = H * sum p^2 + sum p^2 log p`` at each token before the update (trainer).
    nec: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.rewards.dim() != 1:
            raise ValueError(f"rewards must be [B], got shape {tuple(self.rewards.shape)}")
        rows = self.rewards.shape[0]
        if self.response_mask.dim() != 2 or self.response_mask.shape[0] != rows:
            raise ValueError(f"response_mask must be [B={rows}, T-1], got shape {tuple(self.response_mask.shape)}")
        for name in _ROW_FIELDS:
            value = getattr(self, name)
            if value is not None and value.shape != self.rewards.shape:
                raise ValueError(f"{name} must be [B={rows}], got shape {tuple(value.shape)}")
        for name in _TOKEN_FIELDS:
            value = getattr(self, name)
            if value is not None and value.shape != self.response_mask.shape:
                raise ValueError(
                    f"{name} must have the shape of response_mask {tuple(self.response_mask.shape)}, "
                    f"got {tuple(value.shape)}"
                )

    @classmethod
    def from_batch(
        cls,
        batch: Batch,
        *,
        values: torch.Tensor | None = None,
        token_level_rewards: torch.Tensor | None = None,
        reward_baselines: torch.Tensor | None = None,
        entropies: torch.Tensor | None = None,
        nec: torch.Tensor | None = None,
    ) -> AdvantageInputs:
        """Return the inputs of ``batch`` (rewards, mask, groups, episodes, old and teacher log-probs) plus extras.

        The batch's ``teacher_logprobs`` are zeros for rows that had none: the
        caller checks that a distillation algorithm's experiences carry them.
        Raises ValueError when an extra does not have the batch's shape.
        """
        return cls(
            rewards=batch.rewards,
            response_mask=batch.response_mask,
            group_index=batch.group_index,
            run_index=batch.run_index,
            values=values,
            token_level_rewards=token_level_rewards,
            old_logprobs=batch.old_logprobs,
            teacher_logprobs=batch.teacher_logprobs,
            reward_baselines=reward_baselines,
            entropies=entropies,
            nec=nec,
        )

    @property
    def mask(self) -> torch.Tensor:
        """The response mask as a bool tensor."""
        return as_mask(self.response_mask)

    def require(self, name: str, user: str) -> torch.Tensor:
        """Return the optional field ``name``; raises ValueError naming ``user`` if it is None."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"advantage function {user!r} needs {name}, which was not given")
        assert isinstance(value, torch.Tensor)
        return value

    def token_rewards(self) -> torch.Tensor:
        """Return [B, T-1] token rewards: ``token_level_rewards`` when given, else each reward on its last token."""
        if self.token_level_rewards is not None:
            return torch.where(self.mask, self.token_level_rewards, self.token_level_rewards.new_zeros(()))
        return outcome_token_rewards(self.rewards, self.response_mask)

    def sequence_rewards(self) -> torch.Tensor:
        """Return [B] each row's summed token rewards (its reward, less any KL penalty applied per token)."""
        if self.token_level_rewards is None:
            return self.rewards
        return masked_sum(self.token_level_rewards, self.mask, dim=-1)


@dataclass(frozen=True)
class TokenFilter:
    """Tokens an advantage function takes out of the loss (Clip_B / Clip_V), with its metrics."""

    #: [B, T-1] True at tokens that stay in the loss; the trainer multiplies the response mask by it.
    keep: torch.Tensor
    #: Metric name -> value (reported under ``advantage/``).
    metrics: dict[str, float]


def compute_filtered_advantages(
    name: str, inputs: AdvantageInputs, **options: Any
) -> tuple[torch.Tensor, torch.Tensor, TokenFilter | None]:
    """Return ``(advantages, returns, token_filter)`` of the advantage function ``name`` called with ``options``.

    ``token_filter`` is None unless the function also masks tokens out of the
    loss (it then returns a third element, a :class:`TokenFilter`). Raises
    :class:`~trinity.utils.registry.UnknownNameError` for an unknown name,
    :class:`~trinity.algorithm.options.UnknownOptionError` for an option the
    function does not take, and whatever the function raises.
    """
    result = call_registered(ADVANTAGE_FNS, name, inputs, **options)
    if len(result) == 3:
        return result[0], result[1], result[2]
    return result[0], result[1], None


def compute_advantages(name: str, inputs: AdvantageInputs, **options: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(advantages, returns)`` of the advantage function ``name`` called with ``options``.

    A function that also masks tokens has its :class:`TokenFilter` dropped
    here: callers that apply it use :func:`compute_filtered_advantages`.
    Raises as that does.
    """
    advantages, returns, _ = compute_filtered_advantages(name, inputs, **options)
    return advantages, returns
