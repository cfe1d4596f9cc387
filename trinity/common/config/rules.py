"""Rules of a configuration that need nothing but the config: value ranges and choices.

Names (algorithms, workflows, ...), the device layout and derived values
are checked when the plan is resolved (:mod:`trinity.common.config.plan`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trinity.common.config.errors import ConfigError

if TYPE_CHECKING:
    from trinity.common.config.schema import Config

#: Choices of string settings, by dotted path (compared case-insensitively).
CHOICES: dict[str, tuple[str, ...]] = {
    "mode": ("both", "colocate", "explore", "train", "bench", "serve"),
    "trainer.trainer_type": ("verl", "fsdp"),
    "trainer.trainer_strategy": ("fsdp", "fsdp2"),
    "trainer.save_hf_checkpoint": ("last", "always", "never"),
    "synchronizer.sync_style": ("fixed", "explorer_driven", "trainer_driven", "dynamic_by_explorer",
                                "dynamic_by_trainer"),
    "monitor.monitor_type": ("tensorboard", "wandb", "none"),
    "algorithm.optimizer.lr_scheduler_type": ("constant", "cosine"),
    "algorithm.optimizer.optimizer_type": ("adam", "adamw", "sgd"),
    "explorer.concurrent_mode": ("sequential", "asynchronous", "multi-threading"),
    "explorer.rollout_model.engine_type": ("auto", "vllm", "hf"),
    "log.level": ("debug", "info", "warning", "error", "critical"),
}


def _get(config: Config, dotted: str) -> object:
    node: object = config
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def check_rules(config: Config) -> None:
    """Raise ``ConfigError`` naming the first broken rule's dotted path."""
    for path, choices in CHOICES.items():
        value = _get(config, path)
        if isinstance(value, str) and value.strip().lower() not in choices:
            raise ConfigError(f"{path}: {value!r} is not one of {', '.join(choices)}")
    if config.algorithm.optimizer.warmup_style is not None:
        style = config.algorithm.optimizer.warmup_style.strip().lower()
        if style not in CHOICES["algorithm.optimizer.lr_scheduler_type"]:
            raise ConfigError(f"algorithm.optimizer.warmup_style: {style!r} is not one of constant, cosine")
    rollout = config.explorer.rollout_model
    positive: dict[str, float] = {
        "buffer.batch_size": config.buffer.batch_size,
        "buffer.total_epochs": config.buffer.total_epochs,
        "algorithm.repeat_times": config.algorithm.repeat_times,
        "explorer.rollout_model.engine_num": rollout.engine_num,
        "explorer.rollout_model.tensor_parallel_size": rollout.tensor_parallel_size,
        "explorer.runner_per_model": config.explorer.runner_per_model,
        "explorer.max_timeout": config.explorer.max_timeout,
        "synchronizer.sync_interval": config.synchronizer.sync_interval,
        "synchronizer.sync_timeout": config.synchronizer.sync_timeout,
        "synchronizer.bucket_size_mb": config.synchronizer.bucket_size_mb,
        "algorithm.optimizer.lr": config.algorithm.optimizer.lr,
        "cluster.cpus_per_bundle": config.cluster.cpus_per_bundle,
        "trainer.ulysses_sequence_parallel_size": config.trainer.ulysses_sequence_parallel_size,
    }
    if rollout.max_batch_size is not None:
        positive["explorer.rollout_model.max_batch_size"] = rollout.max_batch_size
    for path, value in positive.items():
        if value <= 0:
            raise ConfigError(f"{path}: must be positive, got {value:g}")
    non_negative: dict[str, float | None] = {
        "buffer.train_batch_size": config.buffer.train_batch_size,
        "buffer.total_steps": config.buffer.total_steps,
        "trainer.total_steps": config.trainer.total_steps,
        "synchronizer.sync_offset": config.synchronizer.sync_offset,
        "trainer.save_interval": config.trainer.save_interval,
        "trainer.grad_clip": config.trainer.grad_clip,
        "trainer.max_token_len_per_gpu": config.trainer.max_token_len_per_gpu,
        "explorer.max_retry_times": config.explorer.max_retry_times,
        "explorer.eval_interval": config.explorer.eval_interval,
        "cluster.node_num": config.cluster.node_num,
        "cluster.gpu_per_node": config.cluster.gpu_per_node,
        "model.min_response_tokens": config.model.min_response_tokens,
        "model.max_model_len": config.model.max_model_len,
        "model.max_prompt_tokens": config.model.max_prompt_tokens,
        "model.max_response_tokens": config.model.max_response_tokens,
        "model.temperature": config.model.temperature,
        "model.logprobs": config.model.logprobs,
        "algorithm.optimizer.weight_decay": config.algorithm.optimizer.weight_decay,
        "algorithm.optimizer.lr_warmup_steps_ratio": config.algorithm.optimizer.lr_warmup_steps_ratio,
    }
    for path, maybe in non_negative.items():
        if maybe is not None and maybe < 0:
            raise ConfigError(f"{path}: must be 0 or more, got {maybe:g}")
    if not 0 < config.model.top_p <= 1:
        raise ConfigError(f"model.top_p: must be in (0, 1], got {config.model.top_p}")
    if not 0 < rollout.gpu_memory_utilization <= 1:
        raise ConfigError(
            f"explorer.rollout_model.gpu_memory_utilization: must be in (0, 1], got {rollout.gpu_memory_utilization}"
        )
    if not 0 <= config.algorithm.optimizer.lr_warmup_steps_ratio <= 1:
        raise ConfigError("algorithm.optimizer.lr_warmup_steps_ratio: must be in [0, 1]")
    if not 0 <= config.algorithm.optimizer.min_lr_ratio <= 1:
        raise ConfigError("algorithm.optimizer.min_lr_ratio: must be in [0, 1]")
    betas = config.algorithm.optimizer.betas
    if len(betas) != 2 or not all(0 <= b < 1 for b in betas):
        raise ConfigError(f"algorithm.optimizer.betas: expected two numbers in [0, 1), got {betas}")
    optimizer = config.algorithm.optimizer
    if config.source.is_set("algorithm.optimizer.clip_grad") and optimizer.clip_grad != config.trainer.grad_clip:
        raise ConfigError(
            f"algorithm.optimizer.clip_grad: {config.algorithm.optimizer.clip_grad:g} differs from "
            f"trainer.grad_clip ({config.trainer.grad_clip:g}); the FSDP trainer clips by trainer.grad_clip "
            "(upstream uses clip_grad for Megatron only): set trainer.grad_clip and remove clip_grad"
        )
    if not config.model.model_path:
        raise ConfigError(
            "model.model_path: required (a Hugging Face model folder; with model.tiny it is built if missing)"
        )
