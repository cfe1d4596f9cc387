"""Rollout engines and workflow runners resolved from ``explorer`` and ``model``."""

from __future__ import annotations

import dataclasses
from typing import Any

from trinity.common.config.loader import ConfigError
from trinity.common.config.plan.explorer import ApiPlan, EnginePlan, ExplorerPlan, ExternalPlan
from trinity.common.config.plan.model import ModelPlan
from trinity.common.config.schema import Config, InferenceModelConfig
from trinity.planner.model import DTYPES, resolve_lengths

#: Bounds of the hf engine's rows per generate call when ``max_batch_size`` is left to fit the step.
AUTO_BATCH_ROWS = (32, 256)


def step_batch_rows(step_rows: int, engine_num: int) -> int:
    """Return the hf engine batch that serves a training step's rows in one generate call per engine (bounded)."""
    low, high = AUTO_BATCH_ROWS
    return max(low, min(high, -(-step_rows // max(1, engine_num))))


def _engine(spec: InferenceModelConfig, model: ModelPlan, *, name: str, model_path: str, where: str,
            step_rows: int) -> EnginePlan:
    dtype = DTYPES.get(spec.dtype.strip().lower())
    if dtype is None:
        raise ConfigError(f"{where}.dtype: {spec.dtype!r} is not one of {', '.join(sorted(set(DTYPES)))}")
    engine_type = spec.engine_type.strip().lower()
    if engine_type == "external":  # auxiliary models only: config rules keep the rollout model's to auto/vllm/hf
        external = _external(spec, where)
        return EnginePlan(
            name=name, model_path=model_path or external.model_name, engine_type="external", engine_num=1,
            tensor_parallel_size=1, dtype=dtype, seed=spec.seed, max_model_len=model.max_model_len or 0,
            max_prompt_tokens=0, max_response_tokens=0, gpu_memory_utilization=0.0, enforce_eager=False,
            enable_prefix_caching=False, enable_chunked_prefill=False, max_batch_size=1, chat_template=None,
            external=external,
        )
    if engine_type not in ("auto", "vllm", "hf"):
        raise ConfigError(f"{where}.engine_type: {spec.engine_type!r} is not one of auto, vllm, hf, external")
    if spec.engine_num < 1 or spec.tensor_parallel_size < 1:
        raise ConfigError(f"{where}: engine_num and tensor_parallel_size must be at least 1")
    given = (
        spec.max_model_len if spec.max_model_len is not None else model.max_model_len,
        spec.max_prompt_tokens if spec.max_prompt_tokens is not None else model.max_prompt_tokens,
        spec.max_response_tokens if spec.max_response_tokens is not None else model.max_response_tokens,
    )
    overlong = auxiliary_overlong(given) if name != "rollout" else None
    if overlong is not None:  # upstream checks the sum for the policy only: an engine stops at its context length
        given = (given[0], given[1], overlong)
    length, prompt, response, _ = resolve_lengths(*given, 0)
    return EnginePlan(
        name=name, model_path=model_path, engine_type=engine_type, engine_num=spec.engine_num,
        tensor_parallel_size=spec.tensor_parallel_size, dtype=dtype, seed=spec.seed, max_model_len=length,
        max_prompt_tokens=prompt, max_response_tokens=response,
        gpu_memory_utilization=spec.gpu_memory_utilization, enforce_eager=spec.enforce_eager,
        enable_prefix_caching=spec.enable_prefix_caching, enable_chunked_prefill=spec.enable_chunked_prefill,
        max_batch_size=(
            spec.max_batch_size if spec.max_batch_size is not None else step_batch_rows(step_rows, spec.engine_num)
        ),
        chat_template=spec.chat_template if spec.chat_template is not None else model.chat_template,
        ignore_eos=spec.ignore_eos, trust_remote_code=spec.trust_remote_code or model.trust_remote_code,
        api=_api(spec, where),
    )


def auxiliary_overlong(lengths: tuple[int | None, int | None, int | None]) -> int | None:
    """Return the reply length an auxiliary engine keeps when ``(max_model_len, prompt, response)`` overflow the
    context (``max_model_len - prompt``); None when they fit or are not all set."""
    length, prompt, response = lengths
    if length is None or prompt is None or response is None or prompt + response <= length or prompt >= length:
        return None
    return length - prompt


def _external(spec: InferenceModelConfig, where: str) -> ExternalPlan:
    """Return the endpoint of an external auxiliary model; raises ConfigError when its URL variable is unset."""
    return _endpoint(spec.external_model_config, spec.model_path, f"{where}.external_model_config")


def _endpoint(endpoint: Any, model_path: str | None, where: str) -> ExternalPlan:
    """Return the :class:`ExternalPlan` of an endpoint section (``base_url_env``, ``api_key_env``, ``model_name``)."""
    import os

    if not os.environ.get(endpoint.base_url_env):
        raise ConfigError(f"{where}.base_url_env: the environment variable {endpoint.base_url_env} is not set; set "
                          "it to the endpoint's base URL (https://host/v1)")
    name = endpoint.model_name or model_path
    if not name:
        raise ConfigError(f"{where}.model_name: required (the model's name at the endpoint)")
    return ExternalPlan(base_url_env=endpoint.base_url_env, api_key_env=endpoint.api_key_env, model_name=name)


def _external_rollout(config: Config, model: ModelPlan) -> EnginePlan:
    """Return the rollout group of a run evaluating ``model.external_model`` (mode bench only); raises ConfigError."""
    if config.mode != "bench":
        raise ConfigError(f"model.external_model.enable: an external model can only be evaluated (mode bench, as "
                          f"upstream), not used in mode {config.mode}; set mode: bench or remove external_model")
    spec = config.explorer.rollout_model
    if spec.engine_num < 1:
        raise ConfigError("explorer.rollout_model.engine_num: must be at least 1")
    external = _endpoint(config.model.external_model, config.model.model_path, "model.external_model")
    return EnginePlan(
        name="rollout", model_path=external.model_name, engine_type="external", engine_num=spec.engine_num,
        tensor_parallel_size=1, dtype=model.dtype, seed=spec.seed, max_model_len=model.max_model_len,
        max_prompt_tokens=model.max_prompt_tokens, max_response_tokens=model.max_response_tokens,
        gpu_memory_utilization=0.0, enforce_eager=False, enable_prefix_caching=False, enable_chunked_prefill=False,
        max_batch_size=1, chat_template=None, external=external,
    )


def _api(spec: InferenceModelConfig, where: str) -> ApiPlan | None:
    """Return the API plan of an engine group; raises ConfigError for settings that cannot work together."""
    if not spec.enable_openai_api:
        for key in ("enable_history", "enable_auto_tool_choice", "enable_log_requests", "reasoning_parser"):
            if getattr(spec, key):
                raise ConfigError(f"{where}.{key}: applies to the OpenAI API; set {where}.enable_openai_api: true "
                                  f"as well, or remove {key}")
        return None
    parser = spec.tool_call_parser
    if parser is not None:
        from trinity.common.models.openai_api.tool_calls import TOOL_CALL_PARSERS

        if parser not in TOOL_CALL_PARSERS.names():
            raise ConfigError(f"{where}.tool_call_parser: {parser!r} is not one of "
                              f"{', '.join(TOOL_CALL_PARSERS.names())}")
    reasoning = spec.reasoning_parser
    if reasoning is not None:
        from trinity.common.models.openai_api.reasoning import REASONING_PARSERS

        if reasoning not in REASONING_PARSERS.names():
            raise ConfigError(f"{where}.reasoning_parser: {reasoning!r} is not one of "
                              f"{', '.join(REASONING_PARSERS.names())}")
    if spec.enable_auto_tool_choice and parser is None:
        raise ConfigError(f"{where}.enable_auto_tool_choice: needs {where}.tool_call_parser (e.g. hermes)")
    if not 0 <= spec.api_port <= 65535:
        raise ConfigError(f"{where}.api_port: {spec.api_port} is not a port (0 for a free one)")
    return ApiPlan(host=spec.api_host or None, port=spec.api_port, history=spec.enable_history,
                   auto_tool_choice=spec.enable_auto_tool_choice, tool_call_parser=parser,
                   log_requests=spec.enable_log_requests, reasoning_parser=reasoning)


def resolve_explorer(config: Config, model: ModelPlan) -> ExplorerPlan:
    """Return the :class:`ExplorerPlan` of ``config``; raises ConfigError."""
    explorer = config.explorer
    rollout_spec = explorer.rollout_model
    if config.mode == "serve" and not rollout_spec.enable_openai_api:  # what serve serves (the plan notes it)
        rollout_spec = dataclasses.replace(rollout_spec, enable_openai_api=True)
    if rollout_spec.model_path and rollout_spec.model_path != config.model.model_path:
        raise ConfigError(
            "explorer.rollout_model.model_path: the rollout model always serves model.model_path; remove it"
        )
    step_rows = config.buffer.batch_size * config.algorithm.repeat_times
    if config.model.external_model.enable:
        rollout = _external_rollout(config, model)
    else:
        rollout = _engine(rollout_spec, model, name="rollout", model_path=model.path,
                          where="explorer.rollout_model", step_rows=step_rows)
    auxiliary = []
    names: set[str] = set()
    for index, spec in enumerate(explorer.auxiliary_models):
        where = f"explorer.auxiliary_models[{index}]"
        if not spec.model_path and spec.engine_type.strip().lower() != "external":
            raise ConfigError(f"{where}.model_path: required (the auxiliary model's folder)")
        name = spec.name or f"auxiliary_{index}"
        if name in names:
            raise ConfigError(f"{where}.name: {name!r} is used twice; give each auxiliary model its own name")
        names.add(name)
        served = dataclasses.replace(spec, enable_openai_api=True)  # as upstream: workflows get OpenAI clients
        auxiliary.append(_engine(served, model, name=name, model_path=spec.model_path or "", where=where,
                                 step_rows=step_rows))
    if explorer.max_repeat_times_per_runner is not None and explorer.max_repeat_times_per_runner < 1:
        raise ConfigError("explorer.max_repeat_times_per_runner: must be at least 1 (or unset)")
    over = explorer.over_rollout
    if not 0.0 <= over.ratio < 1.0:
        raise ConfigError(f"explorer.over_rollout.ratio: {over.ratio!r} is outside [0, 1); set a fraction such as 0.25")
    if over.wait_after_min < 0:
        raise ConfigError(
            f"explorer.over_rollout.wait_after_min: {over.wait_after_min!r} is negative; set seconds >= 0"
        )
    if over.ratio > 0 and config.synchronizer.sync_style.strip().lower() == "fixed":
        raise ConfigError(
            f"explorer.over_rollout.ratio: {over.ratio!r} needs a dynamic sync, but synchronizer.sync_style is fixed; "
            "set synchronizer.sync_style to explorer_driven or trainer_driven, or set the ratio to 0"
        )
    if explorer.max_engine_restarts < 0:
        raise ConfigError(
            f"explorer.max_engine_restarts: {explorer.max_engine_restarts!r} is negative; set 0 (a dead engine ends "
            "the run) or more"
        )
    return ExplorerPlan(
        rollout=rollout,
        auxiliary=tuple(auxiliary),
        runners_per_engine=explorer.runner_per_model,
        timeout=float(explorer.max_timeout),
        max_retries=explorer.max_retry_times,
        env_vars={str(k): str(v) for k, v in explorer.env_vars.items()},
        max_repeat_times_per_runner=explorer.max_repeat_times_per_runner,
        eval_interval=explorer.eval_interval,
        eval_on_startup=explorer.eval_on_startup,
        bench_on_latest_checkpoint=explorer.bench_on_latest_checkpoint,
        over_rollout_ratio=float(over.ratio),
        wait_after_min=float(over.wait_after_min),
        max_engine_restarts=explorer.max_engine_restarts,
    )
