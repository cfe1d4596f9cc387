"""KL divergence estimators between the policy and the reference model, per token.

Each estimator takes ``(logprobs, ref_logprobs)`` of the sampled tokens (any
matching shapes, usually ``[B, T-1]``) and returns the per-token estimate of
KL(pi || pi_ref), elementwise (see J. Schulman, "Approximating KL divergence"):

* ``k1``: ``logp - ref`` (unbiased, high variance, can be negative);
* ``k2``: ``0.5 * (logp - ref)^2``;
* ``k3``: ``exp(ref - logp) - (ref - logp) - 1`` (unbiased, never negative);
* ``low_var_kl``: k3 with the log-ratio clamped to [-20, 20] and the result to [-10, 10], as verl does;
* ``abs``: ``|logp - ref|``.

KL is used either as a reward penalty (:func:`kl_reward_penalty`, classic PPO)
or as a loss term (:func:`kl_loss`, GRPO).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from trinity.algorithm.aggregation import aggregate
from trinity.algorithm.masked import as_mask, check_same_shape, masked_mean
from trinity.common.registry import Registry

#: ``(logprobs, ref_logprobs) -> per-token KL estimate`` (same shape).
KLFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: KL estimators, by name.
KL_FNS: Registry[KLFn] = Registry("KL function")


@KL_FNS.register("k1")
def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Return ``logprobs - ref_logprobs``; raises ValueError on mismatched shapes."""
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    return logprobs - ref_logprobs


@KL_FNS.register("k2")
def kl_k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Return ``0.5 * (logprobs - ref_logprobs)^2``; raises ValueError on mismatched shapes."""
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    return 0.5 * (logprobs - ref_logprobs).square()


@KL_FNS.register("k3")
def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Return ``exp(ref - logp) - (ref - logp) - 1``; raises ValueError on mismatched shapes."""
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    log_ratio = ref_logprobs - logprobs
    return torch.expm1(log_ratio) - log_ratio


@KL_FNS.register("low_var_kl")
def kl_low_var(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Return k3 with ``ref - logp`` clamped to [-20, 20] and the result clamped to [-10, 10].

    Raises ValueError on mismatched shapes.
    """
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    log_ratio = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    return (torch.expm1(log_ratio) - log_ratio).clamp(-10.0, 10.0)


@KL_FNS.register("abs")
def kl_abs(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Return ``|logprobs - ref_logprobs|``; raises ValueError on mismatched shapes."""
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    return (logprobs - ref_logprobs).abs()


def compute_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kl_fn: str = "k1") -> torch.Tensor:
    """Return the per-token KL estimate named ``kl_fn``.

    Raises :class:`~trinity.common.registry.UnknownNameError` for an unknown name.
    """
    return KL_FNS.get(kl_fn)(logprobs, ref_logprobs)


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

    ``token_rewards``, ``logprobs``, ``ref_logprobs`` and ``response_mask`` are
    ``[B, T-1]``; the KL is computed without gradient (it shapes the reward).
    Positions outside ``response_mask`` keep their reward unchanged. Metrics:
    ``kl/reward_penalty_kl`` (mean KL over response tokens) and ``kl/coef``.
    Raises ValueError on mismatched shapes, UnknownNameError for an unknown ``kl_fn``.
    """
    check_same_shape(
        token_rewards=token_rewards, logprobs=logprobs, ref_logprobs=ref_logprobs, response_mask=response_mask
    )
    mask = as_mask(response_mask)
    with torch.no_grad():
        kl = compute_kl(logprobs.detach(), ref_logprobs.detach(), kl_fn)
        kl = torch.where(mask, kl, torch.zeros((), dtype=kl.dtype, device=kl.device))
    penalised = token_rewards - coef * kl.to(token_rewards.dtype)
    metrics = {"kl/reward_penalty_kl": float(masked_mean(kl, mask)), "kl/coef": float(coef)}
    return penalised, metrics


def kl_loss(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    coef: float,
    kl_fn: str = "low_var_kl",
    aggregation: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return ``(coef * aggregated KL, metrics)``: the term to *add* to the policy loss.

    Gradient flows through ``logprobs``. Metrics: ``kl/loss_kl`` (the aggregated
    KL before ``coef``) and ``kl/coef``. Raises ValueError on mismatched shapes,
    UnknownNameError for an unknown ``kl_fn`` or ``aggregation``.
    """
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs, response_mask=response_mask)
    kl = compute_kl(logprobs, ref_logprobs, kl_fn)
    value = aggregate(kl, response_mask, aggregation)
    return coef * value, {"kl/loss_kl": float(value.detach()), "kl/coef": float(coef)}
