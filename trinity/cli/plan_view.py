"""``trinity run --dry-run``: the resolved plan of a config as plain text, without Ray, a model or torch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trinity.common.config.plan.data import DatasetPlan, TasksetPlan
from trinity.common.config.plan.run import RunPlan
from trinity.common.config.precision import Precision
from trinity.common.config.validator import Layout

_WIDTH = 14


def _section(title: str, lines: Sequence[str]) -> list[str]:
    out = []
    for index, line in enumerate(lines):
        out.append(f"  {(title if index == 0 else ''):<{_WIDTH}}{line}")
    return out


def _where(path: str, split: str, subset: str | None) -> str:
    return f"{path} [{subset + '/' if subset else ''}{split}]"


def _taskset(taskset: TasksetPlan) -> str:
    sampling = taskset.sampling
    reward = taskset.reward_fn or "the workflow's default reward"
    routed = " (per-record workflow)" if taskset.format.workflow_key else ""
    where = _where(taskset.path, taskset.split, taskset.subset_name)
    return (f"{'eval' if taskset.is_eval else 'train'} {taskset.name}: {where}, "
            f"workflow {taskset.workflow or '-'}{routed}, {reward}; "
            f"{taskset.repeat_times} rollout(s) per task at temperature {sampling['temperature']:g}, "
            f"{sampling['max_tokens']} new tokens at most; keys prompt={taskset.format.prompt_key!r} "
            f"answer={taskset.format.response_key!r}; order {taskset.selector}")


def _dataset(data: DatasetPlan, role: str) -> str:
    fmt = data.format
    keys = (f"messages={fmt.messages_key!r}" if fmt.prompt_type == "messages" else
            f"prompt={fmt.prompt_key!r} " + (f"chosen={fmt.chosen_key!r} rejected={fmt.rejected_key!r}"
                                              if data.schema == "dpo" else f"response={fmt.response_key!r}"))
    return (f"{role} {data.name} ({data.schema}, {fmt.prompt_type}): {_where(data.path, data.split, data.subset_name)}"
            f", {data.total_epochs} epoch(s), keys {keys}")


def _algorithm_lines(training: Any) -> list[str]:
    describe = getattr(training, "describe", None)
    if callable(describe):
        return list(describe())
    return [f"{getattr(training, 'algorithm', '?')}: policy loss {getattr(training, 'policy_loss_fn', '?')}, "
            f"advantage {getattr(training, 'advantage_fn', None) or 'none'}"]


def render_plan(plan: RunPlan, layout: Layout, backend_line: str, warnings: Sequence[str], source: str, *,
                precision: Precision | None = None) -> str:
    """Return the dry-run report of ``plan`` laid out as ``layout`` on the backend ``backend_line`` describes.

    ``precision``: the model dtype and attention kernel the backend decided, shown under ``model``.
    """
    header = f"trinity run --dry-run: {source}"
    if plan.stage is not None:
        header += f" (stage {plan.stage[0]}/{plan.stage[1]}: {plan.stage[2]})"
    chose = layout.chose_colocate(plan)
    lines = [header, *_section("mode", [plan.mode if chose is None else "colocate (chosen: one device)"])]
    lines += _section("device", [backend_line])
    lines += _section("layout", layout.describe())
    if plan.uses_explorer and plan.uses_trainer:
        sync = plan.sync
        adapter_only = plan.trainer.lora is not None and layout.engine_type == "vllm"
        lines += _section("sync", [f"{sync.method} -> {layout.sync_method}, every {sync.interval} step(s), "
                                   f"explorer ahead by {sync.offset}, timeout {sync.timeout:g} s"
                                   + ("; the LoRA adapter alone, into each vllm engine's LoRA slot"
                                      if adapter_only else "")])
    lines += _section("algorithm", _algorithm_lines(plan.algorithm))
    model = plan.model
    dtype = f"dtype {model.dtype}; " if precision is None else ""
    external = plan.explorer.rollout.external
    if external is not None:
        lines += _section("model", [f"{external.model_name} at the external endpoint ${external.base_url_env} "
                                    f"(key ${external.api_key_env}); at most {model.max_response_tokens} new tokens "
                                    "per reply; evaluated once, no checkpoint loaded"])
    else:
        lines += _section("model", [f"{model.path}{' (built tiny if missing)' if model.tiny else ''}; {dtype}"
                                    f"context {model.max_model_len} = prompt {model.max_prompt_tokens} + response "
                                    f"{model.max_response_tokens}", *(precision.describe() if precision else [])])
    if plan.uses_trainer:
        trainer = plan.trainer
        lines += _section("trainer", [
            trainer.optimizer.describe(),
            f"{trainer.batching.describe()}, {trainer.ppo_epochs} ppo epoch(s), grad clip {trainer.grad_clip:g}, "
            f"gradient checkpointing {'on' if trainer.gradient_checkpointing else 'off'}",
            f"checkpoint every {trainer.save_interval or 'end'}; keep {trainer.max_checkpoints or 'all'}; "
            f"Hugging Face export: {trainer.save_hf}"
            + (f"; stop after {trainer.total_steps} steps" if trainer.total_steps else ""),
            *([f"critic: {trainer.critic.optimizer.describe()}, value clip {trainer.critic.cliprange_value:g}"]
              if trainer.critic else []),
            *([f"LoRA: {trainer.lora.describe()}; the base model frozen"
               + ("; reference: the base (adapters off)" if plan.algorithm.use_reference else "")
               + "; hf engines get merged weights, vllm engines the adapter; checkpoints hold the adapters"]
              if trainer.lora else []),
            *([f"Ulysses sequence parallelism: groups of {trainer.ulysses_size} ranks share each packed sequence "
               "(the trainer's devices must be a multiple)"] if trainer.ulysses_size > 1 else []),
        ])
    if plan.uses_explorer:
        explorer = plan.explorer
        lines += _section("explorer", [f"{explorer.runners_per_engine} runner(s) per engine, "
                                       f"{explorer.timeout:g} s per task, {explorer.max_retries} retries, "
                                       f"evaluate every {explorer.eval_interval or '-'} step(s)"])
    buffer = plan.buffer
    data = [_taskset(t) for t in (buffer.train_taskset, *buffer.eval_tasksets) if t is not None]
    if buffer.dataset is not None:
        data.append(_dataset(buffer.dataset, "train"))
    data += [_dataset(d, f"auxiliary {name}:") for name, d in buffer.auxiliary.items()]
    lines += _section("data", data or ["-"])
    per_step = (f"whole tasks up to {buffer.train_batch_rows} experience(s)" if buffer.train_batch_rows is not None
                else f"{buffer.train_batch_size} row(s)" if buffer.experience is None
                else f"{buffer.batch_size} whole task(s)")
    batches = [f"{buffer.batch_size} task(s) per explorer step, {per_step} per training step, "
               f"{buffer.total_epochs} epoch(s)" + (f", {buffer.total_steps} step(s) at most" if buffer.total_steps
                                                    else "")]
    if buffer.experience is not None:
        batches.append(f"experiences: {buffer.experience.kind} {buffer.experience.name!r}, sampled by "
                       f"{buffer.sample_strategy}")
        replay = buffer.experience.replay
        if replay is not None:
            args = ", ".join(f"{k} {v}" for k, v in replay.priority_fn_args.items())
            reuse = (f"reused {replay.cooldown:g} s after each use" if replay.cooldown is not None
                     else "each group used once")
            batches.append(f"experience replay: priority {replay.priority_fn}" + (f" ({args})" if args else "")
                           + f", {reuse}, up to {replay.capacity or 'any number of'} experience(s) ready")
    if buffer.operators:
        batches.append("experience operators, in order: " + ", ".join(
            op.name + (f" ({', '.join(f'{k} {v}' for k, v in op.args.items())})" if op.args else "")
            for op in buffer.operators))
    if buffer.record_path:
        batches.append(f"explored experiences recorded in {buffer.record_path}")
    lines += _section("buffer", batches)
    lines += _section("run folder", [str(plan.run_dir)])
    notes = [*plan.notes, *([chose] if chose else []), *layout.notes]
    if notes:
        lines += _section("notes", [f"- {n}" for n in notes])
    if warnings:
        lines += _section("warnings", [f"- {w}" for w in warnings])
    return "\n".join(lines)
