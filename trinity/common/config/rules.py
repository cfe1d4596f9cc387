"""Cross-field rules of a configuration that need no cluster (the cluster validator checks devices)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trinity.common.config.schema import Config


def check_rules(config: Config) -> None:
    """Raise ``ConfigError`` naming the first broken rule's dotted path."""
    from trinity.common.config.loader import ConfigError

    positive: dict[str, float] = {
        "buffer.batch_size": config.buffer.batch_size,
        "buffer.total_epochs": config.buffer.total_epochs,
        "algorithm.repeat_times": config.algorithm.repeat_times,
        "explorer.engine_num": config.explorer.engine_num,
        "explorer.tensor_parallel_size": config.explorer.tensor_parallel_size,
        "explorer.runners_per_engine": config.explorer.runners_per_engine,
        "explorer.max_batch_size": config.explorer.max_batch_size,
        "synchronizer.sync_interval": config.synchronizer.sync_interval,
        "synchronizer.bucket_size_mb": config.synchronizer.bucket_size_mb,
        "trainer.trainer_num": config.trainer.trainer_num,
        "trainer.micro_batch_size": config.trainer.micro_batch_size,
        "trainer.ppo_epochs": config.trainer.ppo_epochs,
        "cluster.node_num": config.cluster.node_num,
        "cluster.devices_per_node": config.cluster.devices_per_node,
        "model.max_prompt_tokens": config.model.max_prompt_tokens,
        "model.max_response_tokens": config.model.max_response_tokens,
    }
    for path, value in positive.items():
        if value < 1:
            raise ConfigError(f"{path}: must be at least 1, got {value}")
    non_negative: dict[str, float] = {
        "buffer.total_steps": config.buffer.total_steps,
        "synchronizer.sync_offset": config.synchronizer.sync_offset,
        "trainer.save_interval": config.trainer.save_interval,
        "explorer.max_retries": config.explorer.max_retries,
        "explorer.eval_interval": config.explorer.eval_interval,
        "algorithm.optimizer.warmup_steps": config.algorithm.optimizer.warmup_steps,
        "trainer.grad_clip": config.trainer.grad_clip,
        "model.top_k": config.model.top_k,
    }
    for path, value in non_negative.items():
        if value < 0:
            raise ConfigError(f"{path}: must be 0 or more, got {value}")
    if not 0 < config.explorer.memory_utilization <= 1:
        raise ConfigError(
            f"explorer.memory_utilization: must be in (0, 1], got {config.explorer.memory_utilization}"
        )
    if config.explorer.max_model_len < 0:
        raise ConfigError(
            f"explorer.max_model_len: must be 0 (the model's) or more, got {config.explorer.max_model_len}"
        )
    if config.cluster.cpus_per_bundle <= 0:
        raise ConfigError(f"cluster.cpus_per_bundle: must be positive, got {config.cluster.cpus_per_bundle}")
    if config.model.temperature < 0:
        raise ConfigError(f"model.temperature: must be 0 (greedy) or more, got {config.model.temperature}")
    if not 0 < config.model.top_p <= 1:
        raise ConfigError(f"model.top_p: must be in (0, 1], got {config.model.top_p}")
    if config.algorithm.optimizer.lr <= 0:
        raise ConfigError(f"algorithm.optimizer.lr: must be positive, got {config.algorithm.optimizer.lr}")
    if len(config.algorithm.optimizer.betas) != 2 or not all(0 <= b < 1 for b in config.algorithm.optimizer.betas):
        raise ConfigError(
            f"algorithm.optimizer.betas: expected two numbers in [0, 1), got {config.algorithm.optimizer.betas}"
        )
    if config.explorer.timeout <= 0 or config.synchronizer.sync_timeout <= 0:
        raise ConfigError("explorer.timeout and synchronizer.sync_timeout: must be positive seconds")
    if not config.model.model_path:
        raise ConfigError(
            "model.model_path: required (a Hugging Face model folder; with model.tiny it is built if missing)"
        )
    if config.mode == "bench" and not config.buffer.eval_tasks:
        raise ConfigError("buffer.eval_tasks: mode bench needs at least one evaluation task set")
    if config.mode in ("both", "explore") and not config.buffer.train_tasks.path:
        raise ConfigError("buffer.train_tasks.path: required in mode both/explore (a JSONL or Parquet task file)")
