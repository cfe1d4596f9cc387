"""Advantage functions: from rewards (and critic values) to per-token advantages and returns.

Calling convention, the same for every entry of :data:`ADVANTAGE_FNS`::

    inputs = AdvantageInputs.from_batch(batch)            # or AdvantageInputs(rewards=..., ...)
    advantages, returns = ADVANTAGE_FNS.get("grpo")(inputs, std_normalize=True)
    # or, checking option names from a config: compute_advantages("grpo", inputs, **options)

The data travels in one :class:`AdvantageInputs`; options are keyword-only.
Both outputs are ``[B, T-1]`` tensors (the :class:`~trinity.common.experience.Batch`
alignment), computed without gradient and 0 outside ``response_mask``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from trinity.algorithm.groups import group_log_mean_exp, group_stats
from trinity.algorithm.masked import as_mask, masked_whiten
from trinity.algorithm.options import call_registered
from trinity.algorithm.returns import discounted_returns, generalized_advantage_estimation, outcome_token_rewards
from trinity.common.experience import Batch
from trinity.common.registry import Registry

#: ``(inputs, **options) -> (advantages [B, T-1], returns [B, T-1])``
AdvantageFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]

#: Advantage functions, by name.
ADVANTAGE_FNS: Registry[AdvantageFn] = Registry("advantage function")


@dataclass(frozen=True)
class AdvantageInputs:
    """What an advantage function may read; each function says which optional fields it needs."""

    #: [B] scalar reward of each rollout.
    rewards: torch.Tensor
    #: [B, T-1] 1 (or True) at trained response tokens.
    response_mask: torch.Tensor
    #: [B] group id of each rollout (GRPO, RLOO, OPMD).
    group_index: torch.Tensor | None = None
    #: [B, T-1] critic values (PPO/GAE).
    values: torch.Tensor | None = None
    #: [B, T-1] token-level rewards; when None, each reward sits on its row's last response token.
    token_level_rewards: torch.Tensor | None = None
    #: [B, T-1] per-token KL to the reference (see :mod:`trinity.algorithm.kl`), for a ``kl_coef`` reward penalty.
    kl: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.rewards.dim() != 1:
            raise ValueError(f"rewards must be [B], got shape {tuple(self.rewards.shape)}")
        rows = self.rewards.shape[0]
        if self.response_mask.dim() != 2 or self.response_mask.shape[0] != rows:
            raise ValueError(f"response_mask must be [B={rows}, T-1], got shape {tuple(self.response_mask.shape)}")
        if self.group_index is not None and self.group_index.shape != self.rewards.shape:
            raise ValueError(f"group_index must be [B={rows}], got shape {tuple(self.group_index.shape)}")
        for name in ("values", "token_level_rewards", "kl"):
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
        kl: torch.Tensor | None = None,
    ) -> AdvantageInputs:
        """Return the inputs of ``batch`` (rewards, response mask, groups) plus the given extras.

        Raises ValueError when an extra does not have the batch's ``[B, T-1]`` shape.
        """
        return cls(
            rewards=batch.rewards,
            response_mask=batch.response_mask,
            group_index=batch.group_index,
            values=values,
            token_level_rewards=token_level_rewards,
            kl=kl,
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

    def token_rewards(self, kl_coef: float = 0.0, user: str = "") -> torch.Tensor:
        """Return [B, T-1] token rewards minus ``kl_coef * kl`` at response tokens.

        The token rewards are ``token_level_rewards`` when given, else each row's
        reward on its last response token. Raises ValueError when ``kl_coef`` is
        nonzero and ``kl`` was not given.
        """
        if self.token_level_rewards is not None:
            rewards = self.token_level_rewards
        else:
            rewards = outcome_token_rewards(self.rewards, self.response_mask)
        if kl_coef:
            kl = self.require("kl", user)
            rewards = rewards - kl_coef * torch.where(self.mask, kl, torch.zeros_like(kl)).to(rewards.dtype)
        return rewards


def _spread(per_row: torch.Tensor, inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Broadcast a [B] advantage over each row's response tokens; returns equal advantages."""
    advantages = torch.where(inputs.mask, per_row.unsqueeze(1), per_row.new_zeros(()))
    return advantages, advantages.clone()


