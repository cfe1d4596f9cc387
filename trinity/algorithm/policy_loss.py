"""Policy losses: from the current policy's token log-probs to a scalar loss and metrics.

Calling convention, the same for every entry of :data:`POLICY_LOSS_FNS`::

    inputs = PolicyLossInputs.from_batch(batch, logprobs)   # logprobs: [B, T-1], with gradient
    loss, metrics = POLICY_LOSS_FNS.get("ppo")(inputs, clip_range=0.2)
    # or, checking option names from a config: compute_policy_loss("ppo", inputs, **options)

The data travels in one :class:`PolicyLossInputs`; options are keyword-only.
``loss`` is a 0-d tensor to minimise; ``metrics`` maps names to floats. Positions
outside ``response_mask`` never contribute to the loss, its gradient or the metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from trinity.algorithm.aggregation import aggregate
from trinity.algorithm.masked import as_mask, masked_count, masked_mean, masked_sum
from trinity.algorithm.options import call_registered
from trinity.common.experience import Batch
from trinity.common.registry import Registry

#: ``(inputs, **options) -> (loss, metrics)``
PolicyLossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]

#: Policy losses, by name.
POLICY_LOSS_FNS: Registry[PolicyLossFn] = Registry("policy loss")

#: Log-ratios are clamped to this range before exponentiation, so a ratio never overflows.
MAX_LOG_RATIO = 20.0


@dataclass(frozen=True)
class PolicyLossInputs:
    """What a policy loss may read, all ``[B, T-1]``; each loss says which optional fields it needs."""

    #: Log-probs of the tokens under the policy being trained (carries the gradient).
    logprobs: torch.Tensor
    #: 1 (or True) at trained response tokens.
    response_mask: torch.Tensor
    #: Log-probs under the behaviour policy that generated the tokens (PPO, GSPO).
    old_logprobs: torch.Tensor | None = None
    #: Per-token advantages (PPO, GSPO).
    advantages: torch.Tensor | None = None
    #: Log-probs under the frozen reference model (DPO).
    ref_logprobs: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.logprobs.dim() != 2:
            raise ValueError(f"logprobs must be [B, T-1], got shape {tuple(self.logprobs.shape)}")
        for name in ("response_mask", "old_logprobs", "advantages", "ref_logprobs"):
            value = getattr(self, name)
            if value is not None and value.shape != self.logprobs.shape:
                raise ValueError(
                    f"{name} must have the shape of logprobs {tuple(self.logprobs.shape)}, got {tuple(value.shape)}"
                )

    @classmethod
    def from_batch(
        cls, batch: Batch, logprobs: torch.Tensor, *, ref_logprobs: torch.Tensor | None = None
    ) -> PolicyLossInputs:
        """Return the inputs for ``batch`` (mask, old log-probs, advantages) with the policy's ``logprobs``.

        Raises ValueError when ``logprobs`` or ``ref_logprobs`` is not ``[B, T-1]`` like the batch.
        """
        return cls(
            logprobs=logprobs,
            response_mask=batch.response_mask,
            old_logprobs=batch.old_logprobs,
            advantages=batch.advantages,
            ref_logprobs=ref_logprobs,
        )

    @property
    def mask(self) -> torch.Tensor:
        """The response mask as a bool tensor."""
        return as_mask(self.response_mask)

    def require(self, name: str, user: str) -> torch.Tensor:
        """Return the optional field ``name`` with 0 outside the mask; raises ValueError naming ``user`` if None."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"policy loss {user!r} needs {name}, which was not given")
        assert isinstance(value, torch.Tensor)
        return _masked(value, self.mask)

    def masked_logprobs(self) -> torch.Tensor:
        """Return ``logprobs`` with 0 outside the mask (so padding cannot poison values or gradients)."""
        return _masked(self.logprobs, self.mask)


def _masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, values, values.new_zeros(()))


def _clip_bounds(
    clip_range: float | None, low: float | None, high: float | None, default: tuple[float, float]
) -> tuple[float, float]:
    """Return ``(1 - low, 1 + high)``; ``low``/``high`` override ``clip_range``, which overrides ``default``."""
    lo = low if low is not None else clip_range if clip_range is not None else default[0]
    hi = high if high is not None else clip_range if clip_range is not None else default[1]
    if not 0.0 <= lo < 1.0:
        raise ValueError(f"the lower clip range must be in [0, 1), got {lo}")
    if hi < 0.0:
        raise ValueError(f"the upper clip range must be at least 0, got {hi}")
    return 1.0 - lo, 1.0 + hi


