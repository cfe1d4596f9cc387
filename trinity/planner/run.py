"""A config resolved into its :class:`~trinity.common.config.plan.run.RunPlan`.

:func:`resolve_run` checks every name a config uses (algorithm pieces,
workflows, reward functions, sample strategies, operators) against their
catalogs, derives what upstream Trinity-RFT derives (lengths, batch sizes,
the trainer's settings from ``trainer.trainer_config``) and records every
choice it made on the user's behalf in ``notes``. The config itself is never
rewritten.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

from trinity.common.config.loader import ConfigError, in_file
from trinity.common.config.plan.data import BufferPlan, DatasetPlan, StoragePlan, TasksetPlan
from trinity.common.config.plan.model import ModelPlan
from trinity.common.config.plan.run import ClusterPlan, MonitorPlan, RunPlan, SyncPlan
from trinity.common.config.schema import AlgorithmConfig, Config
from trinity.common.config.verl_keys import VerlKeyError, VerlSettings, read_trainer_config
from trinity.device.collectives import UPSTREAM_ONLINE_SYNC_METHOD
from trinity.planner.data import record_target, resolve_dataset, resolve_storage, resolve_taskset, with_chat_template
from trinity.planner.explorer import auxiliary_overlong, resolve_explorer
from trinity.planner.model import resolve_model
from trinity.planner.trainer import offload_plan, resolve_trainer


def run_dir_of(config: Config) -> Path:
    """Return ``<checkpoint_root_dir>/<project>/<group>/<name>`` as an absolute path (root "" = working folder)."""
    root = Path(config.checkpoint_root_dir or ".").expanduser()
    parts = [config.project, *([config.group] if config.group else []), config.name]
    return (root.joinpath(*parts)).absolute()


def _verl(config: Config) -> VerlSettings:
    try:
        return read_trainer_config(config.trainer.trainer_config)
    except VerlKeyError as exc:
        raise ConfigError(str(exc)) from None


def effective_algorithm(config: Config, verl: VerlSettings) -> AlgorithmConfig:
    """Return ``config.algorithm`` with the veRL keys that map onto it applied (a copy).

    A veRL key that contradicts the same setting given in ``algorithm`` is a ConfigError.
    """
    algorithm = copy.deepcopy(config.algorithm)
    for target, (value, key) in verl.mapped.items():
        if not target.startswith("algorithm.") or target == "algorithm.bypass_mode":
            continue
        parts = target.split(".")[1:]
        if len(parts) == 1:
            current = getattr(algorithm, parts[0])
            if current is not None and config.source.is_set(target) and current != value:
                raise ConfigError(f"trainer.trainer_config.{key} ({value!r}) and {target} ({current!r}) disagree; "
                                  f"keep {target}")
            setattr(algorithm, parts[0], value)
        else:
            args_name, option = parts
            args = dict(getattr(algorithm, args_name) or {})
            if option in args and args[option] != value:
                raise ConfigError(f"trainer.trainer_config.{key} ({value!r}) and algorithm.{args_name}.{option} "
                                  f"({args[option]!r}) disagree; keep algorithm.{args_name}.{option}")
            args[option] = value
            setattr(algorithm, args_name, args)
    return algorithm


def _training_plan(algorithm: AlgorithmConfig) -> Any:
    from trinity.trainer.plan import resolve_plan
    from trinity.utils.registry import RegistryError

    try:
        return resolve_plan(algorithm)
    except (RegistryError, ValueError) as exc:
        message = str(exc)
        raise ConfigError(message if message.startswith("algorithm") else f"algorithm: {message}") from None


def _schema_of(plan: Any) -> str:
    return str(getattr(plan, "schema", "experience"))


def _tasksets(config: Config, model: ModelPlan, notes: list[str]) -> tuple[TasksetPlan | None, tuple[TasksetPlan, ...]]:
    explorer_input = config.buffer.explorer_input
    where = "buffer.explorer_input"
    train = None
    if explorer_input.taskset is not None and explorer_input.tasksets:
        raise ConfigError(f"{where}: set taskset or tasksets, not both")
    if len(explorer_input.tasksets) > 1:
        raise ConfigError(f"{where}.tasksets: {len(explorer_input.tasksets)} training task sets are not supported "
                          "yet; use one (buffer.explorer_input.taskset)")
    spec, spec_where = ((explorer_input.taskset, f"{where}.taskset") if explorer_input.taskset is not None else
                        (explorer_input.tasksets[0], f"{where}.tasksets[0]") if explorer_input.tasksets else
                        (None, ""))
    if config.mode in ("both", "colocate", "explore"):
        if spec is None:
            raise ConfigError(f"{where}.taskset: mode {config.mode} needs a training task set")
        train = resolve_taskset(config, spec, spec_where, 0, is_eval=False,
                                response_tokens=model.max_response_tokens, notes=notes)
        train = dataclasses.replace(train, format=with_chat_template(train.format, model.chat_template,
                                                                     model.enable_thinking))
    evals = []
    names: set[str] = set()  # evaluation metrics are named by their set; the training set's are not
    for index, taskset in enumerate(explorer_input.eval_tasksets):
        plan = resolve_taskset(config, taskset, f"{where}.eval_tasksets[{index}]", index, is_eval=True,
                               response_tokens=model.max_response_tokens, notes=notes)
        if plan.name in names:
            raise ConfigError(f"{where}.eval_tasksets[{index}].name: {plan.name!r} names two evaluation sets; their "
                              "metrics would mix: give each its own name")
        names.add(plan.name)
        evals.append(dataclasses.replace(plan, format=with_chat_template(plan.format, model.chat_template,
                                                                          model.enable_thinking)))
    if config.mode == "bench" and not evals:
        raise ConfigError(f"{where}.eval_tasksets: mode bench needs at least one evaluation task set")
    return train, tuple(evals)


def _buffer(config: Config, model: ModelPlan, training: Any, notes: list[str]) -> BufferPlan:
    buffer = config.buffer
    schema = _schema_of(training)
    train, evals = _tasksets(config, model, notes)
    trainer_input = buffer.trainer_input
    where = "buffer.trainer_input.experience_buffer"
    experience: StoragePlan | None = None
    dataset: DatasetPlan | None = None
    record: str | None = None
    if schema in ("sft", "dpo"):
        if config.mode != "train":
            raise ConfigError(
                f"mode: {config.algorithm.algorithm_type} trains on a data set, so it runs in mode train, not "
                f"{config.mode}"
            )
        if trainer_input.experience_buffer is None:
            raise ConfigError(f"{where}: {config.algorithm.algorithm_type} needs its data set here "
                              "(storage_type: file, path, format)")
        dataset = resolve_dataset(trainer_input.experience_buffer, where, schema, buffer.total_epochs)  # type: ignore[arg-type]
        dataset = dataclasses.replace(dataset, format=with_chat_template(dataset.format, model.chat_template,
                                                                         model.enable_thinking))
    elif config.mode not in ("bench", "serve"):
        spec = trainer_input.experience_buffer
        if spec is None:
            from trinity.common.config.schema import ExperienceBufferConfig

            spec = ExperienceBufferConfig(name="experience_buffer")
        experience, record, note = resolve_storage(spec, where, config.mode)
        if note:
            notes.append(note)
    auxiliary = {}
    for name, spec in trainer_input.auxiliary_buffers.items():
        aux_where = f"buffer.trainer_input.auxiliary_buffers.{name}"
        plan = resolve_dataset(spec, aux_where, (spec.schema_type or "sft").lower(), spec.total_epochs)  # type: ignore[arg-type]
        auxiliary[name] = dataclasses.replace(plan, format=with_chat_template(plan.format, model.chat_template,
                                                                             model.enable_thinking))
    pipeline = config.data_processor.experience_pipeline
    if config.mode in ("both", "colocate", "explore") and pipeline.save_input:
        saved = pipeline.input_save_path or "sqlite:///" + str(run_dir_of(config) / "buffer" / "explorer_output.db")
        saved = record_target(saved, "data_processor.experience_pipeline.input_save_path")
        if record is not None and record != saved:
            notes.append(f"explored experiences are recorded in {saved} (experience_pipeline.save_input); "
                         f"{where}.path ({record}) is not written twice")
        record = saved
    train_batch = buffer.train_batch_size or buffer.batch_size * (config.algorithm.repeat_times
                                                                  if schema == "experience" else 1)
    return BufferPlan(
        batch_size=buffer.batch_size,
        train_batch_size=train_batch,
        total_epochs=buffer.total_epochs,
        total_steps=buffer.total_steps,
        train_taskset=train,
        eval_tasksets=evals,
        experience=experience,
        dataset=dataset,
        auxiliary=auxiliary,
        record_path=record,
        operators=tuple(pipeline.operators),
        sample_strategy=training.sample_strategy,
        sample_strategy_args=dict(training.sample_strategy_options),
        train_batch_rows=(buffer.train_batch_size or None) if schema == "experience" else None,
    )


def _check_names(plan: BufferPlan, training: Any) -> None:
    """Check every workflow, reward function, sample strategy and operator a config names; raises ConfigError."""
    from trinity.algorithm.options import UnknownOptionError, check_options
    from trinity.buffer.catalog import REWARD_SHAPERS
    from trinity.common.workflows.catalog import REWARD_FNS, WORKFLOWS

    if plan.sample_strategy == "mix" and plan.experience is not None and plan.experience.replay is not None:
        raise ConfigError(
            "buffer.trainer_input.experience_buffer.replay_buffer.enable: experience replay does not combine with "
            "sample strategy mix here (its expert rows have no priority); set one of them off"
        )
    if plan.sample_strategy == "mix":
        name = str(plan.sample_strategy_args.get("sft_dataset_name", "sft_dataset"))
        if name not in plan.auxiliary:
            raise ConfigError(
                f"buffer.trainer_input.auxiliary_buffers: sample strategy mix takes its expert rows from the data set "
                f"{name!r}, which is not there; add it (an SFT data set) or set sample_strategy_args.sft_dataset_name"
            )
    for index, operator in enumerate(plan.operators):
        where = f"data_processor.experience_pipeline.operators[{index}]"
        if not REWARD_SHAPERS.resolves(operator.name):
            raise ConfigError(f"{where}.name: {_unknown(REWARD_SHAPERS, operator.name)}")
        try:
            check_options(REWARD_SHAPERS.kind, operator.name, REWARD_SHAPERS.get(operator.name), dict(operator.args))
        except UnknownOptionError as exc:
            raise ConfigError(f"{where}.args: {exc}") from None

    from trinity.common.rewards.base import RewardOptionError, check_reward_options
    from trinity.common.workflows.catalog import unavailable_reason

    for taskset in [t for t in (plan.train_taskset, *plan.eval_tasksets) if t is not None]:
        if taskset.workflow and not WORKFLOWS.resolves(taskset.workflow):
            why = unavailable_reason(taskset.workflow)
            key = taskset.workflow_key or taskset.where
            raise ConfigError(f"{key}: {why or _unknown(WORKFLOWS, taskset.workflow)}")
        if taskset.reward_fn and not REWARD_FNS.resolves(taskset.reward_fn):
            why = unavailable_reason(taskset.reward_fn)
            key = taskset.reward_key or taskset.where
            raise ConfigError(f"{key}: {why or _unknown(REWARD_FNS, taskset.reward_fn)}")
        if taskset.reward_fn and taskset.reward_fn_args:
            try:
                check_reward_options(taskset.reward_fn, taskset.reward_fn_args)
            except RewardOptionError as exc:
                raise ConfigError(f"{taskset.where}.reward_fn_args: {exc}") from None


def _unknown(registry: Any, name: str) -> str:
    try:
        registry.get(name)
    except Exception as exc:  # noqa: BLE001 - the registry's own one-line message is what we want
        return str(exc)
    return f"unknown {registry.kind} {name!r}"


#: Upstream's older spellings of the sync styles.
SYNC_STYLE_ALIASES = {"dynamic_by_explorer": "explorer_driven", "dynamic_by_trainer": "trainer_driven"}


def _check_images(buffer: Any, model_path: str) -> None:
    """Refuse task sets and data sets with images (``format.image_key``) on a text-only model."""
    from trinity.common.models.vision import folder_is_vision_language

    tasksets = [t for t in (buffer.train_taskset, *buffer.eval_tasksets) if t is not None and t.format.image_key]
    datasets = [d for d in (buffer.dataset, *buffer.auxiliary.values()) if d is not None and d.format.image_key]
    if not tasksets and not datasets:
        return
    where = (f"task set {tasksets[0].name!r}" if tasksets else f"data set {datasets[0].name!r}") + ": format.image_key"
    if (Path(model_path) / "config.json").is_file() and not folder_is_vision_language(model_path):
        raise ConfigError(f"{where} gives the records images, but {model_path} has no vision tower; use a "
                          "vision-language model (Qwen2.5-VL's layout), or model.tiny.vision: true for the tiny one")


def _sync(config: Config, schema: str, notes: list[str]) -> SyncPlan:
    sync = config.synchronizer
    method = sync.sync_method.strip().lower()
    if schema in ("sft", "dpo") and method not in ("checkpoint", "offline"):
        notes.append(f"synchronizer.sync_method: {config.algorithm.algorithm_type} has no explorer; weights are "
                     "published as checkpoints (as upstream does)")
        method = "checkpoint"
    style = SYNC_STYLE_ALIASES.get(sync.sync_style.strip().lower(), sync.sync_style.strip().lower())
    if method == UPSTREAM_ONLINE_SYNC_METHOD and schema not in ("sft", "dpo"):
        notes.append(f"synchronizer.sync_method: {method} is upstream's name for online sync: the selected "
                     "backend's collective (nccl on CUDA, hccl on Ascend, gloo on CPU)")
    interval = sync.sync_interval
    if schema in ("sft", "dpo") and config.trainer.save_interval > 0:
        interval = config.trainer.save_interval  # upstream publishes a data-set run's weights with its checkpoints
    return SyncPlan(method, interval, sync.sync_offset, float(sync.sync_timeout), sync.bucket_size_mb,
                    sync.verify_checksums, style)


def _monitor(config: Config) -> MonitorPlan:
    monitor = config.monitor
    return MonitorPlan(monitor.monitor_type.strip().lower(), dict(monitor.monitor_args or {}),
                       monitor.detailed_stats, monitor.enable_ray_timeline, monitor.jsonl, monitor.plot,
                       monitor.progress)


def resolve_run(config: Config, *, stage: tuple[int, int, str] | None = None) -> RunPlan:
    """Return the :class:`RunPlan` of ``config``: every name checked, every derived value filled.

    Raises :class:`ConfigError` (one line, with the config file and the dotted
    path) for anything a run would trip over.
    """
    try:
        return _resolve(config, stage)
    except ConfigError as exc:
        raise in_file(config, exc) from None


def _resolve(config: Config, stage: tuple[int, int, str] | None) -> RunPlan:
    notes: list[str] = []
    model = resolve_model(config)
    verl = _verl(config)
    algorithm = effective_algorithm(config, verl)
    training = _training_plan(algorithm)
    buffer = _buffer(config, model, training, notes)
    _check_names(buffer, training)
    explorer = resolve_explorer(config, model)
    for index, engine in enumerate(config.explorer.auxiliary_models):
        given = (engine.max_model_len if engine.max_model_len is not None else config.model.max_model_len,
                 engine.max_prompt_tokens if engine.max_prompt_tokens is not None else config.model.max_prompt_tokens,
                 engine.max_response_tokens if engine.max_response_tokens is not None
                 else config.model.max_response_tokens)
        if (kept := auxiliary_overlong(given)) is not None:
            notes.append(f"explorer.auxiliary_models[{index}]: max_prompt_tokens + max_response_tokens "
                         f"({given[1]} + {given[2]}) exceed max_model_len ({given[0]}); its replies stop at "
                         f"{kept} tokens after a prompt of {given[1]}")
    if config.mode == "serve":
        if not config.explorer.rollout_model.enable_openai_api:
            notes.append("explorer.rollout_model.enable_openai_api: turned on: mode serve serves the rollout "
                         "engines' OpenAI API")
        if config.explorer.service_status_check_interval < 1:
            raise ConfigError("explorer.service_status_check_interval: mode serve looks for published weights every "
                              f"N seconds; N must be at least 1, got {config.explorer.service_status_check_interval}")
    rollout_temperature = (buffer.train_taskset.sampling["temperature"] if buffer.train_taskset is not None
                           else config.model.temperature)
    trainer = resolve_trainer(config, verl, dtype=model.dtype, max_model_len=model.max_model_len,
                              use_critic=bool(getattr(training, "use_critic", False)),
                              critic_path=model.critic_path, temperature=float(rollout_temperature))
    _check_images(buffer, model.path)
    if trainer.lora is not None:  # a vllm engine serves the adapter from a LoRA slot (see the launcher's sync)
        explorer = dataclasses.replace(explorer, rollout=dataclasses.replace(explorer.rollout, lora=trainer.lora))
    if trainer.lora is not None and offload_plan(verl, "ref").any:
        notes.append("trainer.trainer_config.actor_rollout_ref.ref.fsdp_config offload has no effect here: with "
                     "LoRA the reference model is the actor with its adapters off, offloaded as the actor is")
    sync = _sync(config, _schema_of(training), notes)
    for key, (_, source) in sorted(verl.mapped.items()):
        notes.append(f"trainer.trainer_config.{source} is applied as {key}")
    for key, why in (*config.source.inert, *verl.inert):
        notes.append(f"{key} has no effect here: {why}")
    cluster = config.cluster
    namespace = config.ray_namespace or f"{config.project}/{config.name}"
    return RunPlan(
        config=config,
        mode=config.mode,
        run_dir=run_dir_of(config),
        ray_namespace=namespace,
        model=model,
        cluster=ClusterPlan(cluster.ray_address or "auto", cluster.node_num, cluster.gpu_per_node,
                            cluster.device,
                            cluster.cpus_per_bundle),
        explorer=explorer,
        buffer=buffer,
        algorithm=training,
        trainer=trainer,
        sync=sync,
        monitor=_monitor(config),
        notes=tuple(notes),
        stage=stage,
    )
