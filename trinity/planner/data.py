"""Task sets, SFT/DPO data sets and experience buffers resolved from ``buffer`` with upstream's defaults."""

from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path
from typing import Any

from trinity.common.config.loader import ConfigError
from trinity.common.config.plan.data import DatasetPlan, ReplayPlan, Schema, SelectorType, StoragePlan, TasksetPlan
from trinity.common.config.schema import (
    Config,
    DataSelectorConfig,
    ExperienceBufferConfig,
    FormatConfig,
    TasksetConfig,
)


def _selector(selector: DataSelectorConfig, where: str, *, selectors: bool = False) -> tuple[SelectorType, int]:
    kind = selector.selector_type.strip().lower()
    if kind in ("sequential", "shuffle", "random"):
        return kind, selector.seed
    if selectors:
        from trinity.buffer.selector import SELECTORS

        if kind in SELECTORS:
            return kind, selector.seed
        known = ", ".join(["sequential", "shuffle", "random", *SELECTORS.names()])
        raise ConfigError(f"{where}.data_selector.selector_type: {kind!r} is not one of {known}")
    raise ConfigError(f"{where}.data_selector.selector_type: {kind!r} is not one of sequential, shuffle, random")


def _sampling(config: Config, taskset: TasksetConfig, response_tokens: int) -> dict[str, Any]:
    """Return the rollout sampling of ``taskset``: its rollout_args over the model's defaults."""
    args = taskset.rollout_args
    model = config.model
    top_k = model.top_k if args.top_k is None else args.top_k
    logprobs = model.logprobs if args.logprobs is None else args.logprobs
    return {
        "temperature": model.temperature if args.temperature is None else args.temperature,
        "top_p": model.top_p if args.top_p is None else args.top_p,
        "top_k": max(0, top_k),
        "max_tokens": response_tokens if args.max_tokens is None else args.max_tokens,
        "logprobs": logprobs,
    }


_EXPLORER_INPUT = "buffer.explorer_input"


def resolve_taskset(config: Config, taskset: TasksetConfig, where: str, index: int, *, is_eval: bool,
                    response_tokens: int, notes: list[str] | None = None) -> TasksetPlan:
    """Return the plan of one task set, with upstream's defaults filled in; raises ConfigError.

    Notes on settings that have no effect here are appended to ``notes``.
    """
    explorer_input = config.buffer.explorer_input
    if not taskset.path:
        raise ConfigError(f"{where}.path: required (a local folder or a JSON/JSONL/Parquet/Arrow file)")
    workflow, workflow_key = taskset.default_workflow_type, f"{where}.default_workflow_type"
    if workflow is None and is_eval:
        workflow = explorer_input.default_eval_workflow_type
        workflow_key = f"{_EXPLORER_INPUT}.default_eval_workflow_type"
    if workflow is None:
        workflow, workflow_key = explorer_input.default_workflow_type, f"{_EXPLORER_INPUT}.default_workflow_type"
    if not workflow and not taskset.format.workflow_key:
        raise ConfigError(
            f"{where}.default_workflow_type: no workflow for this task set; set it, or "
            "buffer.explorer_input.default_workflow_type (e.g. math_workflow)"
        )
    reward = taskset.default_reward_fn_type or explorer_input.default_reward_fn_type
    reward_key = (f"{where}.default_reward_fn_type" if taskset.default_reward_fn_type
                  else _EXPLORER_INPUT + ".default_reward_fn_type")
    selector_config = taskset.data_selector if taskset.task_selector is None else taskset.task_selector
    selector, seed = _selector(selector_config, where, selectors=not is_eval)
    sampling = _sampling(config, taskset, response_tokens)
    if sampling["logprobs"] and sampling["logprobs"] > 0:
        if notes is not None:
            notes.append(f"{where}.rollout_args.logprobs: {sampling['logprobs']} has no effect here: experiences "
                         "record the sampled token's log-prob only, as upstream's do (its top alternatives are "
                         "not kept)")
        sampling["logprobs"] = 0
    return TasksetPlan(
        name=taskset.name or (f"eval_taskset_{index}" if is_eval else f"taskset_{index}"),
        where=where,
        path=taskset.path,
        split=taskset.split,
        subset_name=taskset.subset_name,
        format=taskset.format,
        workflow=workflow or "",
        reward_fn=reward or None,
        workflow_args=dict(taskset.workflow_args),
        reward_fn_args=dict(taskset.reward_fn_args),
        sampling=sampling,
        repeat_times=taskset.repeat_times if is_eval else config.algorithm.repeat_times,
        selector=selector,
        seed=seed,
        is_eval=is_eval,
        enable_progress_bar=taskset.enable_progress_bar,
        workflow_key=workflow_key,
        reward_key=reward_key,
        selector_config=selector_config if selector not in ("sequential", "shuffle", "random") else None,
    )


def sqlite_file(url: str, where: str) -> str:
    """Return the absolute file of a ``sqlite:///file.db`` URL or a plain path (relative to the working folder).

    Raises ConfigError for another database URL.
    """
    prefix = "sqlite:///"
    if url.startswith(prefix):
        url = url[len(prefix):]
    elif "://" in url:
        raise ConfigError(f"{where}: {url!r} is not supported: only SQLite databases (sqlite:///file.db) are")
    return str(Path(url).expanduser().absolute())