def _clipped_surrogate(
    advantages: torch.Tensor, ratio: torch.Tensor, bounds: tuple[float, float]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the per-token PPO loss ``max(-A r, -A clip(r))`` and where clipping changed it."""
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(bounds[0], bounds[1])
    return torch.maximum(unclipped, clipped), clipped > unclipped


@POLICY_LOSS_FNS.register("ppo")
def ppo_loss(
    inputs: PolicyLossInputs,
    *,
    clip_range: float = 0.2,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    dual_clip: float | None = None,
    aggregation: str = "token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return the PPO clipped-surrogate loss and its metrics.

    With ``r = exp(logp - old_logp)`` per token, the token loss is
    ``max(-A r, -A clip(r, 1 - low, 1 + high))`` (``clip_range_low`` /
    ``clip_range_high`` default to ``clip_range``); with ``dual_clip = c > 1``,
    tokens with ``A < 0`` are further bounded by ``-A c`` (Ye et al., 2020).
    Token losses are reduced with ``aggregation``. Metrics: ``pg_loss``,
    ``clip_frac`` (tokens whose loss the clip raised), ``dual_clip_frac`` (tokens the
    dual clip bounded, with ``dual_clip``), ``approx_kl`` (mean ``old_logp - logp``),
    ``ratio_mean``. Raises ValueError without ``old_logprobs`` or ``advantages``,
    for clip ranges out of bounds, or ``dual_clip <= 1``.
    """
    bounds = _clip_bounds(clip_range, clip_range_low, clip_range_high, (clip_range, clip_range))
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be greater than 1, got {dual_clip}")
    mask = inputs.mask
    advantages = inputs.require("advantages", "ppo")
    log_ratio = inputs.masked_logprobs() - inputs.require("old_logprobs", "ppo")
    ratio = log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).exp()
    token_loss, clipped = _clipped_surrogate(advantages, ratio, bounds)
    metrics: dict[str, float] = {}
    if dual_clip is not None:
        bound = -advantages * dual_clip
        bounded = (advantages < 0) & (token_loss > bound)
        token_loss = torch.where(bounded, bound, token_loss)
        metrics["dual_clip_frac"] = float(masked_mean(bounded.float(), mask))
    loss = aggregate(token_loss, mask, aggregation)
    metrics.update(
        pg_loss=float(loss.detach()),
        clip_frac=float(masked_mean(clipped.float(), mask)),
        approx_kl=float(masked_mean(-log_ratio.detach(), mask)),
        ratio_mean=float(masked_mean(ratio.detach(), mask)),
    )
    return loss, metrics


