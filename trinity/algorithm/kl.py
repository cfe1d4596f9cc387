"""KL to the reference model: as a penalty on the rewards, or as a term of the loss.

The estimators (``k1``, ``k2``, ``k3``, ``low_var_kl``, ``abs``,
``corrected_k3``, ``none``) are declared in :data:`KL_FNS` and live in
:mod:`trinity.algorithm.kl_estimators`. A config sets a coefficient
``kl_coef`` (upstream default 0.001) for each use; the reward penalty may
adapt it towards a target KL (:class:`AdaptiveKLController`).
"""

from __future__ import annotations

import torch

from trinity.algorithm.aggregation import aggregate
from trinity.algorithm.catalog import KL_FNS
from trinity.algorithm.masked import as_mask, check_same_shape, masked_count, masked_mean

__all__ = ["KL_FNS", "AdaptiveKLController", "compute_kl", "kl_loss", "kl_reward_penalty"]


def compute_kl(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kl_fn: str = "k1", old_logprobs: torch.Tensor | None = None
) -> torch.Tensor:
    """Return the per-token KL estimate named ``kl_fn`` (``old_logprobs`` is read by ``corrected_k3`` only).

    Raises :class:`~trinity.utils.registry.UnknownNameError` for an unknown
    name, ValueError on mismatched shapes.
    """
    entry = KL_FNS.get(kl_fn)
    if isinstance(entry, type):  # upstream's shape: a KLFn class
        from trinity.algorithm.class_adapters import call_kl

        kl: torch.Tensor = call_kl(entry, logprobs, ref_logprobs)
        return kl
    result: torch.Tensor = entry(logprobs, ref_logprobs, old_logprobs)
    return result


def sequence_mean_kl(kl: torch.Tensor, response_mask: torch.Tensor) -> float:
    """Return upstream's batch KL: the mean over rows (with a response token) of each row's mean KL."""
    mask = as_mask(response_mask)
    per_row = masked_mean(kl, mask, dim=-1)
    return float(masked_mean(per_row, masked_count(mask, dim=-1) > 0))


def kl_reward_penalty(
    token_rewards: torch.Tensor,
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    coef: float,
    kl_fn: str = "k1",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return ``(token_rewards - coef * kl at response positions, metrics)``.

    ``token_rewards``, ``logprobs`` (the behaviour policy's, as upstream),
    ``ref_logprobs`` and ``response_mask`` are ``[B, T-1]``; the KL is computed
    without gradient. Positions outside ``response_mask`` keep their reward.
    Metrics: ``kl/reward_penalty_kl`` (upstream's batch KL, see
    :func:`sequence_mean_kl`; feed it to :meth:`AdaptiveKLController.update`)
    and ``kl/coef``. Raises ValueError on mismatched shapes, UnknownNameError
    for an unknown ``kl_fn``.
    """
    check_same_shape(
        token_rewards=token_rewards, logprobs=logprobs, ref_logprobs=ref_logprobs, response_mask=response_mask
    )
    mask = as_mask(response_mask)
    with torch.no_grad():
        kl = compute_kl(logprobs.detach(), ref_logprobs.detach(), kl_fn)
        kl = torch.where(mask, kl, torch.zeros((), dtype=kl.dtype, device=kl.device))
    penalised = token_rewards - coef * kl.to(token_rewards.dtype)
    metrics = {"kl/reward_penalty_kl": sequence_mean_kl(kl, mask), "kl/coef": float(coef)}
    return penalised, metrics


def kl_loss(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    coef: float,
    kl_fn: str = "low_var_kl",
    aggregation: str = "token-mean",
    old_logprobs: torch.Tensor | None = None,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return ``(coef * aggregated KL, metrics)``: the term to *add* to the policy loss.

    Gradient flows through ``logprobs``; ``old_logprobs`` is read by
    ``corrected_k3`` only; ``normalizer`` by ``seq-mean-token-sum-norm`` only.
    Metrics: ``kl/loss_kl`` (the aggregated KL before ``coef``) and ``kl/coef``.
    Raises ValueError on mismatched shapes, UnknownNameError for an unknown
    ``kl_fn`` or ``aggregation``.
    """
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs, response_mask=response_mask)
    mask = as_mask(response_mask)
    kl = compute_kl(logprobs, ref_logprobs, kl_fn, old_logprobs)
    value = aggregate(kl, mask, aggregation, normalizer=normalizer)
    return coef * value, {"kl/loss_kl": float(value.detach()), "kl/coef": float(coef)}


class AdaptiveKLController:
    """The reward penalty's adaptive coefficient (upstream ``KLFn(adaptive=True)``, Ziegler et al., 2019).

    After each step, ``coef *= 1 + clip(kl / target_kl - 1, -0.2, 0.2) * batch_size / horizon``.
    """

    def __init__(self, kl_coef: float, target_kl: float, horizon: float) -> None:
        """Raises ValueError for a negative ``kl_coef`` or a non-positive ``target_kl`` / ``horizon``."""
        if kl_coef < 0:
            raise ValueError(f"kl_coef must be at least 0, got {kl_coef}")
        if target_kl <= 0 or horizon <= 0:
            raise ValueError(f"target_kl and horizon must be positive, got {target_kl} and {horizon}")
        self.coef = float(kl_coef)
        self.target_kl = float(target_kl)
        self.horizon = float(horizon)

    def update(self, current_kl: float, batch_size: int) -> float:
        """Move the coefficient after a step whose batch KL was ``current_kl`` over ``batch_size`` rows; return it."""
        error = min(max(current_kl / self.target_kl - 1.0, -0.2), 0.2)
        self.coef *= 1.0 + error * batch_size / self.horizon
        return self.coef

    def state_dict(self) -> dict[str, float]:
        """Return the coefficient, for checkpoints."""
        return {"coef": self.coef}

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Restore the coefficient saved by :meth:`state_dict`."""
        self.coef = float(state["coef"])
