"""The trainer's settings resolved from ``algorithm.optimizer``, ``trainer.*`` and the veRL keys mapped onto them."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

from trinity.common.config.loader import ConfigError
from trinity.common.config.plan.trainer import (
    BatchingPlan,
    CriticPlan,
    LoraPlan,
    OffloadPlan,
    OptimizerPlan,
    TrainerPlan,
)
from trinity.common.config.schema import Config, OptimizerConfig
from trinity.common.config.schema.model import LoraConfig
from trinity.common.config.verl_keys import VerlSettings


def optimizer_plan(base: OptimizerConfig, mapped: dict[str, Any], where: str) -> OptimizerPlan:
    """Return the optimizer of ``base`` with veRL ``mapped`` values (``optim.lr`` → lr, ...) applied."""

    def pick(name: str) -> Any:
        return mapped.get(name, getattr(base, name))

    style = (pick("warmup_style") or pick("lr_scheduler_type")).strip().lower()
    kind_name = str(mapped.get("optimizer", base.optimizer_type)).strip().lower()
    kinds = {"adam": "adamw", "adamw": "adamw", "sgd": "sgd"}
    if kind_name not in kinds:
        raise ConfigError(f"{where}.optimizer_type: {kind_name!r} is not one of adam, adamw, sgd")
    if style not in ("constant", "cosine"):
        raise ConfigError(f"{where}.lr_scheduler_type: {style!r} is not one of constant, cosine")
    betas = list(pick("betas"))
    if len(betas) != 2:
        raise ConfigError(f"{where}.betas: expected two numbers, got {betas}")
    warmup = int(pick("lr_warmup_steps"))
    lr = float(pick("lr"))
    if lr <= 0:
        raise ConfigError(f"{where}.lr: must be positive, got {lr:g}")
    return OptimizerPlan(
        kind=kinds[kind_name],  # type: ignore[arg-type]
        lr=lr,
        betas=(float(betas[0]), float(betas[1])),
        weight_decay=float(pick("weight_decay")),
        scheduler=style,  # type: ignore[arg-type]
        warmup_steps=warmup if warmup >= 0 else None,
        warmup_ratio=float(pick("lr_warmup_steps_ratio")),
        min_lr_ratio=float(pick("min_lr_ratio")),
    )


def _prefixed(verl: VerlSettings, prefix: str) -> dict[str, Any]:
    return {k[len(prefix) :]: v[0] for k, v in verl.mapped.items() if k.startswith(prefix)}


def _modules(value: Any) -> str | tuple[str, ...] | None:
    if value is None or isinstance(value, str):
        return value
    return tuple(str(v) for v in value)


def _adapter_folder_plan(entry: LoraConfig, where: str) -> LoraPlan:
    """The plan of an adapter that starts from the PEFT folder ``entry.path``: its own rank, alpha and targets."""
    folder = Path(str(entry.path)).expanduser()
    config_file = folder / "adapter_config.json"
    if not config_file.is_file():
        raise ConfigError(f"{where}.path: {folder} holds no adapter_config.json; point it at a PEFT LoRA adapter "
                          "folder (as `trinity convert --adapter` writes), or remove path to train a fresh adapter")
    try:
        saved = json.loads(config_file.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{where}.path: cannot read {config_file}: {exc}") from None
    if str(saved.get("peft_type", "LORA")).upper() != "LORA":
        raise ConfigError(f"{where}.path: {folder} is a {saved.get('peft_type')} adapter; only LoRA is supported")
    for key, why in (("use_dora", "DoRA"), ("use_rslora", "rank-stabilised scaling")):
        if saved.get(key):
            raise ConfigError(f"{where}.path: the adapter in {folder} uses {why} ({key}: true), which is not "
                              "supported; use a plain LoRA adapter")
    if str(saved.get("bias", "none")) != "none":
        raise ConfigError(f"{where}.path: the adapter in {folder} trains biases (bias: {saved.get('bias')!r}); "
                          "only bias: none is supported")
    return LoraPlan(rank=int(saved["r"]), alpha=float(saved.get("lora_alpha", saved["r"])),
                    target_modules=_modules(saved.get("target_modules")) or "all-linear",
                    exclude_modules=_modules(saved.get("exclude_modules")), adapter_path=str(folder),
                    name=entry.name or "lora")


def lora_plan(config: Config) -> LoraPlan | None:
    """Return the LoRA adapter of ``model.lora_configs`` (None without one); ConfigError when it cannot be trained."""
    entries = config.model.lora_configs
    if not entries:
        return None
    if len(entries) > 1:
        raise ConfigError(f"model.lora_configs: {len(entries)} adapters given; one is supported (as upstream): "
                          "keep one entry")
    entry, where = entries[0], "model.lora_configs[0]"
    if importlib.util.find_spec("peft") is None:
        raise ConfigError(f"{where}: LoRA needs the peft package, which is not installed; "
                          "run pip install 'trinity-rft[lora]'")
    if entry.path:
        return _adapter_folder_plan(entry, where)
    if entry.lora_rank < 1:
        raise ConfigError(f"{where}.lora_rank: must be at least 1, got {entry.lora_rank}")
    if entry.lora_alpha <= 0:
        raise ConfigError(f"{where}.lora_alpha: must be positive, got {entry.lora_alpha}")
    targets = _modules(entry.target_modules)
    if not targets:
        raise ConfigError(f"{where}.target_modules: empty; use all-linear or name the modules (q_proj, v_proj, ...)")
    return LoraPlan(rank=int(entry.lora_rank), alpha=float(entry.lora_alpha), target_modules=targets,
                    exclude_modules=_modules(entry.exclude_modules), name=entry.name or "lora")


def ulysses_size(config: Config, verl: VerlSettings, *, use_critic: bool, pack_sequences: bool | None) -> int:
    """Return the Ulysses sequence-parallel size (``trainer.ulysses_sequence_parallel_size`` or veRL's keys).

    ``pack_sequences`` is veRL's ``use_remove_padding`` where given (None: unset).
    """
    size = int(config.trainer.ulysses_sequence_parallel_size)
    for owner in ("actor", "ref"):
        key = f"{owner}.ulysses_sequence_parallel_size"
        if key in verl.mapped and int(verl.get(key)) != size:
            if config.source.is_set("trainer.ulysses_sequence_parallel_size") or owner == "ref":
                raise ConfigError(f"{verl.source(key)} ({verl.get(key)}) differs from "
                                  f"trainer.ulysses_sequence_parallel_size ({size}); the actor and the reference "
                                  "share one sequence-parallel layout here: set them equal")
            size = int(verl.get(key))
    if size < 1:
        raise ConfigError(f"trainer.ulysses_sequence_parallel_size: must be at least 1, got {size}")
    if size == 1:
        return 1
    where = "trainer.ulysses_sequence_parallel_size"
    if use_critic:
        raise ConfigError(f"{where}: {size} with a critic (PPO): the critic does not run sequence-parallel here; "
                          "set it to 1, or use an algorithm without a critic (GRPO, ...)")
    if pack_sequences is False:
        raise ConfigError(f"{where}: {size} needs packed sequences, but actor_rollout_ref.model.use_remove_padding "
                          "is false; set it to true (veRL requires it for Ulysses too)")
    if config.mode == "colocate":
        raise ConfigError(f"{where}: {size} in mode colocate, which has one trainer device; set it to 1 (as upstream)")
    return size


def offload_plan(verl: VerlSettings, owner: str) -> OffloadPlan:
    """Return what veRL's ``fsdp_config`` keys of ``owner`` (actor, ref, critic) offload.

    ``param_offload`` and FSDP2's ``offload_policy`` both put the parameters on
    the host; with them the optimizer state is there too (the reference model has none).
    """
    params = bool(verl.get(f"{owner}.param_offload", False)) or bool(verl.get(f"{owner}.offload_policy", False))
    if owner == "ref":  # no optimizer
        return OffloadPlan(params=params)
    return OffloadPlan(params=params, optimizer=params or bool(verl.get(f"{owner}.optimizer_offload", False)))


def _check_agreement(config: Config, verl: VerlSettings, target: str, ours: str, value: Any) -> None:
    """Refuse a mapped veRL value that contradicts the same setting given in its own section."""
    if target in verl.mapped and config.source.is_set(ours) and verl.get(target) != value:
        raise ConfigError(
            f"{verl.source(target)} ({verl.get(target)!r}) and {ours} ({value!r}) set the same thing differently; "
            f"keep {ours}"
        )


def resolve_trainer(
    config: Config,
    verl: VerlSettings,
    *,
    dtype: str,
    max_model_len: int,
    use_critic: bool,
    critic_path: str,
    temperature: float,
) -> TrainerPlan:
    """Return the :class:`TrainerPlan` of ``config`` with ``verl``'s mapped values; raises ConfigError."""
    trainer = config.trainer
    actor_optim = _prefixed(verl, "actor.optim.")
    for name in actor_optim:
        _check_agreement(
            config,
            verl,
            f"actor.optim.{name}",
            f"algorithm.optimizer.{name}",
            getattr(config.algorithm.optimizer, "optimizer_type" if name == "optimizer" else name),
        )
    optimizer = optimizer_plan(config.algorithm.optimizer, actor_optim, "algorithm.optimizer")
    default_tokens = trainer.max_token_len_per_gpu or math.ceil(2 * max_model_len)
    use_dynamic = bool(verl.get("actor.use_dynamic_bsz", trainer.use_dynamic_bsz))
    tokens = int(verl.get("actor.max_token_len", default_tokens))
    tokens = max(tokens, max_model_len)  # upstream raises a too-small budget to one whole sequence
    batching = BatchingPlan(int(verl.get("actor.micro_batch_size", 1)), use_dynamic, tokens)
    forward = BatchingPlan(
        int(verl.get("forward.micro_batch_size", batching.micro_batch_size)),
        bool(verl.get("forward.use_dynamic_bsz", use_dynamic)),
        max(int(verl.get("forward.max_token_len", tokens)), max_model_len),
    )
    for plan, where in ((batching, "actor"), (forward, "ref")):
        if plan.micro_batch_size < 1 or plan.max_token_len < 1:
            raise ConfigError(f"trainer.trainer_config ({where}): micro-batch sizes and token budgets must be positive")
    grad_clip = float(verl.get("actor.grad_clip", trainer.grad_clip))
    ppo_epochs = int(verl.get("actor.ppo_epochs", 1))
    if ppo_epochs < 1:
        raise ConfigError(f"{verl.source('actor.ppo_epochs')}: must be at least 1, got {ppo_epochs}")
    critic = None
    if use_critic:
        critic_optim = _prefixed(verl, "critic.optim.")
        base = OptimizerConfig(lr=1e-6)  # upstream's critic optimizer defaults, not the actor's
        critic_batching = BatchingPlan(
            int(verl.get("critic.micro_batch_size", 1)),
            bool(verl.get("critic.use_dynamic_bsz", trainer.use_dynamic_bsz)),
            max(int(verl.get("critic.max_token_len", default_tokens)), max_model_len),
        )
        critic = CriticPlan(
            path=critic_path,
            optimizer=optimizer_plan(base, critic_optim, "trainer.trainer_config.critic.optim"),
            batching=critic_batching,
            forward=BatchingPlan(
                int(verl.get("critic.forward_micro_batch_size", critic_batching.micro_batch_size)),
                critic_batching.use_dynamic_bsz,
                max(int(verl.get("critic.forward_max_token_len", critic_batching.max_token_len)), max_model_len),
            ),
            grad_clip=float(verl.get("critic.grad_clip", trainer.grad_clip)),
            cliprange_value=float(verl.get("critic.cliprange_value", 0.0)),
            ppo_epochs=int(verl.get("critic.ppo_epochs", 1)),
            loss_agg_mode=str(verl.get("critic.loss_agg_mode", "token-mean")),
            gradient_checkpointing=bool(verl.get("critic.gradient_checkpointing", True)),
            offload=offload_plan(verl, "critic"),
        )
        if critic.ppo_epochs != ppo_epochs:
            raise ConfigError(
                f"trainer.trainer_config.critic.ppo_epochs ({critic.ppo_epochs}) differs from the actor's "
                f"({ppo_epochs}); the critic updates alongside the actor here: set them equal"
            )
    padding_removed = verl.get("actor.use_remove_padding") if "actor.use_remove_padding" in verl.mapped else None
    sequence_parallel = ulysses_size(config, verl, use_critic=use_critic,
                                     pack_sequences=None if padding_removed is None else bool(padding_removed))
    lora = lora_plan(config)
    keep = trainer.max_checkpoints_to_keep
    if keep is None and "trainer.max_checkpoints_to_keep" in verl.mapped:
        keep = int(verl.get("trainer.max_checkpoints_to_keep"))
    if keep is not None and keep < 1:
        raise ConfigError(f"trainer.max_checkpoints_to_keep: must be at least 1 (None keeps all), got {keep}")
    return TrainerPlan(
        optimizer=optimizer,
        batching=batching,
        forward=forward,
        grad_clip=grad_clip,
        ppo_epochs=ppo_epochs,
        gradient_checkpointing=bool(verl.get("actor.gradient_checkpointing", True)),
        save_interval=trainer.save_interval,
        max_checkpoints=keep,
        save_hf=trainer.save_hf_checkpoint.strip().lower(),
        save_on_stop=bool(trainer.save_on_stop),
        total_steps=trainer.total_steps,
        use_torch_compile=trainer.use_torch_compile,
        dtype=dtype,
        seed=config.explorer.rollout_model.seed,
        recompute_old_logprobs=not bool(verl.get("algorithm.bypass_mode", True)),
        temperature=temperature,
        critic=critic,
        pack_sequences=bool(verl.get("actor.use_remove_padding", False)) or sequence_parallel > 1,
        share_prompt_prefix=bool(trainer.share_prompt_prefix),
        offload=offload_plan(verl, "actor"),
        # with LoRA the reference model is the actor with its adapters off: there is no second model to offload
        reference_offload=offload_plan(verl, "ref") if lora is None else OffloadPlan(),
        lora=lora,
        ulysses_size=sequence_parallel,
    )
