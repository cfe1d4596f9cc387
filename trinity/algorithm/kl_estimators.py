"""Per-token estimators of KL(pi || pi_ref), declared in :data:`~trinity.algorithm.catalog.KL_FNS`.

Each takes the log-probs of the sampled tokens under the policy and the
reference (and, optionally, under the behaviour policy) as tensors of one
shape, usually ``[B, T-1]``, and returns the per-token estimate, elementwise
(J. Schulman, "Approximating KL divergence"). The formulas are upstream
Trinity-RFT's (``trinity/algorithm/kl_fn/kl_fn.py``).
"""

from __future__ import annotations

import torch

from trinity.algorithm.masked import check_same_shape


def kl_none(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, old_logprobs: torch.Tensor | None = None
) -> torch.Tensor:
    """Return zeros shaped like ``logprobs`` (no KL); raises ValueError on mismatched shapes."""
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    return torch.zeros_like(logprobs)


def kl_k1(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, old_logprobs: torch.Tensor | None = None
) -> torch.Tensor:
    """Return ``logprobs - ref_logprobs``; raises ValueError on mismatched shapes."""
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    return logprobs - ref_logprobs


def kl_k2(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, old_logprobs: torch.Tensor | None = None
) -> torch.Tensor:
    """Return ``0.5 * (logprobs - ref_logprobs)^2``; raises ValueError on mismatched shapes."""
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    return 0.5 * (logprobs - ref_logprobs).square()


def kl_k3(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, old_logprobs: torch.Tensor | None = None
) -> torch.Tensor:
    """Return ``exp(ref - logp) - (ref - logp) - 1`` (never negative); raises ValueError on mismatched shapes."""
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    log_ratio = ref_logprobs - logprobs
    return torch.expm1(log_ratio) - log_ratio


def kl_low_var(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, old_logprobs: torch.Tensor | None = None
) -> torch.Tensor:
    """Return k3 with ``ref - logp`` clamped to [-20, 20] and the result clamped to [-10, 10].

    Raises ValueError on mismatched shapes.
    """
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    log_ratio = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    return (torch.expm1(log_ratio) - log_ratio).clamp(-10.0, 10.0)


def kl_abs(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, old_logprobs: torch.Tensor | None = None
) -> torch.Tensor:
    """Return ``|logprobs - ref_logprobs|``; raises ValueError on mismatched shapes."""
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs)
    return (logprobs - ref_logprobs).abs()


def kl_corrected_k3(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, old_logprobs: torch.Tensor | None = None
) -> torch.Tensor:
    """Return k3 times the importance ratio ``clamp(exp(logp - old_logp), 0, 2)``; k3 alone without ``old_logprobs``.

    The ratio corrects for tokens sampled by the behaviour policy rather than
    the current one; it carries gradient. Raises ValueError on mismatched shapes.
    """
    check_same_shape(logprobs=logprobs, ref_logprobs=ref_logprobs, old_logprobs=old_logprobs)
    k3 = kl_k3(logprobs, ref_logprobs)
    if old_logprobs is None:
        return k3
    ratio = (logprobs - old_logprobs).clamp(max=20.0).exp().clamp(0.0, 2.0)
    return ratio * k3
