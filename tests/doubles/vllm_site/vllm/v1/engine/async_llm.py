"""``AsyncLLM``: the asynchronous V1 engine, as a CPU test double.

Design (see the package README): ``tensor_parallel_size`` worker objects,
each with its own single-thread executor (a worker "process" runs one call
at a time; different workers run concurrently) and its own full model copy.
One "engine core" thread serialises requests and RPC dispatches, as vLLM's
engine-core busy loop does, so weights never change in the middle of a request.
Generation runs on rank 0's model after checking that every rank holds the same weights.

Double-only attributes, for tests: ``engine_args``, ``executor_backend``,
``placement_group_bundles``, ``prefix_cache_resets``, ``double_workers``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any, TypeVar

import torch

from vllm._double_lora import LoadedAdapter, applied, load_adapter
from vllm._double_multimodal import ImageProcessing
from vllm._double_rpc import transport
from vllm._double_sampler import StopConfig, sample_completion
from vllm._double_worker import Worker, WorkerSpec, build_worker_class
from vllm.engine.arg_utils import EngineArgs
from vllm.outputs import RequestOutput
from vllm.sampling_params import SamplingParams
from vllm.v1.engine.exceptions import EngineDeadError

T = TypeVar("T")

_DTYPES = {
    "half": torch.float16,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float": torch.float32,
    "float32": torch.float32,
}
_EXECUTOR_BACKENDS = (None, "mp", "ray", "uni", "external_launcher")
_LOGPROBS_MODES = ("raw_logprobs", "raw_logits", "processed_logprobs", "processed_logits")
_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
_MAX_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length")


def _validate_args(args: EngineArgs) -> None:
    if args.dtype != "auto" and args.dtype not in _DTYPES:
        raise ValueError(f"Unknown dtype: {args.dtype!r} (expected 'auto' or one of {sorted(_DTYPES)})")
    if not isinstance(args.tensor_parallel_size, int) or args.tensor_parallel_size < 1:
        raise ValueError(f"tensor_parallel_size must be at least 1, got {args.tensor_parallel_size}")
    if not 0.0 < args.gpu_memory_utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {args.gpu_memory_utilization}")
    if args.distributed_executor_backend not in _EXECUTOR_BACKENDS:
        raise ValueError(
            f"Unrecognized distributed executor backend {args.distributed_executor_backend!r}; "
            f"supported: {list(_EXECUTOR_BACKENDS)}"
        )
    if args.distributed_executor_backend == "uni" and args.tensor_parallel_size > 1:
        raise ValueError("distributed_executor_backend='uni' runs a single worker; tensor_parallel_size must be 1")
    if args.logprobs_mode not in _LOGPROBS_MODES:
        raise ValueError(f"Invalid logprobs_mode {args.logprobs_mode!r}; expected one of {list(_LOGPROBS_MODES)}")
    if args.max_logprobs < -1:
        raise ValueError(f"max_logprobs must be -1 or non-negative, got {args.max_logprobs}")
    if args.max_model_len is not None and args.max_model_len < 1:
        raise ValueError(f"max_model_len must be at least 1, got {args.max_model_len}")
    if args.enable_lora:
        if args.max_lora_rank not in _LORA_RANKS:
            raise ValueError(f"max_lora_rank ({args.max_lora_rank}) must be one of {_LORA_RANKS}.")
        if args.max_loras < 1:
            raise ValueError(f"max_loras ({args.max_loras}) must be >= 1.")
    if not isinstance(args.worker_extension_cls, str):
        raise ValueError(f"worker_extension_cls must be a str, got {type(args.worker_extension_cls).__qualname__}")
    config_path = os.path.join(str(args.model), "config.json")
    if not os.path.isfile(config_path):
        raise ValueError(
            f"Invalid model {args.model!r}: no config.json at {config_path} (the double loads local model folders only)"
        )


def _is_multimodal(hf_config: Any) -> bool:
    has_tower = getattr(hf_config, "vision_config", None) is not None
    return has_tower and getattr(hf_config, "image_token_id", None) is not None


def _check_ray(tensor_parallel_size: int) -> list[dict[str, float]] | None:
    """The ray backend: ray must be up; a current placement group must have a bundle per rank."""
    import ray
    import ray.util

    if not ray.is_initialized():
        raise RuntimeError("distributed_executor_backend='ray' needs Ray to be initialized (call ray.init() first)")
    group = ray.util.get_current_placement_group()
    if group is None:
        return None
    bundles = [dict(spec) for spec in group.bundle_specs]
    if len(bundles) < tensor_parallel_size:
        raise ValueError(
            f"The placement group has {len(bundles)} bundles, fewer than tensor_parallel_size={tensor_parallel_size}: "
            "each rank needs its own bundle"
        )
    return bundles


class AsyncLLM:
    """The asynchronous engine. Build it with ``AsyncLLM.from_engine_args``."""

    def __init__(self, engine_args: EngineArgs) -> None:
        """Validate ``engine_args``, build the workers (loading the model on each) and the tokenizer."""
        from transformers import AutoConfig

        if not isinstance(engine_args, EngineArgs):
            raise TypeError(f"engine_args must be an EngineArgs, got {type(engine_args).__qualname__}")
        _validate_args(engine_args)
        tp = engine_args.tensor_parallel_size
        hf_config = AutoConfig.from_pretrained(engine_args.model, trust_remote_code=engine_args.trust_remote_code)
        text_config = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
        heads = getattr(text_config, "num_attention_heads", None)
        if heads is not None and heads % tp != 0:
            raise ValueError(
                f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp})."
            )
        self.max_model_len = self._resolve_max_model_len(text_config, engine_args.max_model_len)
        worker_cls = build_worker_class(engine_args.worker_extension_cls)

        backend = engine_args.distributed_executor_backend
        if backend is None:
            backend = "uni" if tp == 1 else "mp"
        #: Double-only: the bundle specs of the current Ray placement group (ray backend), else None.
        self.placement_group_bundles = _check_ray(tp) if backend == "ray" else None
        #: Double-only: the arguments this engine was built from.
        self.engine_args = engine_args
        #: Double-only: the executor backend actually used.
        self.executor_backend: str = backend
        #: Double-only: how many times reset_prefix_cache() ran.
        self.prefix_cache_resets = 0

        spec = WorkerSpec(
            model=str(engine_args.model),
            dtype=self._resolve_dtype(engine_args.dtype, hf_config),
            trust_remote_code=engine_args.trust_remote_code,
            world_size=tp,
        )
        workers: list[Worker] = []
        for rank in range(tp):
            worker = worker_cls(spec, rank, rank)
            worker.init_device()
            worker.load_model()
            workers.append(worker)
        #: Double-only: the worker objects, in rank order.
        self.double_workers: tuple[Worker, ...] = tuple(workers)
        self._worker_threads = [
            concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"vllm-double-worker-{rank}")
            for rank in range(tp)
        ]
        self._core = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="vllm-double-core")

        self.tokenizer: Any = None
        if not engine_args.skip_tokenizer_init:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(
                engine_args.tokenizer or engine_args.model, trust_remote_code=engine_args.trust_remote_code
            )
        #: The image side of a vision-language model (None: the model takes no ``multi_modal_data``).
        self._images = ImageProcessing(str(engine_args.model), hf_config) if _is_multimodal(hf_config) else None
        self._vocab_size = int(getattr(text_config, "vocab_size", 0) or getattr(hf_config, "vocab_size", 0) or 0)
        self._stop_config_eos, self._extra_eos = self._resolve_eos(workers[0])
        self._unseeded = torch.Generator().manual_seed(engine_args.seed if engine_args.seed is not None else 0)
        #: LoRA adapters added (``add_lora``, or by a request naming a new one), by id.
        self._adapters: dict[int, LoadedAdapter] = {}
        self._live_requests: set[str] = set()
        self._live_lock = threading.Lock()
        self._dead = False

    @classmethod
    def from_engine_args(cls, engine_args: EngineArgs) -> AsyncLLM:
        """Build the engine and load the model (``ValueError`` for bad arguments)."""
        return cls(engine_args)

    # ----------------------------------------------------------------- set-up helpers

    @staticmethod
    def _resolve_dtype(dtype: str, hf_config: Any) -> torch.dtype:
        if dtype != "auto":
            return _DTYPES[dtype]
        config_dtype = getattr(hf_config, "dtype", None) or getattr(hf_config, "torch_dtype", None)
        if isinstance(config_dtype, str):
            config_dtype = getattr(torch, config_dtype, None)
        return config_dtype if isinstance(config_dtype, torch.dtype) else torch.float32

    @staticmethod
    def _resolve_max_model_len(hf_config: Any, requested: int | None) -> int:
        derived = next((int(v) for k in _MAX_LENGTH_KEYS if (v := getattr(hf_config, k, None)) is not None), None)
        if requested is None:
            if derived is None:
                raise ValueError("cannot derive max_model_len from the model config; set max_model_len")
            return derived
        if derived is not None and requested > derived:
            raise ValueError(
                f"User-specified max_model_len ({requested}) is greater than the derived max_model_len "
                f"({derived} from the model's config.json)."
            )
        return requested

    def _resolve_eos(self, worker: Worker) -> tuple[int | None, frozenset[int]]:
        model = worker.get_model()
        primary = getattr(self.tokenizer, "eos_token_id", None) if self.tokenizer is not None else None
        if primary is None:
            primary = getattr(model.config, "eos_token_id", None)
            if isinstance(primary, (list, tuple)):
                primary = primary[0] if primary else None
        extra: set[int] = set()
        generation_config = getattr(model, "generation_config", None)
        eos = getattr(generation_config, "eos_token_id", None)
        if eos is not None:
            extra = {eos} if isinstance(eos, int) else set(eos)
        extra.discard(primary)  # type: ignore[arg-type]
        return primary, frozenset(extra)

    # ----------------------------------------------------------------- state

    @property
    def errored(self) -> bool:
        """Whether the engine can no longer serve requests."""
        return self._dead

    @property
    def is_running(self) -> bool:
        """Whether the engine serves requests."""
        return not self._dead

    @property
    def is_stopped(self) -> bool:
        """Whether the engine has stopped."""
        return self._dead

    @property
    def dead_error(self) -> BaseException:
        """The error that requests get once the engine is dead."""
        return EngineDeadError()

    def _ensure_alive(self) -> None:
        if self._dead:
            raise EngineDeadError()

    async def _on_core(self, fn: Callable[..., T], *args: Any) -> T:
        self._ensure_alive()
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(self._core, fn, *args)
        except RuntimeError as exc:  # the executor was shut down meanwhile
            raise EngineDeadError() from exc
        return await future

    # ----------------------------------------------------------------- generation

    async def generate(
        self, prompt: Any, sampling_params: SamplingParams, request_id: str, lora_request: Any = None
    ) -> AsyncGenerator[RequestOutput, None]:
        """Generate completions of ``prompt`` (with ``lora_request``'s adapter); yields the final ``RequestOutput``
        (``finished=True``)."""
        self._ensure_alive()
        if not isinstance(sampling_params, SamplingParams):
            raise TypeError(f"sampling_params must be a SamplingParams, got {type(sampling_params).__qualname__}")
        if lora_request is not None and not self.engine_args.enable_lora:
            raise ValueError(f"Got lora_request {lora_request} but LoRA is not enabled!")
        with self._live_lock:
            if request_id in self._live_requests:
                raise ValueError(f"Request id {request_id} already running.")
            self._live_requests.add(request_id)
        try:
            output = await self._on_core(self._run_request, prompt, sampling_params, request_id, lora_request)
        finally:
            with self._live_lock:
                self._live_requests.discard(request_id)
        yield output

    def _prompt_ids(self, prompt: Any) -> tuple[str | None, list[int]]:
        if isinstance(prompt, dict) and "prompt_token_ids" in prompt:
            ids = prompt["prompt_token_ids"]
            if not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                raise ValueError("prompt_token_ids must be a list of ints")
            return prompt.get("prompt"), list(ids)
        text = prompt.get("prompt") if isinstance(prompt, dict) else prompt
        if not isinstance(text, str):
            raise TypeError(f"prompt must be a str, a TextPrompt or a TokensPrompt, got {type(prompt).__qualname__}")
        if self.tokenizer is None:
            raise ValueError("You cannot pass text prompts when `skip_tokenizer_init` is True")
        return text, list(self.tokenizer(text, add_special_tokens=True).input_ids)

    def _run_request(self, prompt: Any, params: SamplingParams, request_id: str, lora_request: Any = None
                     ) -> RequestOutput:
        self._ensure_alive()
        adapter = self._add_lora(lora_request) if lora_request is not None else None
        asleep = sorted(set().union(*(worker.asleep for worker in self.double_workers)))
        if asleep:  # on a device the request would touch released memory; here it fails plainly
            raise RuntimeError(f"the engine is sleeping ({', '.join(asleep)} released); call wake_up() first")
        prompt_text, ids = self._prompt_ids(prompt)
        if not ids:
            raise ValueError("The decoder prompt cannot be empty")
        images: dict[str, torch.Tensor] | None = None
        data = prompt.get("multi_modal_data") if isinstance(prompt, dict) else None
        if data:
            if self._images is None:
                raise ValueError(f"{self.engine_args.model} is not a multimodal model: it takes no multi_modal_data")
            ids, images = self._images.process(ids, data)
        if self._vocab_size and (max(ids) >= self._vocab_size or min(ids) < 0):
            bad = max(ids) if max(ids) >= self._vocab_size else min(ids)
            raise ValueError(f"Token id {bad} is out of vocabulary")
        if len(ids) > self.max_model_len:
            raise ValueError(
                f"The decoder prompt (length {len(ids)}) is longer than the maximum model length of "
                f"{self.max_model_len}. Make sure that `max_model_len` is no smaller than the number of text tokens."
            )
        if params.logit_bias and self._vocab_size:
            outside = sorted(t for t in params.logit_bias if not 0 <= t < self._vocab_size)
            if outside:
                raise ValueError(f"token_id(s) {outside} in logit_bias contain out-of-vocab token ids. "
                                 f"Vocabulary size: {self._vocab_size}")
        max_logprobs = self.engine_args.max_logprobs
        if params.logprobs is not None and max_logprobs != -1 and params.logprobs > max_logprobs:
            raise ValueError(
                f"Requested sample logprobs of {params.logprobs}, which is greater than max allowed: {max_logprobs}"
            )
        if params.stop and self.tokenizer is None:
            raise ValueError("stop strings are not supported when the tokenizer is not initialized")
        fingerprints = [w.get_model().weights_fingerprint() for w in self.double_workers]
        if len(set(fingerprints)) > 1:
            raise RuntimeError(
                "tensor-parallel workers hold different weights (load the same weights on every rank, e.g. through "
                f"collective_rpc): fingerprints by rank {fingerprints}"
            )
        room = self.max_model_len - len(ids)
        max_new = max(1, min(params.max_tokens, room) if params.max_tokens is not None else room)
        stop_config = StopConfig(self._stop_config_eos, self._extra_eos, max_new)
        model = self.double_workers[0].get_model()
        first_inputs = None
        if images is not None and self._images is not None:
            first_inputs = self._images.forward_inputs(ids, images, self.double_workers[0].spec.dtype)
        with applied(model.hf_model, adapter):
            outputs = self._sample_all(model, ids, params, stop_config, first_inputs)
        self._ensure_alive()
        return RequestOutput(
            request_id=request_id,
            prompt=prompt_text,
            prompt_token_ids=ids,
            prompt_logprobs=None,
            outputs=outputs,
            finished=True,
        )

    def _sample_all(self, model: Any, ids: list[int], params: SamplingParams, stop_config: StopConfig,
                    first_inputs: dict[str, torch.Tensor] | None) -> list[Any]:
        outputs = []
        for index in range(params.n):
            if params.seed is not None:
                generator = torch.Generator().manual_seed(params.seed + index)
            else:
                generator = self._unseeded
            outputs.append(
                sample_completion(
                    model,
                    ids,
                    params,
                    generator=generator,
                    stop_config=stop_config,
                    tokenizer=self.tokenizer,
                    logprobs_mode=self.engine_args.logprobs_mode,
                    index=index,
                    first_inputs=first_inputs,
                )
            )
        return outputs

    # ----------------------------------------------------------------- LoRA

    async def add_lora(self, lora_request: Any) -> bool:
        """Load ``lora_request``'s adapter folder (``ValueError`` for one that does not fit); True when added."""
        self._ensure_alive()
        if not self.engine_args.enable_lora:
            raise ValueError("LoRA is not enabled! Start the engine with enable_lora=True")
        await self._on_core(self._add_lora, lora_request)
        return True

    def _add_lora(self, lora_request: Any) -> LoadedAdapter:
        known = self._adapters.get(lora_request.lora_int_id)
        if known is not None:
            return known
        model = self.double_workers[0].get_model()
        adapter = load_adapter(lora_request.lora_path, model.hf_model, self.engine_args.max_lora_rank)
        self._adapters[lora_request.lora_int_id] = adapter
        return adapter

    async def remove_lora(self, lora_id: int) -> bool:
        """Forget adapter ``lora_id``; False when it was not loaded."""
        self._ensure_alive()
        return await self._on_core(lambda: self._adapters.pop(int(lora_id), None) is not None)

    async def list_loras(self) -> set[int]:
        """The ids of the adapters loaded: a list, as vLLM's engine core sends its set through msgpack."""
        self._ensure_alive()
        return sorted(self._adapters)  # type: ignore[return-value]  # annotated as vLLM annotates it

    # ----------------------------------------------------------------- RPC and control

    async def collective_rpc(
        self, method: str, timeout: float | None = None, args: tuple = (), kwargs: dict[str, Any] | None = None
    ) -> list[Any]:
        """Call ``method`` on every worker concurrently; return the results in rank order.

        Arguments and results must be plain data (see ``vllm._double_rpc``):
        anything else raises ``TypeError``. A worker's exception is re-raised as
        ``RuntimeError`` chained to it (vLLM reports it as an engine-side
        failure, not as the original type). ``timeout`` elapsed: ``TimeoutError``.
        """
        self._ensure_alive()
        if not isinstance(method, str):
            raise TypeError(
                f"method must be the name of a worker method (str), got {type(method).__qualname__}; sending "
                "callables needs VLLM_ALLOW_INSECURE_SERIALIZATION=1"
            )
        sent_args = transport(tuple(args), "collective_rpc args")
        sent_kwargs = transport(dict(kwargs or {}), "collective_rpc kwargs")
        deadline = None if timeout is None else time.monotonic() + timeout
        return await self._on_core(self._dispatch_rpc, method, sent_args, sent_kwargs, deadline)

    def _dispatch_rpc(self, method: str, args: tuple, kwargs: dict[str, Any], deadline: float | None) -> list[Any]:
        self._ensure_alive()
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise TimeoutError(f"RPC call to {method} timed out.")
        futures = [
            pool.submit(self._call_worker, worker, method, transport(args, "args"), transport(kwargs, "kwargs"))
            for worker, pool in zip(self.double_workers, self._worker_threads, strict=True)
        ]
        _, pending = concurrent.futures.wait(futures, timeout=remaining)
        if pending:
            raise TimeoutError(f"RPC call to {method} timed out.")
        for rank, future in enumerate(futures):
            error = future.exception()
            if error is not None:
                raise RuntimeError(
                    f"Worker failed with error '{type(error).__name__}: {error}' (rank {rank}, method {method})"
                ) from error
        return [transport(f.result(), f"result of {method} on rank {rank}") for rank, f in enumerate(futures)]

    @staticmethod
    def _call_worker(worker: Worker, method: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        return getattr(worker, method)(*args, **kwargs)

    # ----------------------------------------------------------------- sleep mode

    async def sleep(self, level: int = 1) -> None:
        """Release the workers' weights (level 1: kept in CPU memory; level 2: forgotten) and KV cache."""
        self._ensure_alive()
        if not self.engine_args.enable_sleep_mode:
            raise ValueError("Sleep mode is not enabled. Enable it with enable_sleep_mode=True.")
        await self.reset_prefix_cache()
        await self._on_core(self._dispatch_rpc, "sleep", (level,), {}, None)

    async def wake_up(self, tags: list[str] | None = None) -> None:
        """Take back the memory of ``tags`` (``weights``, ``kv_cache``; default both)."""
        self._ensure_alive()
        await self._on_core(self._dispatch_rpc, "wake_up", (tags,), {}, None)

    async def is_sleeping(self) -> bool:
        """Whether any tag's memory is released."""
        return any(worker.asleep for worker in self.double_workers)

    async def reset_prefix_cache(self) -> bool:
        """Drop cached prefixes (the double has none; counts the calls in ``prefix_cache_resets``)."""
        return await self._on_core(self._reset_prefix_cache)

    def _reset_prefix_cache(self) -> bool:
        self.prefix_cache_resets += 1
        return True

    def shutdown(self) -> None:
        """Stop the engine (idempotent): later requests and RPCs raise ``EngineDeadError``."""
        if self._dead:
            return
        self._dead = True
        self._core.shutdown(wait=False)
        for pool in self._worker_threads:
            pool.shutdown(wait=False)
        for worker in self.double_workers:
            worker.shutdown()
