"""Policy losses: from the current policy's token log-probs to a scalar loss and metrics.

Calling convention, the same for every entry of :data:`POLICY_LOSS_FNS`::

    inputs = PolicyLossInputs.from_batch(batch, logprobs)   # logprobs: [B, T-1], with gradient
    loss, metrics = POLICY_LOSS_FNS.get("ppo")(inputs, clip_range=0.2)
    # or, checking option names from a config: compute_policy_loss("ppo", inputs, **options)

The data travels in one :class:`PolicyLossInputs`; options are keyword-only.
``loss`` is a 0-d tensor to minimise; ``metrics`` maps names to floats. Positions
outside ``response_mask`` never contribute to the loss, its gradient or the
metrics. The losses live in :mod:`trinity.algorithm.losses`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from trinity.algorithm.aggregation import aggregate
from trinity.algorithm.catalog import POLICY_LOSS_FNS
from trinity.algorithm.masked import as_mask
from trinity.algorithm.options import call_registered
from trinity.common.experience import Batch

__all__ = ["POLICY_LOSS_FNS", "PolicyLossInputs", "compute_policy_loss", "interleave_pairs"]

_TOKEN_FIELDS = ("response_mask", "old_logprobs", "proximal_logprobs", "advantages", "ref_logprobs")


@dataclass(frozen=True)
class PolicyLossInputs:
    """What a policy loss may read (token fields ``[B, T-1]``); each loss says which optional fields it needs."""

    #: Log-probs of the tokens under the policy being trained (carries the gradient).
    logprobs: torch.Tensor
    #: 1 (or True) at trained response tokens.
    response_mask: torch.Tensor
    #: Log-probs under the behaviour policy that generated the tokens (PPO and the other ratio-based losses).
    old_logprobs: torch.Tensor | None = None
    #: Log-probs under the trained policy as it was before this step's update (``ppo`` with ``decoupled``).
    proximal_logprobs: torch.Tensor | None = None
    #: Per-token advantages.
    advantages: torch.Tensor | None = None
    #: Log-probs under the frozen reference model (DPO).
    ref_logprobs: torch.Tensor | None = None
    #: [B] True for expert (SFT) rows (the ``mix`` losses).
    expert_mask: torch.Tensor | None = None
    #: The training step being taken, 1 for the first (``mix_chord``'s schedule).
    global_step: int | None = None
    #: ``mix`` losses: these rows' share of the step's rollout-row loss units (None: the rows are the whole step).
    usual_share: float | None = None
    #: ``mix`` losses: these rows' share of the step's expert-row loss units (None: the rows are the whole step).
    expert_share: float | None = None
    #: The fixed length ``seq-mean-token-sum-norm`` divides by (the maximum response length); None: the mask width.
    agg_normalizer: float | None = None

    def __post_init__(self) -> None:
        if self.logprobs.dim() != 2:
            raise ValueError(f"logprobs must be [B, T-1], got shape {tuple(self.logprobs.shape)}")
        for name in _TOKEN_FIELDS:
            value = getattr(self, name)
            if value is not None and value.shape != self.logprobs.shape:
                raise ValueError(
                    f"{name} must have the shape of logprobs {tuple(self.logprobs.shape)}, got {tuple(value.shape)}"
                )
        if self.expert_mask is not None and self.expert_mask.shape != self.logprobs.shape[:1]:
            raise ValueError(
                f"expert_mask must be [B={self.logprobs.shape[0]}], got shape {tuple(self.expert_mask.shape)}"
            )

    @classmethod
    def from_batch(
        cls,
        batch: Batch,
        logprobs: torch.Tensor,
        *,
        ref_logprobs: torch.Tensor | None = None,
        proximal_logprobs: torch.Tensor | None = None,
        global_step: int | None = None,
    ) -> PolicyLossInputs:
        """Return the inputs for ``batch`` (mask, old log-probs, advantages, expert rows) and the policy's ``logprobs``.

        Raises ValueError when ``logprobs``, ``ref_logprobs`` or ``proximal_logprobs`` is not ``[B, T-1]`` like the
        batch.
        """
        return cls(
            logprobs=logprobs,
            response_mask=batch.response_mask,
            old_logprobs=batch.old_logprobs,
            proximal_logprobs=proximal_logprobs,
            advantages=batch.advantages,
            ref_logprobs=ref_logprobs,
            expert_mask=batch.expert_mask,
            global_step=global_step,
        )

    @property
    def mask(self) -> torch.Tensor:
        """The response mask as a bool tensor."""
        return as_mask(self.response_mask)

    def require(self, name: str, user: str) -> torch.Tensor:
        """Return the token field ``name`` with 0 outside the mask; raises ValueError naming ``user`` if None."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"policy loss {user!r} needs {name}, which was not given")
        assert isinstance(value, torch.Tensor)
        return torch.where(self.mask, value, value.new_zeros(()))

    def require_expert_mask(self, user: str) -> torch.Tensor:
        """Return ``expert_mask`` as a [B] bool tensor; raises ValueError naming ``user`` if it is None."""
        if self.expert_mask is None:
            raise ValueError(f"policy loss {user!r} needs expert_mask, which was not given")
        return as_mask(self.expert_mask)

    def masked_logprobs(self) -> torch.Tensor:
        """Return ``logprobs`` with 0 outside the mask (so padding cannot poison values or gradients)."""
        return torch.where(self.mask, self.logprobs, self.logprobs.new_zeros(()))

    def aggregate(self, values: torch.Tensor, mode: str) -> torch.Tensor:
        """Return ``values`` [B, T-1] reduced over this mask by the aggregation ``mode`` (with ``agg_normalizer``)."""
        return aggregate(values, self.mask, mode, normalizer=self.agg_normalizer)

    def restricted(self, rows: torch.Tensor) -> PolicyLossInputs:
        """Return these inputs with the mask narrowed to the rows where ``rows`` [B] is True."""
        return dataclasses.replace(self, response_mask=self.mask & as_mask(rows).unsqueeze(-1))


def interleave_pairs(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """Return the rows of ``chosen`` and ``rejected`` alternated (chosen 0, rejected 0, chosen 1, ...).

    This is the row order the ``dpo`` loss expects. Raises ValueError on mismatched shapes.
    """
    if chosen.shape != rejected.shape:
        raise ValueError(f"chosen {tuple(chosen.shape)} and rejected {tuple(rejected.shape)} must have one shape")
    return torch.stack((chosen, rejected), dim=1).reshape(-1, *chosen.shape[1:])


def compute_policy_loss(name: str, inputs: PolicyLossInputs, **options: Any) -> tuple[torch.Tensor, dict[str, float]]:
    """Return ``(loss, metrics)`` of the policy loss ``name`` called with ``options``.

    Raises :class:`~trinity.utils.registry.UnknownNameError` for an unknown name,
    :class:`~trinity.algorithm.options.UnknownOptionError` for an option the
    loss does not take, and whatever the loss raises.
    """
    entry = POLICY_LOSS_FNS.get(name)
    if isinstance(entry, type):  # upstream's shape: a PolicyLossFn class
        from trinity.algorithm.class_adapters import call_policy_loss

        return call_policy_loss(entry, inputs, options)
    result: tuple[torch.Tensor, dict[str, float]] = call_registered(POLICY_LOSS_FNS, name, inputs, **options)
    return result
