"""Algorithm types: the default pieces of each, and what it needs from the explorer, buffer and trainer.

An :class:`AlgorithmSpec` is plain data naming its pieces by their registry
names; building one checks every name against the light registries of
:mod:`trinity.algorithm.catalog` (nothing is imported). The built-in types
are upstream Trinity-RFT 0.5's, with its defaults (``AlgorithmType.default_config()``
over ``AlgorithmConfigValidator``'s global defaults: ``kl_penalty_fn: none``,
``kl_loss_fn: k2``, ``entropy_loss_fn: default``, ``advantage_fn: ppo``).
Upstream's per-type ``repeat_times`` defaults never apply (the config's own
default 1 is not None), so they are not recorded here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from trinity.algorithm.catalog import (
    ADVANTAGE_FNS,
    ALGORITHMS,
    ENTROPY_LOSS_FNS,
    KL_FNS,
    POLICY_LOSS_FNS,
    SAMPLE_STRATEGY_OPTIONS,
)
from trinity.utils.registry import Registry, UnknownNameError

#: Where advantages are computed: by the trainer on the whole batch (upstream's
#: ``compute_advantage_in_trainer``), group-locally in the buffer, or nowhere (the loss reads none).
AdvantagePlace = Literal["trainer", "buffer", "none"]
#: The training data's schema: rollouts, SFT conversations, preference pairs.
Schema = Literal["experience", "sft", "dpo"]


def _known(registry: Registry[Any], name: str) -> bool:
    return name in registry or ("." in name and registry.allow_import_path)


@dataclass(frozen=True)
class AlgorithmSpec:
    """What an algorithm type is made of by default, and what it needs."""

    #: The algorithm's name (its key in :data:`ALGORITHMS`).
    name: str
    #: Default policy loss (a :data:`~trinity.algorithm.catalog.POLICY_LOSS_FNS` name).
    policy_loss_fn: str
    #: Default advantage function (an :data:`~trinity.algorithm.catalog.ADVANTAGE_FNS` name); None when none is used.
    advantage_fn: str | None
    #: Where advantages are computed (``"none"`` exactly when ``advantage_fn`` is None).
    advantage_in: AdvantagePlace
    #: Default options of the default advantage function (upstream's ``advantage_fn_args`` default), if any.
    advantage_fn_args: Mapping[str, Any] | None = None
    #: Default KL estimator subtracted from the rewards (``none``: no penalty).
    kl_penalty_fn: str = "none"
    #: Default KL estimator added to the loss (``none``: no KL loss).
    kl_loss_fn: str = "k2"
    #: Whether the KL loss cannot be turned off by name (upstream's DPO forces ``k2`` over ``none``).
    kl_loss_required: bool = False
    #: Default entropy term (``default``, ``mix``, ``none``).
    entropy_loss_fn: str = "default"
    #: Default sample strategy.
    sample_strategy: str = "default"
    #: Whether upstream trains a critic for it.
    use_critic: bool = False
    #: Whether upstream runs a reference model for it (the plan runs one only when something reads it).
    use_reference: bool = True
    #: The training data's schema.
    schema: Schema = "experience"
    #: Whether it only trains on a dataset (no explorer: modes ``both``, ``explore`` are refused).
    train_only: bool = False
    #: Whether the trainer may reorder rows to balance sequence lengths across ranks (not DPO's pairs).
    can_balance_batch: bool = True
    #: One line for documentation.
    summary: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        checks: list[tuple[Registry[Any], str | None]] = [
            (POLICY_LOSS_FNS, self.policy_loss_fn),
            (ADVANTAGE_FNS, self.advantage_fn),
            (KL_FNS, self.kl_penalty_fn),
            (KL_FNS, self.kl_loss_fn),
            (ENTROPY_LOSS_FNS, self.entropy_loss_fn),
        ]
        for registry, name in checks:
            if name is not None and not _known(registry, name):
                raise UnknownNameError(f"algorithm {self.name!r}: {registry.unknown_message(name)}")
        if self.sample_strategy not in SAMPLE_STRATEGY_OPTIONS and "." not in self.sample_strategy:
            raise ValueError(f"algorithm {self.name!r}: unknown sample strategy {self.sample_strategy!r}")
        if (self.advantage_fn is None) != (self.advantage_in == "none"):
            raise ValueError(f"algorithm {self.name!r}: advantage_in must be 'none' exactly when advantage_fn is None")
        if self.advantage_fn_args is not None:
            object.__setattr__(self, "advantage_fn_args", MappingProxyType(dict(self.advantage_fn_args)))


def register_algorithm(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Register ``spec`` under its name and return it; raises DuplicateNameError if the name is taken."""
    ALGORITHMS.add(spec.name, spec)
    return spec


# The built-in types, declared lazily under these names (and aliases) in trinity.algorithm.catalog.

