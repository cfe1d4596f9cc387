"""``trainer.trainer_config``: upstream's veRL settings, mapped onto the FSDP2 trainer or refused by name.

Every key upstream's veRL config knows has one entry here: *mapped* (its
value sets a trainer setting, reported in the plan), *inert* (accepted; it
changes speed or bookkeeping in veRL and nothing here) or *refused* (one line
saying what to use instead). Keys that are not upstream's are unknown keys.
:func:`read_trainer_config` walks the user's mapping and returns what it maps.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Handling = Literal["map", "inert", "refuse"]


@dataclass(frozen=True)
class VerlKey:
    """How one veRL key is handled."""

    handling: Handling
    #: ``map``: the trainer setting it sets; ``inert``/``refuse``: why, and what to use instead.
    target: str
    #: ``refuse`` only when this returns True for the value (None: always).
    when: Callable[[Any], bool] | None = None


def _map(target: str) -> VerlKey:
    return VerlKey("map", target)


def _inert(why: str) -> VerlKey:
    return VerlKey("inert", why)


def _refuse(why: str, when: Callable[[Any], bool] | None = None) -> VerlKey:
    return VerlKey("refuse", why, when)


def _truthy(value: Any) -> bool:
    return bool(value)


def _not_fsdp(value: Any) -> bool:
    return str(value).strip().lower() not in ("fsdp", "fsdp2")


def _above_one(value: Any) -> bool:
    return isinstance(value, (int, float)) and value > 1


_FROM_MODEL = "set it in the model section (model.model_path, model.custom_chat_template, ...)"
_MEGATRON = "Megatron-LM training is not supported; use FSDP (remove the megatron section)"
_ACTIVATION_OFFLOAD = "activation offloading is not supported; use enable_gradient_checkpointing"
_ULYSSES = "Ulysses sequence parallelism of the critic is not supported; set it to 1"
_SPEED = "a veRL speed switch; results here are the same without it"
_STRATEGY = "only FSDP training is supported; use fsdp or fsdp2"
_OPTIM_HERE = "the FSDP trainer's optimizer is algorithm.optimizer"


def _fsdp_config(prefix: str, owner: str) -> dict[str, VerlKey]:
    optimizer: VerlKey = (_map(f"{owner}.optimizer_offload") if owner != "ref"
                          else _inert("the reference model has no optimizer"))
    return {
        f"{prefix}.fsdp_config.param_offload": _map(f"{owner}.param_offload"),
        f"{prefix}.fsdp_config.optimizer_offload": optimizer,
        f"{prefix}.fsdp_config.offload_policy": _map(f"{owner}.offload_policy"),
        f"{prefix}.fsdp_config.reshard_after_forward": _inert("FSDP2 always reshards after forward here (memory)"),
        f"{prefix}.fsdp_config.wrap_policy.min_num_params": _inert("every decoder layer is its own FSDP unit here"),
        f"{prefix}.fsdp_config.fsdp_size": _refuse(
            "hybrid sharding is not supported: every trainer rank shards the whole model", lambda v: v not in (-1, 0)
        ),
        f"{prefix}.fsdp_config.forward_prefetch": _inert(_SPEED),
        f"{prefix}.fsdp_config.model_dtype": _refuse("the trainer's dtype is explorer.rollout_model.dtype", _truthy),
        f"{prefix}.fsdp_config.dtype": _inert("mixed precision follows explorer.rollout_model.dtype"),
        f"{prefix}.fsdp_config.mixed_precision": _refuse(
            "mixed precision follows explorer.rollout_model.dtype", _truthy
        ),
    }


def _optim(prefix: str, owner: str) -> dict[str, VerlKey]:
    keys = ("lr", "betas", "weight_decay", "lr_warmup_steps", "lr_warmup_steps_ratio", "min_lr_ratio",
            "lr_scheduler_type", "warmup_style", "optimizer", "clip_grad")
    table = {f"{prefix}.optim.{k}": _map(f"{owner}.optim.{k}") for k in keys}
    for key in ("optimizer_impl", "total_training_steps", "lr_warmup_init", "lr_decay_steps", "lr_decay_style",
                "min_lr", "weight_decay_incr_style", "lr_wsd_decay_style", "lr_wsd_decay_steps",
                "use_checkpoint_opt_param_scheduler", "override_optimizer_config"):
        table[f"{prefix}.optim.{key}"] = _refuse(
            f"a Megatron/veRL optimizer detail the FSDP trainer does not have ({_OPTIM_HERE})", _truthy
        )
    return table


_ARR = "actor_rollout_ref"

#: Every upstream veRL key, by its path under ``trainer.trainer_config``.
VERL_KEYS: dict[str, VerlKey] = {
    f"{_ARR}.hybrid_engine": _inert("the engines and the trainer are separate Ray actors here"),
    f"{_ARR}.nccl_timeout": _refuse("set synchronizer.sync_timeout"),
    f"{_ARR}.synchronizer": _refuse("set the synchronizer section"),
    f"{_ARR}.explorer_name": _refuse("set explorer.name"),
    **{f"{_ARR}.model.{k}": _refuse(_FROM_MODEL) for k in ("path", "custom_chat_template", "trust_remote_code",
                                                              "rope_scaling", "rope_theta", "external_lib",
                                                              "override_config")},
    f"{_ARR}.model.enable_gradient_checkpointing": _map("actor.gradient_checkpointing"),
    f"{_ARR}.model.use_remove_padding": _map("actor.use_remove_padding"),
    f"{_ARR}.model.use_fused_kernels": _inert(_SPEED),
    f"{_ARR}.model.fused_kernel_options.impl_backend": _inert(_SPEED),
    f"{_ARR}.model.enable_activation_offload": _refuse(_ACTIVATION_OFFLOAD, _truthy),
    f"{_ARR}.model.use_shm": _inert(_SPEED),
    f"{_ARR}.model.lora_rank": _refuse("set LoRA in model.lora_configs (lora_rank, lora_alpha, target_modules, "
                                       "exclude_modules, path), as upstream fills these keys from it; set 0 here",
                                       _truthy),
    **{f"{_ARR}.model.{k}": _inert("upstream fills it from model.lora_configs, which is read instead")
       for k in ("lora_alpha", "target_modules", "exclude_modules", "lora_adapter_path")},
    f"{_ARR}.actor.strategy": _refuse(_STRATEGY, _not_fsdp),
    f"{_ARR}.actor.ppo_mini_batch_size": _inert("upstream sets it to buffer.train_batch_size: one optimizer step "
                                                "per training batch (and per ppo epoch)"),
    f"{_ARR}.actor.ppo_micro_batch_size": _refuse("use ppo_micro_batch_size_per_gpu", _truthy),
    f"{_ARR}.actor.ppo_micro_batch_size_per_gpu": _map("actor.micro_batch_size"),
    f"{_ARR}.actor.use_dynamic_bsz": _map("actor.use_dynamic_bsz"),
    f"{_ARR}.actor.ppo_max_token_len_per_gpu": _map("actor.max_token_len"),
    f"{_ARR}.actor.grad_clip": _map("actor.grad_clip"),
    f"{_ARR}.actor.ppo_epochs": _map("actor.ppo_epochs"),
    f"{_ARR}.actor.shuffle": _inert("one optimizer step per batch: the order of its micro-batches does not change it"),
    f"{_ARR}.actor.ulysses_sequence_parallel_size": _map("actor.ulysses_sequence_parallel_size"),
    f"{_ARR}.actor.fix_actor_microbatch_loss_scale": _inert("micro-batch losses are always weighted exactly"),
    f"{_ARR}.actor.entropy_from_logits_with_chunking": _inert(_SPEED),
    f"{_ARR}.actor.entropy_checkpointing": _inert(_SPEED),
    f"{_ARR}.actor.checkpoint.load_contents": _inert("checkpoints always hold the model, optimizer and run state"),
    f"{_ARR}.actor.checkpoint.save_contents": _inert("checkpoints always hold the model, optimizer and run state; "
                                                     "Hugging Face exports follow trainer.save_hf_checkpoint"),
    **_optim(f"{_ARR}.actor", "actor"),
    **_fsdp_config(f"{_ARR}.actor", "actor"),
    f"{_ARR}.actor.megatron": _refuse(_MEGATRON),
    f"{_ARR}.actor.profile": _inert("profiling is not wired to veRL's profiler here"),
    f"{_ARR}.actor.profiler": _inert("profiling is not wired to veRL's profiler here"),
    f"{_ARR}.actor.data_loader_seed": _inert("rows are not reshuffled inside a step"),
    f"{_ARR}.actor.load_weight": _inert("the actor always loads model.model_path"),
    f"{_ARR}.actor.loss_agg_mode": _map("algorithm.loss_agg_mode"),
    f"{_ARR}.actor.loss_scale_factor": _refuse("a veRL loss scale the FSDP trainer does not have", _truthy),
    f"{_ARR}.actor.clip_ratio": _map("algorithm.policy_loss_fn_args.clip_range"),
    f"{_ARR}.actor.clip_ratio_low": _map("algorithm.policy_loss_fn_args.clip_range_low"),
    f"{_ARR}.actor.clip_ratio_high": _map("algorithm.policy_loss_fn_args.clip_range_high"),
    f"{_ARR}.actor.entropy_coeff": _map("algorithm.entropy_loss_fn_args.entropy_coef"),
    f"{_ARR}.actor.use_kl_loss": _refuse("set algorithm.kl_loss_fn (none disables the KL loss)"),
    f"{_ARR}.actor.policy_loss": _refuse("set algorithm.policy_loss_fn and policy_loss_fn_args"),
    f"{_ARR}.actor.router_replay": _refuse("MoE router replay is not supported", _truthy),
    f"{_ARR}.actor.use_prefix_grouper": _refuse("prefix grouping is not supported", _truthy),
    f"{_ARR}.actor.calculate_sum_pi_squared": _refuse("not supported", _truthy),
    f"{_ARR}.actor.sum_pi_squared_checkpointing": _inert(_SPEED),
    f"{_ARR}.ref.strategy": _refuse(_STRATEGY, _not_fsdp),
    f"{_ARR}.ref.log_prob_micro_batch_size": _refuse("use log_prob_micro_batch_size_per_gpu", _truthy),
    f"{_ARR}.ref.log_prob_micro_batch_size_per_gpu": _map("forward.micro_batch_size"),
    f"{_ARR}.ref.log_prob_use_dynamic_bsz": _map("forward.use_dynamic_bsz"),
    f"{_ARR}.ref.log_prob_max_token_len_per_gpu": _map("forward.max_token_len"),
    f"{_ARR}.ref.ulysses_sequence_parallel_size": _map("ref.ulysses_sequence_parallel_size"),
    f"{_ARR}.ref.use_prefix_grouper": _refuse("prefix grouping is not supported", _truthy),
    f"{_ARR}.ref.entropy_from_logits_with_chunking": _inert(_SPEED),
    f"{_ARR}.ref.entropy_checkpointing": _inert(_SPEED),
    f"{_ARR}.ref.checkpoint.load_contents": _inert("the reference model is never checkpointed (it is frozen)"),
    f"{_ARR}.ref.checkpoint.save_contents": _inert("the reference model is never checkpointed (it is frozen)"),
    **_fsdp_config(f"{_ARR}.ref", "ref"),
    f"{_ARR}.ref.megatron": _refuse(_MEGATRON),
    f"{_ARR}.ref.profile": _inert("profiling is not wired to veRL's profiler here"),
    f"{_ARR}.ref.profiler": _inert("profiling is not wired to veRL's profiler here"),
    f"{_ARR}.ref.load_weight": _inert("the reference always loads model.model_path"),
    f"{_ARR}.ref.router_replay": _refuse("MoE router replay is not supported", _truthy),
    **{f"{_ARR}.rollout.{k}": _refuse("rollouts are configured in the explorer and model sections")
       for k in ("temperature", "n", "val_kwargs", "multi_turn")},
    **{f"{_ARR}.rollout.{k}": _inert("the trainer's forward passes follow the ref settings")
       for k in ("log_prob_use_dynamic_bsz", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu",
                 "log_prob_max_token_len_per_gpu")},
    "critic.enable": _refuse("the algorithm decides whether a critic is trained (algorithm_type ppo)"),
    "critic.strategy": _refuse(_STRATEGY, _not_fsdp),
    **_optim("critic", "critic"),
    **{f"critic.model.{k}": _refuse("set model.critic_model_path") for k in ("path", "tokenizer_path")},
    **{f"critic.model.{k}": _refuse(_FROM_MODEL) for k in ("override_config", "external_lib", "trust_remote_code",
                                                             "rope_scaling", "rope_theta")},
    "critic.model.enable_gradient_checkpointing": _map("critic.gradient_checkpointing"),
    "critic.model.use_remove_padding": _inert(_SPEED),
    **_fsdp_config("critic.model", "critic"),
    "critic.ppo_mini_batch_size": _inert("upstream sets it to buffer.train_batch_size"),
    "critic.ppo_micro_batch_size": _refuse("use ppo_micro_batch_size_per_gpu", _truthy),
    "critic.ppo_micro_batch_size_per_gpu": _map("critic.micro_batch_size"),
    "critic.forward_micro_batch_size": _refuse("use forward_micro_batch_size_per_gpu", _truthy),
    "critic.forward_micro_batch_size_per_gpu": _map("critic.forward_micro_batch_size"),
    "critic.use_dynamic_bsz": _map("critic.use_dynamic_bsz"),
    "critic.ppo_max_token_len_per_gpu": _map("critic.max_token_len"),
    "critic.forward_max_token_len_per_gpu": _map("critic.forward_max_token_len"),
    "critic.ulysses_sequence_parallel_size": _refuse(_ULYSSES, _above_one),
    "critic.ppo_epochs": _map("critic.ppo_epochs"),
    "critic.shuffle": _inert("one optimizer step per batch: the order of its micro-batches does not change it"),
    "critic.grad_clip": _map("critic.grad_clip"),
    "critic.cliprange_value": _map("critic.cliprange_value"),
    "critic.checkpoint.load_contents": _inert("checkpoints always hold the critic and its optimizer"),
    "critic.checkpoint.save_contents": _inert("checkpoints always hold the critic and its optimizer"),
    "critic.rollout_n": _refuse("set algorithm.repeat_times"),
    "critic.loss_agg_mode": _map("critic.loss_agg_mode"),
    "critic.megatron": _refuse(_MEGATRON),
    "critic.profile": _inert("profiling is not wired to veRL's profiler here"),
    "critic.profiler": _inert("profiling is not wired to veRL's profiler here"),
    "critic.data_loader_seed": _inert("rows are not reshuffled inside a step"),
    "critic.load_weight": _inert("the critic always loads model.critic_model_path"),
    "critic.nccl_timeout": _refuse("set synchronizer.sync_timeout"),
    "critic.ray_namespace": _refuse("set ray_namespace"),
    "trainer.balance_batch": _inert("rows are split across ranks by count; balancing tokens only changes speed"),
    "trainer.max_actor_ckpt_to_keep": _map("trainer.max_checkpoints_to_keep"),
    "trainer.max_critic_ckpt_to_keep": _map("trainer.max_checkpoints_to_keep"),
    "trainer.critic_warmup": _refuse("critic-only warmup steps are not supported; set 0", _truthy),
    "trainer.device": _inert("the device comes from the selected device backend"),
    "trainer.logger": _refuse("set monitor.monitor_type"),
    "trainer.val_generations_to_log_to_wandb": _inert("rollout previews are not logged to wandb here"),
    "trainer.resume_mode": _refuse("set continue_from_checkpoint"),
    "trainer.resume_from_path": _refuse("resume happens from the run folder (continue_from_checkpoint)", _truthy),
    "trainer.del_local_ckpt_after_load": _refuse("not supported", _truthy),
    "trainer.remove_previous_ckpt_in_save": _refuse("set trainer.max_checkpoints_to_keep", _truthy),
    "trainer.default_hdfs_dir": _refuse("HDFS checkpoints are not supported", _truthy),
    **{f"trainer.{k}": _refuse("set it in the run config (project, name, buffer, trainer, synchronizer)")
       for k in ("total_epochs", "total_training_steps", "project_name", "group_name", "experiment_name",
                 "nnodes", "n_gpus_per_node", "save_freq", "test_freq", "default_local_dir", "val_before_train",
                 "training_rollout_mode", "enable_exp_buffer", "sync_freq")},
    "algorithm.rollout_correction.bypass_mode": _map("algorithm.bypass_mode"),
    "algorithm.gamma": _refuse("set algorithm.advantage_fn_args.gamma"),
    "algorithm.lam": _refuse("set algorithm.advantage_fn_args.lam"),
    "algorithm.adv_estimator": _refuse("set algorithm.advantage_fn"),
    "algorithm.norm_adv_by_std_in_grpo": _refuse("set algorithm.advantage_fn_args.std_normalize"),
    "algorithm.use_kl_in_reward": _refuse("set algorithm.kl_penalty_fn (none disables the penalty)"),
    "algorithm.kl_penalty": _refuse("set algorithm.kl_penalty_fn"),
    "algorithm.kl_ctrl": _refuse("set algorithm.kl_penalty_fn_args"),
    "data": _refuse("set the buffer section"),
    "reward_model": _refuse("reward models are not supported; use a reward function"),
    "reward": _refuse("reward models are not supported; use a reward function"),
    "custom_reward_function": _refuse("set the task set's default_reward_fn_type"),
    "global_profiler": _inert("profiling is not wired to veRL's profiler here"),
    "synchronizer": _refuse("set the synchronizer section"),
    "enable_preview": _refuse("set trainer.enable_preview"),
}


class VerlKeyError(ValueError):
    """A ``trainer.trainer_config`` key is unknown or refused; the message is one line."""


@dataclass(frozen=True)
class VerlSettings:
    """What a ``trainer.trainer_config`` mapping sets."""

    #: Mapped values by target (``actor.micro_batch_size``, ``critic.optim.lr``, ...), with the key they came from.
    mapped: dict[str, tuple[Any, str]]
    #: ``(key, why)`` of inert keys that were set.
    inert: list[tuple[str, str]]

    def get(self, target: str, default: Any = None) -> Any:
        """Return the value mapped onto ``target``, or ``default``."""
        found = self.mapped.get(target)
        return default if found is None else found[0]

    def source(self, target: str) -> str:
        """Return the full key (``trainer.trainer_config....``) that set ``target``."""
        return f"trainer.trainer_config.{self.mapped[target][1]}"


def read_trainer_config(raw: Mapping[str, Any]) -> VerlSettings:
    """Return what ``raw`` (``trainer.trainer_config``) sets; raises :class:`VerlKeyError` (one line)."""
    mapped: dict[str, tuple[Any, str]] = {}
    inert: list[tuple[str, str]] = []

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            entry = VERL_KEYS.get(path)
            if entry is None and isinstance(value, Mapping) and any(k.startswith(path + ".") for k in VERL_KEYS):
                walk(value, path)
                continue
            if entry is None:
                raise VerlKeyError(f"trainer.trainer_config.{path}: unknown veRL key{_closest(path)}")
            if entry.handling == "refuse" and (entry.when is None or entry.when(value)):
                raise VerlKeyError(f"trainer.trainer_config.{path}: {value!r} is not supported: {entry.target}")
            if entry.handling == "map":
                previous = mapped.get(entry.target)
                if previous is not None and previous[0] != value:
                    raise VerlKeyError(
                        f"trainer.trainer_config.{path} ({value!r}) and trainer.trainer_config.{previous[1]} "
                        f"({previous[0]!r}) set the same thing differently; keep one"
                    )
                mapped[entry.target] = (value, path)
            elif entry.handling == "inert":
                inert.append((f"trainer.trainer_config.{path}", entry.target))

    walk(raw, "")
    return VerlSettings(mapped, inert)


def _closest(path: str) -> str:
    close = difflib.get_close_matches(path, list(VERL_KEYS), n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else " (see docs/compatibility.md for the keys mapped here)"