@POLICY_LOSS_FNS.register("gspo")
def gspo_loss(
    inputs: PolicyLossInputs,
    *,
    clip_range: float | None = None,
    clip_range_low: float | None = None,
    clip_range_high: float | None = None,
    aggregation: str = "seq-mean-token-mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return the GSPO loss (Group Sequence Policy Optimization, Zheng et al., 2025) and its metrics.

    GSPO clips a *sequence* importance ratio, the geometric mean of the token
    ratios over the response: ``s_i = exp(mean_t (logp_t - old_logp_t))``. It is
    implemented in the paper's GSPO-token form: token ``t`` uses
    ``s_{i,t} = sg[s_i] * pi(y_t) / sg[pi(y_t)]``, equal to ``s_i`` in value, so
    the token loss is ``max(-A_t s_i, -A_t clip(s_i, 1 - low, 1 + high))`` and
    its gradient is ``s_i * grad logp_t`` while unclipped. With one advantage per
    sequence and the default ``seq-mean-token-mean`` aggregation this is exactly
    sequence-level GSPO. Clip ranges default to the paper's 3e-4 (low) and 4e-4
    (high); ``clip_range`` sets both. Metrics: ``pg_loss``, ``clip_frac``
    (clipped tokens), ``seq_ratio_mean``, ``approx_kl`` (mean over sequences of
    ``mean_t (old_logp - logp)``). Raises ValueError without ``old_logprobs`` or
    ``advantages``, or for clip ranges out of bounds.
    """
    bounds = _clip_bounds(clip_range, clip_range_low, clip_range_high, (3e-4, 4e-4))
    mask = inputs.mask
    advantages = inputs.require("advantages", "gspo")
    logprobs = inputs.masked_logprobs()
    seq_log_ratio = masked_mean(logprobs - inputs.require("old_logprobs", "gspo"), mask, dim=-1).detach()
    seq_log_ratio = seq_log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    ratio = (seq_log_ratio.unsqueeze(1) + logprobs - logprobs.detach()).exp()
    token_loss, clipped = _clipped_surrogate(advantages, ratio, bounds)
    loss = aggregate(token_loss, mask, aggregation)
    has_tokens = masked_count(mask, dim=-1) > 0
    return loss, {
        "pg_loss": float(loss.detach()),
        "clip_frac": float(masked_mean(clipped.float(), mask)),
        "seq_ratio_mean": float(masked_mean(seq_log_ratio.exp(), has_tokens)),
        "approx_kl": float(masked_mean(-seq_log_ratio, has_tokens)),
    }


@POLICY_LOSS_FNS.register("sft")
def sft_loss(inputs: PolicyLossInputs, *, aggregation: str = "token-mean") -> tuple[torch.Tensor, dict[str, float]]:
    """Return the negative log-likelihood of the response tokens, reduced with ``aggregation``.

    Metrics: ``sft_loss``. Raises UnknownNameError for an unknown aggregation.
    """
    loss = aggregate(-inputs.masked_logprobs(), inputs.mask, aggregation)
    return loss, {"sft_loss": float(loss.detach())}


@POLICY_LOSS_FNS.register("dpo")
def dpo_loss(
    inputs: PolicyLossInputs, *, beta: float = 0.1, label_smoothing: float = 0.0
) -> tuple[torch.Tensor, dict[str, float]]:
    """Return the DPO loss (Rafailov et al., 2023) averaged over preference pairs, and its metrics.

    Rows come in pairs, interleaved: row ``2k`` is the chosen response and row
    ``2k + 1`` the rejected one of the same prompt (see :func:`interleave_pairs`).
    With ``c = sum(logp - ref_logp)`` over the chosen row's response and ``r`` the
    same for the rejected row, the loss is
    ``-(1 - eps) log sigmoid(beta (c - r)) - eps log sigmoid(-beta (c - r))`` with
    ``eps = label_smoothing`` (conservative DPO). Metrics: ``dpo_loss``,
    ``chosen_reward`` (mean ``beta c``), ``rejected_reward``, ``reward_margin``,
    ``reward_accuracy`` (fraction of pairs with ``c > r``). Raises ValueError
    without ``ref_logprobs``, for an odd or zero number of rows, or
    ``label_smoothing`` outside [0, 0.5).
    """
    rows = inputs.logprobs.shape[0]
    if rows == 0 or rows % 2:
        raise ValueError(f"dpo needs an even, nonzero number of rows (chosen, rejected, ...), got {rows}")
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing}")
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


def interleave_pairs(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """Return the rows of ``chosen`` and ``rejected`` alternated (chosen 0, rejected 0, chosen 1, ...).

    This is the row order :func:`dpo_loss` expects. Raises ValueError on mismatched shapes.
    """
    if chosen.shape != rejected.shape:
        raise ValueError(f"chosen {tuple(chosen.shape)} and rejected {tuple(rejected.shape)} must have one shape")
    return torch.stack((chosen, rejected), dim=1).reshape(-1, *chosen.shape[1:])


def compute_policy_loss(name: str, inputs: PolicyLossInputs, **options: Any) -> tuple[torch.Tensor, dict[str, float]]:
    """Return ``(loss, metrics)`` of the policy loss ``name`` called with ``options``.

    Raises :class:`~trinity.common.registry.UnknownNameError` for an unknown name,
    :class:`~trinity.algorithm.options.UnknownOptionError` for an option the
    loss does not take, and whatever the loss raises.
    """
    return call_registered(POLICY_LOSS_FNS, name, inputs, **options)
