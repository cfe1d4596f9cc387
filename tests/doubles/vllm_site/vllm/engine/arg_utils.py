"""Engine arguments: plain dataclasses, so an unknown keyword raises ``TypeError`` as in vLLM.

As in vLLM, building the dataclass checks nothing; the values are validated
when the engine is built (``AsyncLLM.from_engine_args``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EngineArgs:
    """Arguments of a vLLM engine (the subset trinity uses, with vLLM's defaults)."""

    model: str = "facebook/opt-125m"
    tokenizer: str | None = None
    skip_tokenizer_init: bool = False
    trust_remote_code: bool = False
    dtype: str = "auto"
    seed: int | None = 0
    max_model_len: int | None = None
    distributed_executor_backend: str | None = None
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool | None = None
    enforce_eager: bool = False
    max_logprobs: int = 20
    logprobs_mode: str = "raw_logprobs"
    worker_extension_cls: str = ""
    disable_log_stats: bool = False
    enable_sleep_mode: bool = False
    enable_lora: bool = False
    max_lora_rank: int = 16
    max_loras: int = 1


@dataclass
class AsyncEngineArgs(EngineArgs):
    """Arguments of the asynchronous engine (``AsyncLLM``)."""

    enable_log_requests: bool = False