SFT = AlgorithmSpec(
    name="sft", policy_loss_fn="sft", advantage_fn=None, advantage_in="none", kl_loss_fn="none",
    entropy_loss_fn="none", use_reference=False, schema="sft", train_only=True,
    summary="supervised fine-tuning on a dataset",
)
PPO = AlgorithmSpec(
    name="ppo", policy_loss_fn="ppo", advantage_fn="ppo", advantage_in="trainer", use_critic=True,
    summary="PPO with a critic (GAE)",
)
GRPO = AlgorithmSpec(
    name="grpo", policy_loss_fn="ppo", advantage_fn="grpo", advantage_in="buffer",
    summary="PPO loss on group-normalised rewards",
)
REINFORCE_PLUS_PLUS = AlgorithmSpec(
    name="reinforceplusplus", policy_loss_fn="ppo", advantage_fn="reinforceplusplus", advantage_in="trainer",
    summary="PPO loss on batch-whitened returns",
)
RLOO = AlgorithmSpec(
    name="rloo", policy_loss_fn="ppo", advantage_fn="rloo", advantage_in="trainer",
    summary="PPO loss on leave-one-out baselines",
)
OPMD = AlgorithmSpec(
    name="opmd", policy_loss_fn="opmd", advantage_fn="opmd", advantage_in="buffer",
    summary="online policy mirror descent",
)
ASYMRE = AlgorithmSpec(
    name="asymre", policy_loss_fn="opmd", advantage_fn="asymre", advantage_in="buffer", kl_loss_fn="none",
    entropy_loss_fn="none", use_reference=False, summary="asymmetric REINFORCE (shifted group baseline)",
)
DPO = AlgorithmSpec(
    name="dpo", policy_loss_fn="dpo", advantage_fn=None, advantage_in="none", kl_loss_required=True,
    schema="dpo", train_only=True, can_balance_batch=False, summary="direct preference optimisation on pairs",
)
TOPR = AlgorithmSpec(
    name="topr", policy_loss_fn="topr", advantage_fn="reinforce", advantage_in="buffer",
    summary="tapered off-policy REINFORCE",
)
CISPO = AlgorithmSpec(
    name="cispo", policy_loss_fn="cispo", advantage_fn="grpo", advantage_in="buffer",
    summary="clipped importance-sampling-weight policy optimisation",
)
GSPO = AlgorithmSpec(
    name="gspo", policy_loss_fn="gspo", advantage_fn="grpo", advantage_in="buffer",
    summary="group sequence policy optimisation",
)
SAPO = AlgorithmSpec(
    name="sapo", policy_loss_fn="sapo", advantage_fn="grpo", advantage_in="buffer",
    summary="soft adaptive policy optimisation",
)
MIX = AlgorithmSpec(
    name="mix", policy_loss_fn="mix", advantage_fn="grpo", advantage_in="buffer", entropy_loss_fn="mix",
    sample_strategy="mix", summary="GRPO on rollouts plus SFT on expert data",
)
MIX_CHORD = AlgorithmSpec(
    name="mix_chord", policy_loss_fn="mix_chord", advantage_fn="grpo", advantage_in="buffer",
    entropy_loss_fn="mix", sample_strategy="mix", summary="CHORD: GRPO plus scheduled SFT on expert data",
)
RAFT = AlgorithmSpec(
    name="raft", policy_loss_fn="sft", advantage_fn=None, advantage_in="none", kl_loss_fn="none",
    entropy_loss_fn="none", use_reference=False, summary="SFT on (filtered) rollouts",
)
SPPO = AlgorithmSpec(
    name="sppo", policy_loss_fn="sppo", advantage_fn="opmd", advantage_in="buffer", kl_loss_fn="none",
    entropy_loss_fn="none", use_reference=False, summary="sPPO: log-ratio objective inside a trust band",
)
REC = AlgorithmSpec(
    name="rec", policy_loss_fn="rec", advantage_fn="rec", advantage_in="buffer",
    summary="REC: clipped REINFORCE variants",
)
MULTI_STEP_GRPO = AlgorithmSpec(
    name="multi_step_grpo", policy_loss_fn="ppo", advantage_fn="step_wise_grpo", advantage_in="buffer",
    summary="GRPO over multi-step episodes",
)
ON_POLICY_DISTILL = AlgorithmSpec(
    name="on_policy_distill", policy_loss_fn="ppo", advantage_fn="on_policy_distill", advantage_in="trainer",
    advantage_fn_args={"kl_coef": 1.0}, kl_loss_fn="none", entropy_loss_fn="none", use_reference=False,
    summary="on-policy distillation from a teacher's log-probs",
)
JSD = AlgorithmSpec(
    name="jsd", policy_loss_fn="ppo", advantage_fn="jsd", advantage_in="trainer",
    advantage_fn_args={"kl_coef": 1.0, "lambda_coef": 0.5}, kl_loss_fn="none", entropy_loss_fn="none",
    use_reference=False, summary="on-policy distillation by Jensen-Shannon divergence",
)
GRPO_VERL = AlgorithmSpec(
    name="grpo_verl", policy_loss_fn="ppo", advantage_fn="grpo", advantage_in="trainer",
    summary="GRPO with advantages computed in the trainer (a KL reward penalty may apply)",
)
