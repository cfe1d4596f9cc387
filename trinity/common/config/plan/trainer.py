"""The trainer's settings as a run plan holds them: optimizer, batching, critic."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Scheduler = Literal["constant", "cosine"]


@dataclass(frozen=True)
class OptimizerPlan:
    """An optimizer and its learning-rate schedule."""

    #: ``adamw`` or ``sgd``.
    kind: Literal["adamw", "sgd"]
    #: Peak learning rate.
    lr: float
    #: Adam betas.
    betas: tuple[float, float]
    #: Weight decay.
    weight_decay: float
    #: Schedule after warmup.
    scheduler: Scheduler
    #: Warmup steps; None: ``warmup_ratio`` of the run's steps.
    warmup_steps: int | None
    #: Warmup as a fraction of the run's steps (when ``warmup_steps`` is None).
    warmup_ratio: float
    #: ``cosine`` ends at ``min_lr_ratio * lr``.
    min_lr_ratio: float

    def warmup(self, total_steps: int | None) -> int:
        """Return the warmup steps for a run of ``total_steps`` (None: unknown, so no ratio-based warmup)."""
        if self.warmup_steps is not None:
            return self.warmup_steps
        return int(self.warmup_ratio * total_steps) if total_steps else 0

    def factor(self, step: int, total_steps: int | None) -> float:
        """Return the learning-rate multiplier after ``step`` optimizer steps (0-based)."""
        warmup = self.warmup(total_steps)
        if step < warmup:
            return (step + 1) / warmup
        if self.scheduler == "constant" or not total_steps or total_steps <= warmup:
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * cosine

    def describe(self) -> str:
        """One line for the plan."""
        warm = (
            f"{self.warmup_steps} warmup steps"
            if self.warmup_steps is not None
            else (f"warmup {self.warmup_ratio:g} of the run" if self.warmup_ratio else "no warmup")
        )
        return (
            f"{self.kind} lr {self.lr:g} ({self.scheduler}, {warm}), betas {self.betas[0]:g}/{self.betas[1]:g}, "
            f"weight decay {self.weight_decay:g}"
        )


@dataclass(frozen=True)
class BatchingPlan:
    """How a rank splits its rows into micro-batches."""

    #: Rows per micro-batch (when not dynamic).
    micro_batch_size: int
    #: Pack micro-batches by a token budget instead.
    use_dynamic_bsz: bool
    #: Token budget per micro-batch (dynamic).
    max_token_len: int

    def describe(self) -> str:
        """One phrase for the plan."""
        if self.use_dynamic_bsz:
            return f"micro-batches of at most {self.max_token_len} tokens"
        return f"micro-batches of {self.micro_batch_size} row(s)"


@dataclass(frozen=True)
class OffloadPlan:
    """Which of a model's tensors wait in host memory between uses (veRL's ``fsdp_config`` offload keys)."""

    #: Parameters (and so gradients and optimizer state) live on the host; FSDP2 brings each layer to the device.
    params: bool = False
    #: Optimizer state lives on the host between optimizer steps.
    optimizer: bool = False

    @property
    def any(self) -> bool:
        """Whether anything is offloaded."""
        return self.params or self.optimizer

    def describe(self) -> str:
        """One phrase for the plan: what is offloaded."""
        if self.params:
            return "parameters, gradients and optimizer state" if self.optimizer else "parameters"
        return "optimizer state between steps" if self.optimizer else "nothing"


@dataclass(frozen=True)
class LoraPlan:
    """A LoRA adapter trained on the policy instead of its full weights (``model.lora_configs``)."""

    #: Rank of the adapter matrices.
    rank: int
    #: Scale numerator (the update is ``alpha / rank * B @ A``).
    alpha: float
    #: Modules that get an adapter: ``all-linear`` or module names.
    target_modules: str | tuple[str, ...]
    #: Modules left without one (names, or a regular expression).
    exclude_modules: str | tuple[str, ...] | None = None
    #: A PEFT adapter folder the adapter starts from (None: a fresh adapter, ``B = 0``).
    adapter_path: str | None = None
    #: The adapter's name (upstream's ``name``).
    name: str = "lora"

    @property
    def scaling(self) -> float:
        """The factor of ``B @ A`` in the merged weight."""
        return self.alpha / self.rank

    def describe(self) -> str:
        """One phrase for the plan."""
        targets = self.target_modules if isinstance(self.target_modules, str) else ", ".join(self.target_modules)
        start = f"from {self.adapter_path}" if self.adapter_path else "fresh"
        return f"rank {self.rank}, alpha {self.alpha:g} on {targets} ({start})"


@dataclass(frozen=True)
class CriticPlan:
    """The critic (value model) of PPO."""

    #: Model folder the value model starts from.
    path: str
    #: Its optimizer.
    optimizer: OptimizerPlan
    #: Micro-batching of its updates.
    batching: BatchingPlan
    #: Micro-batching of its value forward passes.
    forward: BatchingPlan
    #: Gradient clip (0: none).
    grad_clip: float
    #: Value clipping around the rollout's values (0: the clipped value is the old value).
    cliprange_value: float
    #: Optimizer passes per batch.
    ppo_epochs: int
    #: Aggregation of the value loss.
    loss_agg_mode: str
    #: Recompute activations in backward (memory for speed).
    gradient_checkpointing: bool
    #: What waits in host memory between uses.
    offload: OffloadPlan = OffloadPlan()


@dataclass(frozen=True)
class TrainerPlan:
    """Everything the FSDP2 trainer needs besides the algorithm."""

    #: The policy's optimizer.
    optimizer: OptimizerPlan
    #: Micro-batching of policy updates.
    batching: BatchingPlan
    #: Micro-batching of forward-only passes (reference and old log-probs).
    forward: BatchingPlan
    #: Gradient clip (0: none).
    grad_clip: float
    #: Optimizer passes per training batch.
    ppo_epochs: int
    #: Recompute activations in backward.
    gradient_checkpointing: bool
    #: Checkpoint every N steps (0: at the end only).
    save_interval: int
    #: Keep this many latest checkpoints (None: all).
    max_checkpoints: int | None
    #: When a checkpoint also gets a Hugging Face export: ``last``, ``always``, ``never``.
    save_hf: str
    #: On SIGTERM (mode both or train): finish the step in flight and save a checkpoint before stopping.
    save_on_stop: bool
    #: Stop after this many steps (None: when the data runs out).
    total_steps: int | None
    #: ``torch.compile``; None: the device backend's support.
    use_torch_compile: bool | None
    #: Compute dtype.
    dtype: str
    #: Seed of the trainer's random state.
    seed: int
    #: Recompute old log-probs with the trainer instead of using the rollout's (veRL ``bypass_mode: false``).
    recompute_old_logprobs: bool
    #: Temperature the rollouts were sampled at: the trainer scales logits by it (0: treated as 1).
    temperature: float
    #: The critic, when the algorithm trains one.
    critic: CriticPlan | None
    #: Run the actor's (and reference's) micro-batches unpadded, the rows end to end in one sequence
    #: (veRL ``actor_rollout_ref.model.use_remove_padding``).
    pack_sequences: bool = False
    #: Run each micro-batch's distinct prompt prefixes once (:mod:`trinity.trainer.shared_prefix`).
    share_prompt_prefix: bool = True
    #: What of the actor waits in host memory between uses.
    offload: OffloadPlan = OffloadPlan()
    #: What of the reference model waits in host memory between uses (its parameters only).
    reference_offload: OffloadPlan = OffloadPlan()
    #: Train a LoRA adapter instead of the policy's weights (the reference is then the base: adapters off).
    lora: LoraPlan | None = None
    #: Ulysses sequence parallelism: ranks per group sharing each packed sequence (1: none).
    ulysses_size: int = 1

    @property
    def offloads(self) -> bool:
        """Whether any model of the trainer offloads to host memory."""
        return self.offload.any or self.reference_offload.any or (self.critic is not None and self.critic.offload.any)
