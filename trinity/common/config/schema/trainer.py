"""``trainer``: the FSDP2 trainer (upstream Trinity-RFT's section; ``trainer_type: verl`` maps onto it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trinity.common.config.schema.fields import inert, refused, refused_values


@dataclass
class TrainerConfig:
    """Policy (and critic) updates and checkpoints."""

    #: Name of the trainer (metrics, Ray actor names).
    name: str = "trainer"
    #: ``verl`` (upstream's default) and ``fsdp`` both mean this framework's FSDP2 trainer.
    trainer_type: str = refused_values("verl", {"tinker": "the Tinker trainer is not supported; use verl or fsdp"})
    #: ``fsdp`` / ``fsdp2``: FSDP2 data parallelism.
    trainer_strategy: str = refused_values(
        "fsdp", {"megatron": "Megatron-LM training is not supported; use trainer_strategy: fsdp (FSDP2)"}
    )
    #: Save a checkpoint every N steps (0: only at the end).
    save_interval: int = 0
    #: Log rollout previews to wandb (upstream).
    enable_preview: bool = inert(True, "rollout previews are not logged to wandb here")
    #: Stop training after this many steps; None: when the data runs out.
    total_steps: int | None = None
    #: When a checkpoint also gets a Hugging Face export under ``hf/``: ``last``, ``always`` or ``never``.
    save_hf_checkpoint: str = "last"
    #: Gradient clipping by global norm (0 disables).
    grad_clip: float = 1.0
    #: Micro-batches packed by a token budget (``max_token_len_per_gpu``) instead of a fixed row count.
    use_dynamic_bsz: bool = True
    #: Token budget of a micro-batch per device; default ``2 * model.max_model_len``.
    max_token_len_per_gpu: int | None = None
    #: Ulysses sequence parallelism (1: none).
    ulysses_sequence_parallel_size: int = 1
    #: Upstream experiment: a fixed loss scale per micro-batch.
    fix_actor_microbatch_loss_scale: bool = inert(
        False, "micro-batch losses are always weighted so their sum equals the whole batch's loss"
    )
    #: How concurrent checkpoint saves are limited (upstream).
    save_strategy: str = inert("unrestricted", "every rank writes its shard of a checkpoint together")
    #: Keep this many latest checkpoints; None keeps all.
    max_checkpoints_to_keep: int | None = None
    #: veRL-style settings (``actor_rollout_ref``, ``critic``, ``trainer``, ``algorithm``) mapped onto the
    #: FSDP2 trainer; keys that cannot apply are refused by name.
    trainer_config: dict[str, Any] = field(default_factory=dict)
    #: Deprecated upstream: a separate veRL YAML.
    trainer_config_path: str = refused(
        "", "trainer_config_path is deprecated; put the settings in trainer.trainer_config"
    )
    #: (trinity-rft) On SIGTERM in mode both or train, finish the step in flight and save a checkpoint before stopping.
    save_on_stop: bool = False
    #: (trinity-rft) ``torch.compile`` the model; None: what the device backend supports.
    use_torch_compile: bool | None = None
    #: (trinity-rft) Run the tokens rows share up to their first trained one (a group's prompt) once per
    #: micro-batch instead of once per row; false: every row runs its own prompt.
    share_prompt_prefix: bool = True
