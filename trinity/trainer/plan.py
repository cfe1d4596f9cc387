"""What one training step computes, resolved once from the algorithm config and the ALGORITHMS registry.

:func:`resolve_plan` turns an :class:`~trinity.common.config.schema.AlgorithmConfig`
into a :class:`TrainingPlan`: which policy loss and options, which advantage
function, whether a frozen reference model and a critic are needed, and where
the KL to the reference goes. Config fields override the algorithm type's
defaults (:class:`~trinity.algorithm.AlgorithmSpec`); every name is checked
against its registry here, so a typo fails when the trainer is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from trinity.algorithm import ADVANTAGE_FNS, ALGORITHMS, KL_FNS, LOSS_AGGREGATIONS, POLICY_LOSS_FNS
from trinity.algorithm.options import check_options, option_names
from trinity.common.config.schema import AlgorithmConfig

#: Advantage functions that read critic values.
VALUE_ADVANTAGES = frozenset({"gae", "ppo"})
#: Policy losses that compare against the behaviour policy's log-probs.
LOSSES_WITHOUT_OLD_LOGPROBS = frozenset({"sft", "dpo"})
#: Policy losses whose rows come in (chosen, rejected) pairs.
PAIRED_LOSSES = frozenset({"dpo"})

#: How a loss term averages: over tokens, over rows that have tokens, or over every row (pair).
Units = Literal["token", "seq", "row"]


class PlanError(ValueError):
    """The algorithm section asks for a combination the trainer cannot run."""


@dataclass(frozen=True)
class TrainingPlan:
    """Everything a trainer step needs to know about the algorithm."""

    algorithm: str
    policy_loss_fn: str
    policy_loss_options: dict[str, Any]
    #: How the policy loss averages (for exact weighting across micro-batches and ranks).
    policy_units: Units
    #: Aggregation mode of the KL and entropy terms.
    aggregation: str
    advantage_fn: str | None
    advantage_options: dict[str, Any]
    use_reference: bool
    use_critic: bool
    #: ``"loss"``: ``kl_coef * KL`` added to the loss; ``"reward"``: subtracted from token rewards; ``"none"``.
    kl_target: Literal["reward", "loss", "none"]
    kl_fn: str | None
    kl_coef: float
    entropy_coef: float
    #: Whether rows come in (chosen, rejected) pairs (DPO).
    paired: bool
    needs_old_logprobs: bool


def _units_for(aggregation: str) -> Units:
    return "token" if aggregation == "token-mean" else "seq"


def resolve_plan(cfg: AlgorithmConfig) -> TrainingPlan:
    """Return the :class:`TrainingPlan` of ``cfg``; raises UnknownNameError / UnknownOptionError / PlanError."""
    spec = ALGORITHMS.get(cfg.algorithm_type)
    loss_name = (cfg.policy_loss_fn or spec.policy_loss_fn).strip().lower()
    loss_fn = POLICY_LOSS_FNS.get(loss_name)
    loss_options = dict(cfg.policy_loss_fn_args)
    aggregation = str(loss_options.get("aggregation") or cfg.loss_agg_mode or spec.loss_aggregation)
    LOSS_AGGREGATIONS.get(aggregation)
    if "aggregation" in option_names(loss_fn):
        loss_options["aggregation"] = aggregation
    check_options(POLICY_LOSS_FNS.kind, loss_name, loss_fn, loss_options)
    paired = loss_name in PAIRED_LOSSES
    policy_units: Units = "row" if paired else _units_for(aggregation)

    advantage_name = (cfg.advantage_fn or spec.advantage_fn or "").strip().lower() or None
    advantage_options = dict(cfg.advantage_fn_args)
    if advantage_name is not None:
        check_options(ADVANTAGE_FNS.kind, advantage_name, ADVANTAGE_FNS.get(advantage_name), advantage_options)
    elif advantage_options:
        raise PlanError(f"algorithm.advantage_fn_args given, but algorithm {spec.name!r} uses no advantage function")

    kl_target: Literal["reward", "loss", "none"]
    if cfg.kl_loss_fn and cfg.kl_penalty_fn:
        raise PlanError("algorithm.kl_loss_fn and algorithm.kl_penalty_fn: set at most one (KL as a loss or a penalty)")
    if cfg.kl_loss_fn:
        kl_target, kl_fn = "loss", cfg.kl_loss_fn
    elif cfg.kl_penalty_fn:
        kl_target, kl_fn = "reward", cfg.kl_penalty_fn
    else:
        kl_target, kl_fn = spec.kl_target, spec.kl_fn or ""
    if cfg.kl_coef < 0:
        raise PlanError(f"algorithm.kl_coef: must be 0 or more, got {cfg.kl_coef}")
    if kl_target == "none" or cfg.kl_coef == 0:
        kl_target, kl_fn = "none", ""
    if kl_fn:
        KL_FNS.get(kl_fn)
    if kl_target == "reward" and advantage_name is None:
        raise PlanError(f"a KL reward penalty needs an advantage function; algorithm {spec.name!r} has none")

    # The reference is needed for a KL term, or when the algorithm's loss reads it (DPO: a reference, no KL).
    use_reference = kl_target != "none" or (spec.use_reference and spec.kl_target == "none" and paired)
    # A critic is trained exactly when the advantage function reads values (PPO's GAE).
    use_critic = advantage_name in VALUE_ADVANTAGES
    return TrainingPlan(
        algorithm=spec.name,
        policy_loss_fn=loss_name,
        policy_loss_options=loss_options,
        policy_units=policy_units,
        aggregation=aggregation,
        advantage_fn=advantage_name,
        advantage_options=advantage_options,
        use_reference=use_reference,
        use_critic=use_critic,
        kl_target=kl_target,
        kl_fn=kl_fn or None,
        kl_coef=float(cfg.kl_coef),
        entropy_coef=float(cfg.entropy_coef),
        paired=paired,
        needs_old_logprobs=loss_name not in LOSSES_WITHOUT_OLD_LOGPROBS,
    )
