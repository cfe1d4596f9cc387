"""Rollout engines, workflow runners and evaluation as a run plan holds them."""

from __future__ import annotations

from dataclasses import dataclass, field

from trinity.common.config.plan.trainer import LoraPlan


@dataclass(frozen=True)
class EnginePlan:
    """One group of inference engines (the rollout model, or an auxiliary model)."""

    #: Name (``rollout`` for the policy; an auxiliary model's ``name``).
    name: str
    #: Model folder it serves.
    model_path: str
    #: ``auto`` (decided with the device backend), ``vllm`` or ``hf``.
    engine_type: str
    #: Engines.
    engine_num: int
    #: Devices per engine.
    tensor_parallel_size: int
    #: Weights dtype.
    dtype: str
    #: Sampling seed.
    seed: int
    #: Context length.
    max_model_len: int
    #: Prompt tokens at most.
    max_prompt_tokens: int
    #: New tokens at most.
    max_response_tokens: int
    #: vllm memory share.
    gpu_memory_utilization: float
    #: vllm eager mode.
    enforce_eager: bool
    #: vllm prefix caching.
    enable_prefix_caching: bool
    #: vllm chunked prefill.
    enable_chunked_prefill: bool
    #: hf rows per generate call.
    max_batch_size: int
    #: Chat template text, or None for the tokenizer's.
    chat_template: str | None
    #: Generate until ``max_tokens`` even after EOS.
    ignore_eos: bool = False
    #: ``transformers`` ``trust_remote_code``.
    trust_remote_code: bool = False
    #: The OpenAI-compatible API each engine serves; None: none.
    api: ApiPlan | None = None
    #: ``engine_type: external``: the endpoint (no engine is started); None otherwise.
    external: ExternalPlan | None = None
    #: vLLM's sleep mode: the engine releases its device memory while the trainer steps (mode colocate).
    sleep_mode: bool = False
    #: The policy's LoRA adapter (rollout engines of a LoRA run): a ``vllm`` engine serves it from a LoRA slot
    #: and syncs take the adapter alone; None: no adapter.
    lora: LoraPlan | None = None

    @property
    def devices(self) -> int:
        """Devices this group takes: ``engine_num * tensor_parallel_size`` (none for an external endpoint)."""
        return 0 if self.external is not None else self.engine_num * self.tensor_parallel_size


@dataclass(frozen=True)
class ExternalPlan:
    """An OpenAI-compatible endpoint outside the run (its URL and key are read from the environment when used)."""

    #: Environment variable holding the base URL.
    base_url_env: str
    #: Environment variable holding the API key.
    api_key_env: str
    #: Model name at the endpoint.
    model_name: str


@dataclass(frozen=True)
class ApiPlan:
    """The OpenAI-compatible API of an engine group."""

    #: Address to bind; None: the node's Ray address.
    host: str | None
    #: First engine's port; 0: a free port each.
    port: int
    #: Record each workflow client's requests.
    history: bool
    #: ``tool_choice: auto`` allowed.
    auto_tool_choice: bool
    #: Tool-call parser name, or None.
    tool_call_parser: str | None
    #: Log each request.
    log_requests: bool
    #: Reasoning parser name (``reasoning_content`` split off ``content``), or None.
    reasoning_parser: str | None = None


@dataclass(frozen=True)
class ExplorerPlan:
    """Engines, runners and evaluation."""

    #: The policy's engines.
    rollout: EnginePlan
    #: Other models workflows may call.
    auxiliary: tuple[EnginePlan, ...]
    #: Workflow runners per rollout engine.
    runners_per_engine: int
    #: Seconds per task attempt.
    timeout: float
    #: Retries of a failed task.
    max_retries: int
    #: Environment of the workflow runners.
    env_vars: dict[str, str] = field(default_factory=dict)
    #: Repeats of one task per runner at most (None: all on one).
    max_repeat_times_per_runner: int | None = None
    #: Evaluate every N steps (0: never in between).
    eval_interval: int = 100
    #: Evaluate before the first step.
    eval_on_startup: bool = True
    #: Mode bench: the latest checkpoint only.
    bench_on_latest_checkpoint: bool = False
    #: Fraction of a training step's groups the scheduler does not wait for (over-rollout), in [0, 1).
    over_rollout_ratio: float = 0.0
    #: Seconds the scheduler still waits for groups once the minimum is complete.
    wait_after_min: float = 30.0
    #: Times in a row a dead rollout engine is replaced before the run ends (0: never).
    max_engine_restarts: int = 3
