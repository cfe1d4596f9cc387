"""``explorer``: rollout engines, workflow runners, evaluation (upstream Trinity-RFT's section)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trinity.common.config.schema.fields import inert, refused, refused_values

_SERVE = "upstream's serve-mode proxy is not built: each engine serves its own API (see <run>/serve.json)"


@dataclass
class ExternalEndpointConfig:
    """Where an ``engine_type: external`` auxiliary model is served (an OpenAI-compatible endpoint; upstream)."""

    #: Environment variable holding the endpoint's base URL (``https://host/v1``).
    base_url_env: str = "OPENAI_BASE_URL"
    #: Environment variable holding the API key (unset: ``EMPTY``).
    api_key_env: str = "OPENAI_API_KEY"
    #: Model name at the endpoint; default the auxiliary model's ``model_path``.
    model_name: str | None = None


@dataclass
class InferenceModelConfig:
    """An inference engine group: the rollout model, or an auxiliary model (judge, teacher)."""

    #: Model folder; the rollout model always serves ``model.model_path``.
    model_path: str | None = None
    #: Name of an auxiliary model (how workflows find it).
    name: str | None = None
    #: Allow the model's own code.
    trust_remote_code: bool = False
    #: ``vllm`` (accelerators), ``hf`` (transformers, any device) or ``auto``: vllm on an accelerator
    #: backend, hf where tensors live on the host CPU (the CPU backend, a CPU-backed vendor device);
    #: ``external`` (auxiliary models only): an OpenAI-compatible endpoint outside the run
    #: (``external_model_config``), reached through ``get_openai_client()``.
    engine_type: str = refused_values("auto", {
        "tinker": "the Tinker service is not supported; use vllm or hf",
    })
    #: The endpoint of an ``engine_type: external`` auxiliary model.
    external_model_config: ExternalEndpointConfig = field(default_factory=ExternalEndpointConfig)
    #: Engines.
    engine_num: int = 1
    #: Devices per engine (tensor parallel size; vllm only).
    tensor_parallel_size: int = 1
    #: vLLM V1 engine (the only one supported).
    use_v1: bool = refused(True, "only vLLM's V1 engine is supported; remove use_v1 or set it true")
    #: vllm: run eagerly (no graphs): slower decoding, faster start, less memory.
    enforce_eager: bool = False
    #: vllm: reuse the KV cache of shared prompt prefixes.
    enable_prefix_caching: bool = True
    #: vllm: chunked prefill.
    enable_chunked_prefill: bool = True
    #: vllm: fraction of each device's memory the engine may take.
    gpu_memory_utilization: float = 0.9
    #: Weights dtype of the engine (the rollout model's is also the trainer's compute dtype); ``auto``: the
    #: device backend's preferred one (bfloat16 on CUDA from compute capability 8.0 and on Ascend, as upstream;
    #: float32 on the CPU).
    dtype: str = "auto"
    #: Sampling seed of the engine.
    seed: int = 42
    #: Context length of the engine; default ``model.max_model_len``.
    max_model_len: int | None = None
    #: Default ``model.max_prompt_tokens``.
    max_prompt_tokens: int | None = None
    #: Default ``model.max_response_tokens``.
    max_response_tokens: int | None = None
    #: Default ``model.min_response_tokens``.
    min_response_tokens: int | None = None
    #: Default ``model.enable_prompt_truncation``.
    enable_prompt_truncation: bool | None = None
    #: Default ``model.repetition_penalty``.
    repetition_penalty: float | None = None
    #: Generate until ``max_tokens`` even after EOS (long-generation tests).
    ignore_eos: bool = False
    #: Chat template of this engine; default ``model.custom_chat_template``.
    chat_template: str | None = None
    #: Passed to chat templates that know it.
    enable_thinking: bool | None = None
    #: Record the OpenAI API requests of each workflow's client, so the workflow can turn them into
    #: experiences (``engine.extract_experience_from_history()``); needs ``enable_openai_api``.
    enable_history: bool = False
    #: Serve an OpenAI-compatible API (``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``) from
    #: each engine; workflows get clients with ``engine.get_openai_client()``.
    enable_openai_api: bool = False
    #: Log each API request (sizes and settings, not the text) at INFO.
    enable_log_requests: bool = False
    #: Let requests use ``tool_choice: auto`` (needs ``tool_call_parser``).
    enable_auto_tool_choice: bool = False
    #: How tool calls are read from replies: ``hermes`` (Hermes / Qwen2.5 ``<tool_call>`` JSON blocks).
    tool_call_parser: str | None = None
    #: How the API splits thinking from answer: ``deepseek_r1`` (before ``</think>``) or ``qwen3``
    #: (``<think>...</think>``); the chat API then answers ``reasoning_content`` beside ``content``.
    reasoning_parser: str | None = None
    #: (trinity-rft) Address the API binds; null (default): the node's Ray address (reachable from other
    #: nodes), ``127.0.0.1``: this node only.
    api_host: str | None = None
    #: (trinity-rft) Port of the first engine's API (engine i takes port + i); 0 (default): a free port each.
    api_port: int = 0
    #: (trinity-rft) hf engine: rows per generate call at most; null (default): a training step's rows per engine
    #: (``buffer.batch_size * algorithm.repeat_times / engine_num``), at least 32 and at most 256.
    max_batch_size: int | None = None


@dataclass
class OverRolloutConfig:
    """Train a step on the groups that finish first instead of waiting for the slowest (upstream)."""

    #: Fraction of a batch's groups the explorer does not wait for, in [0, 1); above 0 it needs a
    #: ``synchronizer.sync_style`` other than ``fixed``.
    ratio: float = 0.0
    #: Seconds to wait for more groups once the minimum is complete.
    wait_after_min: float = 30.0


@dataclass
class DynamicTimeoutConfig:
    """Per-step task timeout from the average task time (upstream)."""

    #: Enable it.
    enable: bool = refused(False, "dynamic timeouts are not supported; use explorer.max_timeout")
    #: Timeout = average task time x ratio.
    ratio: float = 3.0


@dataclass
class ExplorerConfig:
    """Rollout generation and evaluation."""

    #: Name of the explorer (metrics, Ray actor names).
    name: str = "explorer"
    #: Workflow runners per rollout engine (tasks in flight per engine).
    runner_per_model: int = 8
    #: Seconds a task may take before it is retried.
    max_timeout: float = 1800.0
    #: Retries of a failed or timed-out task.
    max_retry_times: int = 2
    #: (trinity-rft) Times in a row a rollout engine whose process died is replaced by a fresh one (loaded
    #: with the current weights) before the run ends; 0: a dead engine ends the run.
    max_engine_restarts: int = 3
    #: Environment variables of the workflow runners.
    env_vars: dict[str, str] = field(default_factory=dict)
    #: How a runner runs the repeats of one task: ``sequential``, ``asynchronous``, ``multi-threading``.
    concurrent_mode: str = "sequential"
    #: Split a task's repeats over runners, at most this many per runner; None: all on one runner.
    max_repeat_times_per_runner: int | None = None
    #: Deprecated: use ``runner_per_model``.
    runner_num: int | None = refused(None, "explorer.runner_num is deprecated; use explorer.runner_per_model")
    #: The rollout model's engines.
    rollout_model: InferenceModelConfig = field(default_factory=InferenceModelConfig)
    #: Other models workflows use (judges, teachers).
    auxiliary_models: list[InferenceModelConfig] = field(default_factory=list)
    #: Evaluate every N steps.
    eval_interval: int = 100
    #: Evaluate before the first step.
    eval_on_startup: bool = True
    #: Mode bench: evaluate only the latest checkpoint.
    bench_on_latest_checkpoint: bool = False
    #: Serve-mode proxy port (upstream).
    proxy_port: int = inert(8010, _SERVE)
    #: Serve-mode listen address (upstream).
    listen_address: str = inert("0.0.0.0", _SERVE)
    #: Mode serve: seconds between looks for newly published weights (upstream's health-check interval).
    service_status_check_interval: int = 60
    #: Serve-mode minimum of running models (upstream).
    min_running_model_num: int = inert(1, _SERVE)
    #: Serve-mode history database (upstream).
    db_url: str | None = inert(None, _SERVE)
    #: Over-rollout.
    over_rollout: OverRolloutConfig = field(default_factory=OverRolloutConfig)
    #: Dynamic timeout.
    dynamic_timeout: DynamicTimeoutConfig = field(default_factory=DynamicTimeoutConfig)
    #: Seconds between runner-state reports; 0 disables them.
    runner_state_report_interval: int = refused(0, "runner-state reports are not supported; set 0")