def record_target(path: str, where: str) -> str:
    """Return a recording path as an absolute file: ``sqlite:///x.db`` → ``x.db``, ``.jsonl`` kept; else ConfigError."""
    if path.startswith("sqlite:///") or "://" in path:
        return sqlite_file(path, where)
    if path.endswith((".jsonl", ".json")):
        return str(Path(path).expanduser().absolute())
    raise ConfigError(f"{where}: {path!r} is neither sqlite:///file.db nor a .jsonl file")


def resolve_replay(buffer: ExperienceBufferConfig, where: str) -> ReplayPlan | None:
    """Return the replay plan of an experience buffer (None when off); raises ConfigError for bad settings."""
    from trinity.buffer.catalog import PRIORITY_FUNCTIONS

    replay = buffer.replay_buffer
    if not replay.enable:
        return None
    at = f"{where}.replay_buffer"
    name = str(replay.priority_fn or "").strip()
    if not name or ("." not in name and name not in PRIORITY_FUNCTIONS):
        raise ConfigError(f"{at}.priority_fn: {PRIORITY_FUNCTIONS.unknown_message(name)}")
    cooldown = replay.reuse_cooldown_time
    if cooldown is not None and cooldown < 0:
        raise ConfigError(f"{at}.reuse_cooldown_time: {cooldown} is negative; give seconds >= 0, or leave it unset "
                          "to use each group once")
    if not isinstance(replay.priority_fn_args, dict):
        raise ConfigError(f"{at}.priority_fn_args: expected a mapping of argument names to values")
    return ReplayPlan(name, dict(replay.priority_fn_args or {}), cooldown, max(0, int(buffer.capacity)))


def resolve_storage(buffer: ExperienceBufferConfig, where: str, mode: str) -> tuple[StoragePlan, str | None, str]:
    """Return ``(storage, record path or None, note)`` of an experience buffer; raises ConfigError."""
    kind = buffer.storage_type.strip().lower()
    name = buffer.name or "experience_buffer"
    note = ""
    replay = resolve_replay(buffer, where)
    if kind == "file" and mode in ("both", "colocate"):
        note = f"{where}.storage_type: file cannot carry experiences in mode both; a queue is used, as upstream does"
        kind = "queue"
    if kind == "queue":
        record = None
        if buffer.path:
            try:
                record = record_target(buffer.path, f"{where}.path")
            except ConfigError as exc:  # upstream records nothing then, with a warning
                note = f"{exc}: the queue's experiences are not recorded anywhere (as upstream)"
        return StoragePlan("queue", name, "", buffer.capacity, buffer.max_read_timeout, replay), record, note
    if kind == "sql":
        path = sqlite_file(buffer.path, f"{where}.path") if buffer.path else ""
        return StoragePlan("sqlite", name, path, 0, buffer.max_read_timeout, replay), None, note
    if kind == "file":
        path = str(Path(buffer.path).expanduser().absolute()) if buffer.path else ""
        return StoragePlan("jsonl", name, path, 0, buffer.max_read_timeout, replay), None, note
    known = ("queue", "sql", "file")
    close = ["sql"] if kind in ("sqlite", "sqlite3", "database", "db") else difflib.get_close_matches(kind, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"{where}.storage_type: {buffer.storage_type!r} is not one of queue, sql, file{hint}")


def resolve_dataset(buffer: ExperienceBufferConfig, where: str, schema: Schema, epochs: int) -> DatasetPlan:
    """Return the plan of an SFT/DPO data set read by the trainer; raises ConfigError."""
    if buffer.replay_buffer.enable:
        raise ConfigError(f"{where}.replay_buffer.enable: experience replay applies to the experience buffer "
                          "between explorer and trainer, not to a data set; set it false here")
    if not buffer.path:
        raise ConfigError(f"{where}.path: required: the {schema.upper()} data set (a local folder or file)")
    if buffer.storage_type.strip().lower() != "file":
        raise ConfigError(f"{where}.storage_type: {schema.upper()} data is read from files; set storage_type: file")
    declared = (buffer.schema_type or schema).strip().lower()
    if declared not in ("sft", "dpo"):
        raise ConfigError(f"{where}.schema_type: {buffer.schema_type!r} is not one of sft, dpo")
    selector, seed = _selector(buffer.data_selector, where)
    return DatasetPlan(
        name=buffer.name or schema, where=where, path=buffer.path, split=buffer.split,
        subset_name=buffer.subset_name, format=buffer.format, schema=declared,  # type: ignore[arg-type]
        total_epochs=epochs, selector=selector, seed=seed, enable_progress_bar=buffer.enable_progress_bar,
    )


def with_chat_template(fmt: FormatConfig, template: str | None, enable_thinking: bool | None) -> FormatConfig:
    """Return ``fmt`` with the model's chat template and thinking switch filled where it names none."""
    return dataclasses.replace(
        fmt,
        chat_template=fmt.chat_template if fmt.chat_template is not None else template,
        enable_thinking=fmt.enable_thinking if fmt.enable_thinking is not None else enable_thinking,
    )
