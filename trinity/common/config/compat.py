"""Where a key that is not in the schema went: old trinity-rft spellings, and values upstream derives itself.

The loader asks :func:`unknown_key_message` for every unknown key, so a
config written for trinity-rft 0.1 (or one that sets a value upstream
computes) gets one line naming what to write instead. :func:`normalise`
folds accepted aliases into their canonical key before the config is built.
"""

from __future__ import annotations

import re
from typing import Any

from trinity.common.config.errors import ConfigError, closest_key

_TASKSET = ("buffer.explorer_input.taskset", "buffer.explorer_input.tasksets[*]",
            "buffer.explorer_input.eval_tasksets[*]")

#: Keys of trinity-rft 0.1's schema and what replaced them.
MOVED: dict[str, str] = {
    "seed": "explorer.rollout_model.seed (engines and trainer) and the task set's data_selector.seed (task order)",
    "model.tokenizer_path": "model.model_path (the tokenizer is read from the model folder)",
    "model.dtype": "explorer.rollout_model.dtype",
    "buffer.train_tasks": "buffer.explorer_input.taskset",
    "buffer.eval_tasks": "buffer.explorer_input.eval_tasksets",
    "buffer.experience_buffer": "buffer.trainer_input.experience_buffer",
    "buffer.shuffle": "buffer.explorer_input.taskset.data_selector.selector_type: shuffle",
    "buffer.sample_strategy": "algorithm.sample_strategy",
    "buffer.sample_strategy_args": "algorithm.sample_strategy_args",
    "buffer.reward_shaping": "data_processor.experience_pipeline.operators",
    "buffer.read_timeout": "buffer.trainer_input.experience_buffer.max_read_timeout",
    "explorer.engine_type": "explorer.rollout_model.engine_type",
    "explorer.engine_num": "explorer.rollout_model.engine_num",
    "explorer.tensor_parallel_size": "explorer.rollout_model.tensor_parallel_size",
    "explorer.runners_per_engine": "explorer.runner_per_model",
    "explorer.timeout": "explorer.max_timeout",
    "explorer.max_retries": "explorer.max_retry_times",
    "explorer.eval_on_start": "explorer.eval_on_startup",
    "explorer.max_batch_size": "explorer.rollout_model.max_batch_size",
    "explorer.memory_utilization": "explorer.rollout_model.gpu_memory_utilization",
    "explorer.enforce_eager": "explorer.rollout_model.enforce_eager",
    "explorer.enable_prefix_caching": "explorer.rollout_model.enable_prefix_caching",
    "explorer.max_model_len": "explorer.rollout_model.max_model_len (or model.max_model_len)",
    "trainer.engine": "trainer.trainer_type",
    "trainer.trainer_num": "cluster.gpu_per_node (the trainer gets the devices the engines leave: "
    "node_num x gpu_per_node - engine_num x tensor_parallel_size)",
    "trainer.micro_batch_size": "trainer.trainer_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu "
    "(with trainer.use_dynamic_bsz: false; with true, micro-batches follow trainer.max_token_len_per_gpu)",
    "trainer.ppo_epochs": "trainer.trainer_config.actor_rollout_ref.actor.ppo_epochs",
    "trainer.max_checkpoints": "trainer.max_checkpoints_to_keep",
    "algorithm.optimizer.warmup_steps": "algorithm.optimizer.lr_warmup_steps",
    "algorithm.optimizer.critic_lr": "trainer.trainer_config.critic.optim.lr",
    "algorithm.kl_coef": "algorithm.kl_loss_fn_args.kl_coef (or kl_penalty_fn_args.kl_coef)",
    "algorithm.entropy_coef": "algorithm.entropy_loss_fn_args.entropy_coef",
    "monitor.tensorboard": "monitor.monitor_type: tensorboard",
    "monitor.wandb": "monitor.monitor_type: wandb",
    **{f"{t}.prompt_key": f"{t}.format.prompt_key" for t in _TASKSET},
    **{f"{t}.answer_key": f"{t}.format.response_key" for t in _TASKSET},
    **{f"{t}.workflow": f"{t}.default_workflow_type" for t in _TASKSET},
    **{f"{t}.reward_fn": f"{t}.default_reward_fn_type" for t in _TASKSET},
    **{f"{t}.temperature": f"{t}.rollout_args.temperature" for t in _TASKSET},
}