@ADVANTAGE_FNS.register("grpo")
def grpo_advantages(
    inputs: AdvantageInputs, *, std_normalize: bool = True, epsilon: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return GRPO advantages: ``(r - mean_group) / (std_group + epsilon)`` on every response token.

    ``std_group`` is the sample standard deviation (n - 1); ``std_normalize=False``
    keeps only the mean subtraction (Dr. GRPO). A group of one, or of equal
    rewards, gets advantage 0. Returns equal advantages. Raises ValueError
    without ``group_index``.
    """
    group_index = inputs.require("group_index", "grpo")
    with torch.no_grad():
        stats = group_stats(inputs.rewards, group_index)
        centred = inputs.rewards - stats.mean
        per_row = centred / (stats.std + epsilon) if std_normalize else centred
        return _spread(per_row, inputs)


@ADVANTAGE_FNS.register("rloo")
def rloo_advantages(inputs: AdvantageInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """Return RLOO advantages: ``r_i - mean(r_j for the other j of i's group)`` on every response token.

    A group of one has no other member and gets advantage 0. Returns equal
    advantages. Raises ValueError without ``group_index``.
    """
    group_index = inputs.require("group_index", "rloo")
    with torch.no_grad():
        stats = group_stats(inputs.rewards, group_index)
        others = (stats.total - inputs.rewards) / (stats.size - 1).clamp(min=1)
        per_row = torch.where(stats.size > 1, inputs.rewards - others, torch.zeros_like(others))
        return _spread(per_row, inputs)


@ADVANTAGE_FNS.register("opmd")
def opmd_advantages(
    inputs: AdvantageInputs, *, baseline: str = "mean", tau: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return Trinity-RFT's online policy mirror descent advantages: ``r_i - b_group`` on every response token.

    As in Trinity-RFT's ``opmd`` advantage function, the baseline of a group of
    n > 1 rollouts is either its mean reward (``baseline="mean"``) or the soft
    maximum ``b = tau * log((1/n) * sum_j exp(r_j / tau))`` (``baseline="logavgexp"``,
    the log-partition of the KL-regularised mirror-descent step with strength
    ``tau``); a group of one has baseline 0, so its advantage is its raw reward.
    No division by a standard deviation. Returns equal advantages. Raises
    ValueError without ``group_index``, for an unknown baseline or ``tau <= 0``.
    """
    group_index = inputs.require("group_index", "opmd")
    if baseline not in ("mean", "logavgexp"):
        raise ValueError(f"opmd baseline must be 'mean' or 'logavgexp', got {baseline!r}")
    with torch.no_grad():
        stats = group_stats(inputs.rewards, group_index)
        if baseline == "mean":
            group_baseline = stats.mean
        else:
            group_baseline = group_log_mean_exp(inputs.rewards, group_index, tau)
        group_baseline = torch.where(stats.size > 1, group_baseline, torch.zeros_like(group_baseline))
        return _spread(inputs.rewards - group_baseline, inputs)


@ADVANTAGE_FNS.register("reinforce_plus_plus")
def reinforce_plus_plus_advantages(
    inputs: AdvantageInputs, *, gamma: float = 1.0, kl_coef: float = 0.0, epsilon: float = 1e-8
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return REINFORCE++ ``(advantages, returns)``.

    Token rewards (see :meth:`AdvantageInputs.token_rewards`, minus ``kl_coef * kl``)
    are discounted with ``gamma`` into returns; the advantages are the returns
    whitened over every response token of the batch (population variance,
    ``epsilon`` inside the square root). Raises ValueError when ``kl_coef`` is
    nonzero without ``kl``, or for ``gamma`` outside [0, 1].
    """
    with torch.no_grad():
        token_rewards = inputs.token_rewards(kl_coef, "reinforce_plus_plus")
        returns = discounted_returns(token_rewards, inputs.response_mask, gamma)
        return masked_whiten(returns, inputs.response_mask, epsilon), returns


def gae_advantages(
    inputs: AdvantageInputs, *, gamma: float = 1.0, lam: float = 1.0, whiten: bool = True, kl_coef: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return PPO's ``(advantages, returns)`` by Generalised Advantage Estimation from the critic ``values``.

    Token rewards are as in :meth:`AdvantageInputs.token_rewards` (minus
    ``kl_coef * kl``); ``returns = GAE advantages + values`` (the critic's target,
    never whitened); ``whiten`` whitens the advantages over the batch's response
    tokens. Raises ValueError without ``values``, when ``kl_coef`` is nonzero
    without ``kl``, or for ``gamma`` / ``lam`` outside [0, 1].
    """
    values = inputs.require("values", "gae")
    with torch.no_grad():
        token_rewards = inputs.token_rewards(kl_coef, "gae")
        advantages, returns = generalized_advantage_estimation(
            token_rewards, values.detach(), inputs.response_mask, gamma, lam
        )
        if whiten:
            advantages = masked_whiten(advantages, inputs.response_mask)
        return advantages, returns


ADVANTAGE_FNS.add("gae", gae_advantages)
ADVANTAGE_FNS.add("ppo", gae_advantages)


def compute_advantages(name: str, inputs: AdvantageInputs, **options: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(advantages, returns)`` of the advantage function ``name`` called with ``options``.

    Raises :class:`~trinity.common.registry.UnknownNameError` for an unknown name,
    :class:`~trinity.algorithm.options.UnknownOptionError` for an option the
    function does not take, and whatever the function raises.
    """
    return call_registered(ADVANTAGE_FNS, name, inputs, **options)
