"""Algorithm types: which parts of the framework an algorithm uses, and its defaults.

An :class:`AlgorithmSpec` names its advantage function, policy loss, KL
estimator and loss aggregation by their registry names; building one checks
every name exists, so a typo fails at registration, not mid-training.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trinity.algorithm.advantage import ADVANTAGE_FNS
from trinity.algorithm.aggregation import LOSS_AGGREGATIONS
from trinity.algorithm.kl import KL_FNS
from trinity.algorithm.policy_loss import POLICY_LOSS_FNS
from trinity.common.registry import Registry

#: Where the KL to the reference model goes by default.
KLTarget = Literal["reward", "loss", "none"]


@dataclass(frozen=True)
class AlgorithmSpec:
    """What an algorithm type needs from the explorer, buffer and trainer."""

    #: The algorithm's name (its key in :data:`ALGORITHMS`).
    name: str
    #: Policy loss (a :data:`~trinity.algorithm.policy_loss.POLICY_LOSS_FNS` name).
    policy_loss_fn: str
    #: Advantage function (an :data:`~trinity.algorithm.advantage.ADVANTAGE_FNS` name); None when none is used.
    advantage_fn: str | None
    #: Whether a frozen reference model computes ``ref_logprobs``.
    use_reference: bool
    #: Whether a critic (value model) is trained alongside the policy.
    use_critic: bool
    #: Where the KL to the reference goes by default: a reward penalty, a loss term, or nowhere.
    kl_target: KLTarget
    #: Default KL estimator (a :data:`~trinity.algorithm.kl.KL_FNS` name); None when ``kl_target`` is ``"none"``.
    kl_fn: str | None
    #: Default KL coefficient (0 when ``kl_target`` is ``"none"``).
    kl_coef: float
    #: Default loss aggregation (a :data:`~trinity.algorithm.aggregation.LOSS_AGGREGATIONS` name).
    loss_aggregation: str
    #: Default number of rollouts per task (the group size).
    repeat_times: int
    #: Whether experiences must arrive as whole groups (all rollouts of a task together).
    requires_groups: bool
    #: Whether training data comes from the explorer's rollouts (False: from a dataset, e.g. SFT, DPO).
    uses_rollouts: bool

    def __post_init__(self) -> None:
        POLICY_LOSS_FNS.get(self.policy_loss_fn)
        LOSS_AGGREGATIONS.get(self.loss_aggregation)
        if self.advantage_fn is not None:
            ADVANTAGE_FNS.get(self.advantage_fn)
        if (self.kl_fn is None) != (self.kl_target == "none"):
            raise ValueError(f"algorithm {self.name!r}: kl_fn must be given exactly when kl_target is not 'none'")
        if self.kl_fn is not None:
            KL_FNS.get(self.kl_fn)
        if self.kl_coef < 0 or (self.kl_target == "none" and self.kl_coef != 0):
            raise ValueError(f"algorithm {self.name!r}: kl_coef must be >= 0, and 0 when kl_target is 'none'")
        if self.kl_target != "none" and not self.use_reference:
            raise ValueError(f"algorithm {self.name!r}: a KL {self.kl_target} term needs use_reference=True")
        if self.repeat_times < 1:
            raise ValueError(f"algorithm {self.name!r}: repeat_times must be at least 1, got {self.repeat_times}")
        if self.requires_groups and self.repeat_times < 2:
            raise ValueError(f"algorithm {self.name!r}: group baselines need repeat_times >= 2")


#: Algorithm types, by name.
ALGORITHMS: Registry[AlgorithmSpec] = Registry("algorithm")


def register_algorithm(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Register ``spec`` under its name and return it; raises DuplicateNameError if the name is taken."""
    ALGORITHMS.add(spec.name, spec)
    return spec


SFT = register_algorithm(
    AlgorithmSpec(
        name="sft",
        policy_loss_fn="sft",
        advantage_fn=None,
        use_reference=False,
        use_critic=False,
        kl_target="none",
        kl_fn=None,
        kl_coef=0.0,
        loss_aggregation="token-mean",
        repeat_times=1,
        requires_groups=False,
        uses_rollouts=False,
    )
)
GRPO = register_algorithm(
    AlgorithmSpec(
        name="grpo",
        policy_loss_fn="ppo",
        advantage_fn="grpo",
        use_reference=True,
        use_critic=False,
        kl_target="loss",
        kl_fn="low_var_kl",
        kl_coef=0.001,
        loss_aggregation="token-mean",
        repeat_times=8,
        requires_groups=True,
        uses_rollouts=True,
    )
)
PPO = register_algorithm(
    AlgorithmSpec(
        name="ppo",
        policy_loss_fn="ppo",
        advantage_fn="gae",
        use_reference=True,
        use_critic=True,
        kl_target="reward",
        kl_fn="k1",
        kl_coef=0.001,
        loss_aggregation="token-mean",
        repeat_times=1,
        requires_groups=False,
        uses_rollouts=True,
    )
)
DPO = register_algorithm(
    AlgorithmSpec(
        name="dpo",
        policy_loss_fn="dpo",
        advantage_fn=None,
        use_reference=True,
        use_critic=False,
        kl_target="none",
        kl_fn=None,
        kl_coef=0.0,
        loss_aggregation="token-mean",
        repeat_times=1,
        requires_groups=False,
        uses_rollouts=False,
    )
)
