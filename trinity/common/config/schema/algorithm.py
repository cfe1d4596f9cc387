"""``algorithm``: what is optimised, and how (upstream Trinity-RFT's section, same keys and meaning)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class OptimizerConfig:
    """The policy's optimizer and learning-rate schedule."""

    #: Learning rate.
    lr: float = 1e-6
    #: Warmup steps; a negative value means: use ``lr_warmup_steps_ratio`` of the run's steps.
    lr_warmup_steps: int = -1
    #: Warmup as a fraction of the run's total steps (when ``lr_warmup_steps`` is negative).
    lr_warmup_steps_ratio: float = 0.0
    #: ``cosine``: the learning rate decays to ``min_lr_ratio * lr`` at the last step.
    min_lr_ratio: float = 0.01
    #: Deprecated spelling of ``lr_scheduler_type``.
    warmup_style: str | None = None
    #: ``constant`` or ``cosine`` (after warmup).
    lr_scheduler_type: str = "constant"
    #: ``adam`` / ``adamw`` (AdamW, decoupled weight decay) or ``sgd``.
    optimizer_type: str = "adam"
    #: Adam betas.
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    #: Weight decay.
    weight_decay: float = 0.01
    #: Upstream's Megatron-only clip; the FSDP trainer clips by ``trainer.grad_clip`` (a different value is refused).
    clip_grad: float = 1.0


@dataclass
class AlgorithmConfig:
    """The algorithm type and any piece of it overridden by name.

    Every ``*_fn`` left unset takes the algorithm type's default; every
    ``*_args`` left unset takes that function's defaults (a mapping given
    replaces them, and the function's own defaults fill what it omits).
    """

    #: Algorithm type: ``ppo``, ``grpo``, ``sft``, ``dpo``, ``opmd``, ... (see docs/algorithms.md).
    algorithm_type: str = "ppo"
    #: Rollouts per task (the GRPO group size).
    repeat_times: int = 1
    #: Optimizer of the policy.
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    #: How the trainer draws experiences from the buffer.
    sample_strategy: str | None = None
    #: Its arguments.
    sample_strategy_args: dict[str, Any] | None = None
    #: Advantage function.
    advantage_fn: str | None = None
    #: Its arguments.
    advantage_fn_args: dict[str, Any] | None = None
    #: KL estimator subtracted from the token rewards (``none`` for no penalty).
    kl_penalty_fn: str | None = None
    #: Its arguments (``kl_coef``, ...).
    kl_penalty_fn_args: dict[str, Any] | None = None
    #: Policy loss.
    policy_loss_fn: str | None = None
    #: Its arguments.
    policy_loss_fn_args: dict[str, Any] | None = None
    #: KL estimator added to the loss (``none`` for no KL loss).
    kl_loss_fn: str | None = None
    #: Its arguments (``kl_coef``, ...).
    kl_loss_fn_args: dict[str, Any] | None = None
    #: Entropy term of the loss (``default``, ``mix``, ``none``).
    entropy_loss_fn: str | None = None
    #: Its arguments (``entropy_coef``, ...).
    entropy_loss_fn_args: dict[str, Any] | None = None
    #: How token losses are reduced: ``token-mean``, ``seq-mean-token-sum``, ``seq-mean-token-mean``, ...
    loss_agg_mode: str | None = None