_SET_FROM_MODEL = "set it in model (or a task set's rollout_args); the engines take it from there"
_ROLLOUT = "explorer.rollout_model"

#: Values upstream computes itself ("DO NOT SET" there): not settings.
DERIVED: dict[str, str] = {
    "checkpoint_job_dir": "it is checkpoint_root_dir/project/group/name",
    **{f"cluster.{k}": "it is derived from node_num, gpu_per_node and the engines' devices"
       for k in ("total_gpu_num", "rollout_gpu_num", "auxiliary_model_gpu_num", "explorer_gpu_num",
                 "trainer_gpu_num", "trainer_node_num", "trainer_gpu_num_per_node")},
    "buffer.explorer_output": "the explorer always writes to buffer.trainer_input.experience_buffer",
    "buffer.tokenizer_path": "the tokenizer is read from model.model_path",
    "buffer.cache_dir": "it is <run folder>/buffer",
    **{f"{t}.{k}": "it is derived from the buffer section and the checkpoint"
       for t in _TASKSET for k in ("index", "is_eval", "batch_size", "total_epochs", "total_steps",
                                   "ray_namespace")},
    **{f"buffer.trainer_input.experience_buffer.{k}": "it is derived from the buffer section and the checkpoint"
       for k in ("index", "batch_size", "tokenizer_path", "total_steps", "ray_namespace", "wrap_in_ray")},
    **{f"{_ROLLOUT}.{k}": "it is set from the cluster layout" for k in ("bundle_indices", "ray_namespace",
                                                                      "cuda_visible_devices")},
    **{f"{_ROLLOUT}.{k}": _SET_FROM_MODEL for k in ("temperature", "top_p", "top_k", "logprobs",
                                                    "rope_scaling", "rope_theta")},
    **{f"{_ROLLOUT}.{k}": "it is set from model.lora_configs" for k in ("enable_lora", "enable_runtime_lora_updating",
                                                                "lora_modules", "lora_kwargs")},
    f"{_ROLLOUT}.external_model_config": "it is set from model.external_model (mode bench)",
    "synchronizer.explorer_world_size": "it is derived from the engines",
    "synchronizer.ray_namespace": "it is the run's ray_namespace",
    "monitor.cache_dir": "it is <run folder>/monitor",
    "log.save_dir": "it is <run folder>/log",
}

#: Accepted spellings folded into the canonical key: ``(section path, alias, canonical)``.
ALIASES: tuple[tuple[str, str, str], ...] = (("cluster", "devices_per_node", "gpu_per_node"),)

_INDEX = re.compile(r"\[\d+\]")


def _pattern(dotted: str) -> str:
    return _INDEX.sub("[*]", dotted)


def unknown_key_message(dotted: str, key: str, known: list[str]) -> str:
    """Return the one-line error for the unknown key ``key`` at ``dotted`` (``known``: the section's keys)."""
    pattern = _pattern(dotted)
    if pattern in MOVED:
        return f"{dotted}: unknown key: this spelling of trinity-rft 0.1 is now {MOVED[pattern]}"
    if pattern in DERIVED:
        return f"{dotted}: not a setting: {DERIVED[pattern]}; remove it"
    return f"{dotted}: unknown key{closest_key(key, known)}"


def normalise(raw: dict[str, Any]) -> dict[str, Any]:
    """Return ``raw`` with accepted aliases folded into their canonical keys; raises ConfigError on a clash."""
    for section, alias, canonical in ALIASES:
        node = raw.get(section)
        if not isinstance(node, dict) or alias not in node:
            continue
        node = dict(node)
        value = node.pop(alias)
        if canonical in node and node[canonical] != value:
            raise ConfigError(
                f"{section}.{alias} ({value!r}) and {section}.{canonical} ({node[canonical]!r}) are the same "
                f"setting and disagree; keep one"
            )
        node[canonical] = value
        raw = {**raw, section: node}
    return raw
