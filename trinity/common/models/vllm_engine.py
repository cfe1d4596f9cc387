"""The ``vllm`` inference engine: vLLM's asynchronous engine behind the same contract as the ``hf`` engine.

:class:`VLLMEngine` implements :class:`~trinity.common.models.engine.InferenceEngine`;
workflows and the synchronizer cannot tell it from the ``hf`` engine. vLLM is
imported only when an engine is built (``explorer.rollout_model.engine_type: vllm``), never
by ``import trinity``.

* **Devices.** On CUDA vLLM drives the GPUs; on Ascend the vllm-ascend
  platform plugin (installed beside vLLM) does, and nothing here changes.
  The engine class sets ``manages_devices``: its Ray actor is started with
  ``RAY_EXPERIMENTAL_NOSET_<visible-devices variable>`` (from the device
  backend), and before vLLM starts the engine writes the visible-devices
  variable itself from its device assignment
  (:func:`trinity.device.assign_devices`). With ``tensor_parallel_size`` 1
  that is the device Ray assigned (ascending on NPU) or, for a resource key
  Ray assigns no ids for, the one trainer claimed on the node. With a larger
  tensor-parallel size on a key Ray assigns ids for, the actor holds no
  device: vLLM's Ray executor starts one worker per bundle of the engine's
  placement group and Ray masks each. On any other key the engine claims its
  ``tensor_parallel_size`` devices on its node (its group is packed on one),
  masks them and runs vLLM's workers as its own processes (executor ``mp``),
  which inherit the mask.
* **Sampling.** Prompts are tokenized here (the same tokenizer and chat
  template as the ``hf`` engine, left-truncated to ``max_prompt_tokens``)
  and sent as token ids. ``Completion.logprobs`` are vLLM's
  ``processed_logprobs``: ``log_softmax(logits / T)`` of each sampled token,
  what the trainer recomputes. With top-k/top-p filtering active vLLM's
  processed log-probs are those of the *filtered* distribution, so there
  ``logprobs`` and ``info["sampling_logprobs"]`` are both the filtered ones
  (the ``hf`` engine keeps the unfiltered policy log-prob in ``logprobs``).
  A vision-language model's image markers and placeholders are never
  sampled (``logit_bias``), so its log-probs are likewise those of the
  distribution without them. Requests are batched continuously by vLLM.
* **Images.** A conversation with image parts goes to vLLM as token ids
  with one placeholder per image plus the images (``multi_modal_data``);
  vLLM expands the placeholders and runs its vision tower. Each completion
  carries the expanded prompt and the images' inputs as the trainer takes
  them (:mod:`trinity.common.models.vision`).
* **LoRA.** In a LoRA run the engine serves the policy's adapter from one of
  vLLM's LoRA slots, and syncs send the adapter alone (:meth:`VLLMEngine.load_adapter`).
* **Weights.** :class:`~trinity.common.models.vllm_worker.WeightSyncExtension`
  is mixed into every vLLM worker: each tensor-parallel rank joins the
  trainer's weight-sync group on the backend's collective (so an engine
  brings ``tensor_parallel_size`` ranks, :meth:`weight_sync_ranks`), receives
  the bucketed broadcast and loads it through the model's ``load_weights``.
  Checkpoint and memory sync load through the same path. A weight update
  waits for running requests, blocks new ones until it is done, and resets
  the prefix cache, so every completion is produced by one weight version.
* **Checksums** (``synchronizer.verify_checksums``): vLLM keeps weights
  sharded and fused, so the engine reports the checksum of the last complete
  weight set it loaded (or of the model folder's safetensors at start),
  computed on rank 0 as it loads.

The sync methods (everything in the contract) may be called from many threads
at once (a Ray actor with ``max_concurrency``); they run vLLM's coroutines on
one event loop in a background thread.

Where vLLM is not installed, the tests drive this engine through a double of
vLLM's documented interfaces (``tests/doubles/vllm_site``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import torch

from trinity import device
from trinity.common.models.engine import Completion, SamplingParams
from trinity.common.models.openai_api.serving import ServesOpenAI
from trinity.common.models.prompting import TextPrompts
from trinity.common.models.vllm_worker import (
    WeightSyncExtension,
    clean_name,
    metas_to_rows,
    pack_state_dict,
    safetensors_files,
    unwrap_replies,
)
from trinity.device.assignment import SOURCE_CLAIMED
from trinity.weight_transport.protocol import TensorMeta, WeightSyncGroupInfo

logger = logging.getLogger(__name__)

T = TypeVar("T")

_DTYPES = ("float32", "bfloat16", "float16", "auto")
#: Seconds a weight load or a group operation may take when no sync timeout is given.
_DEFAULT_RPC_TIMEOUT_S = 600.0


class VLLMEngineError(RuntimeError):
    """The vLLM engine cannot do what it was asked (bad settings, no weight-sync group, engine stopped, ...)."""


def extension_qualname() -> str:
    """Return the ``worker_extension_cls`` string vLLM imports in its workers."""
    return f"{WeightSyncExtension.__module__}.{WeightSyncExtension.__qualname__}"


#: The logit bias that keeps a token from being sampled (the OpenAI API's floor, which vLLM also takes).
NEVER_SAMPLED = -100.0


def to_vllm_sampling(params: SamplingParams, never: Sequence[int] = ()) -> Any:
    """Return vLLM's ``SamplingParams`` for ours: one final output per request, the sampled token's log-prob.

    ``never``: token ids kept from being sampled (``logit_bias``).
    """
    from vllm import SamplingParams as VllmSamplingParams
    from vllm.sampling_params import RequestOutputKind

    extra = {"logit_bias": {int(t): NEVER_SAMPLED for t in never}} if never else {}
    return VllmSamplingParams(
        n=params.n,
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k if params.top_k > 0 else -1,  # -1 disables top-k in every vLLM release
        max_tokens=params.max_tokens,
        stop=list(params.stop) or None,
        seed=params.seed,
        logprobs=0,
        output_kind=RequestOutputKind.FINAL_ONLY,
        **extra,
    )


@dataclasses.dataclass(frozen=True)
class _Prompt:
    """One prompt for vLLM: its ids (one placeholder per image), its images, and what the trainer will take."""

    ids: list[int]
    #: The images (PIL), given to vLLM as ``multi_modal_data``.
    images: Sequence[Any] = ()
    #: The images' inputs as the trainer takes them (``pixel_values``, ``image_grid_thw``); None: no image.
    inputs: dict[str, torch.Tensor] | None = None
    #: ``ids`` with each placeholder repeated per merged patch (what vLLM must return as the prompt).
    expanded: list[int] = dataclasses.field(default_factory=list)


class _Gate:
    """Lets requests run together, and a weight update run alone (between requests), on one event loop."""

    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self._running = 0
        self._updating = False

    async def enter_request(self) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._updating)
            self._running += 1

    async def leave_request(self) -> None:
        async with self._cond:
            self._running -= 1
            self._cond.notify_all()

    async def exclusive(self, action: Callable[[], Awaitable[T]]) -> T:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._updating)
            self._updating = True  # new requests wait from here on
            await self._cond.wait_for(lambda: self._running == 0)
        try:
            return await action()
        finally:
            async with self._cond:
                self._updating = False
                self._cond.notify_all()


#: What to do when vLLM is missing (one line).
INSTALL_HINT = (
    "explorer.rollout_model.engine_type: vllm, but vLLM is not installed in this Python; install it "
    "(CUDA: pip install 'trinity-rft[vllm]'; Ascend: vllm-ascend, see docs/vllm.md) or use engine_type: hf"
)


class VLLMEngine(TextPrompts, ServesOpenAI):
    """A vLLM-based rollout engine; see the module docstring."""

    #: The engine sets its devices' visibility itself (see :func:`~trinity.common.models.engines.engine_actor_options`).
    manages_devices = True

    @staticmethod
    def missing_requirement() -> str | None:
        """Return the install hint when vLLM cannot be imported in this Python, else None (imports nothing)."""
        import importlib.util

        return INSTALL_HINT if importlib.util.find_spec("vllm") is None else None

    def __init__(
        self,
        model_path: str,
        *,
        tokenizer_path: str = "",
        dtype: str = "auto",
        max_prompt_tokens: int = 256,
        tensor_parallel_size: int = 1,
        memory_utilization: float = 0.9,
        enforce_eager: bool = False,
        enable_prefix_caching: bool = True,
        max_model_len: int = 0,
        seed: int = 0,
        version: int = 0,
        trust_remote_code: bool = False,
        chat_template: str | None = None,
        track_checksum: bool = False,
        executor_backend: str | None = None,
        openai_api: Mapping[str, Any] | None = None,
        sleep_mode: bool = False,
        lora: Mapping[str, Any] | None = None,
    ) -> None:
        """Start vLLM on ``model_path``; raises VLLMEngineError for bad settings, vLLM's own errors otherwise.

        ``executor_backend`` is vLLM's ``distributed_executor_backend``; None
        picks ``ray`` for a tensor-parallel engine inside a Ray actor, vLLM's
        default (``mp``/``uni``) otherwise. ``dtype`` ``auto`` is the device
        backend's preferred dtype (not vLLM's ``auto``, which follows the model
        folder), so the engine holds what the trainer computes in; vLLM picks
        its attention backend itself. ``sleep_mode`` (mode colocate): vLLM's
        sleep mode is on, so :meth:`sleep` can hand the device to the trainer.
        ``lora`` (``{"rank": r, "path": folder or None}``, a LoRA run's policy):
        vLLM serves the adapter from a LoRA slot (starting from ``path``, else
        the base model, which a fresh adapter equals) and weight syncs send
        the adapter alone (:meth:`load_adapter`).
        """
        if dtype not in _DTYPES:
            raise VLLMEngineError(f"unknown dtype {dtype!r}; use one of {', '.join(_DTYPES)}")
        try:
            dtype = device.resolve_dtype(dtype)
        except device.UnsupportedDtypeError as exc:
            raise VLLMEngineError(str(exc)) from None
        if max_prompt_tokens < 1 or tensor_parallel_size < 1:
            raise VLLMEngineError(
                f"max_prompt_tokens and tensor_parallel_size must be at least 1, "
                f"got {max_prompt_tokens}, {tensor_parallel_size}"
            )
        problem = self.missing_requirement()
        if problem is not None:
            raise VLLMEngineError(problem)
        #: The devices of this engine on its node; masked here, before vLLM starts its device runtime.
        self.devices = device.assign_devices(tensor_parallel_size, make_current=False)
        from transformers import AutoTokenizer

        self.model_path = str(model_path)
        self.tokenizer_path = str(tokenizer_path or model_path)
        self.dtype = dtype
        self.max_prompt_tokens = max_prompt_tokens
        self.tensor_parallel_size = tensor_parallel_size
        self.track_checksum = track_checksum
        self.tokenizer: Any = AutoTokenizer.from_pretrained(self.tokenizer_path, trust_remote_code=trust_remote_code)
        self.chat_template = chat_template
        from trinity.common.models.vision import VisionInputs, folder_is_vision_language

        if folder_is_vision_language(self.model_path):
            self.vision = VisionInputs(self.model_path, tokenizer=self.tokenizer)
        self._version = int(version)
        self.sleep_mode = bool(sleep_mode)
        #: Whether vLLM's weights and KV cache are released (sleep mode); the next use wakes them.
        self._asleep = False
        self._loaded_since_start = False
        self._requests = itertools.count()
        self._closed = False
        #: LoRA slots: the adapter's rank (0: none), the request serving the adapter loaded last, its checksum.
        self.lora_rank = int(lora["rank"]) if lora else 0
        self._lora_request: Any = None
        self._lora_checksum: str | None = None
        self._lora_ids = itertools.count(1)
        self._lora_dir = tempfile.mkdtemp(prefix="trinity-lora-") if lora else None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="trinity-vllm-loop", daemon=True)
        self._thread.start()
        self.executor_backend = executor_backend if executor_backend is not None else _default_executor(
            tensor_parallel_size, claimed=self.devices.source == SOURCE_CLAIMED
        )
        #: The arguments vLLM was started with (``AsyncEngineArgs``).
        self.engine_args = args = self._engine_args(
            memory_utilization=memory_utilization, enforce_eager=enforce_eager,
            enable_prefix_caching=enable_prefix_caching, max_model_len=max_model_len, seed=seed,
            trust_remote_code=trust_remote_code,
        )
        try:
            with _environment(cpu_thread_binding(tensor_parallel_size)):  # what vLLM's processes inherit
                self._gate, self.engine = self._run(self._start(args))
            self._run(self.engine.collective_rpc("trinity_configure", args=(bool(track_checksum),)))
        except BaseException:
            self._stop_loop()
            raise
        if lora and lora.get("path"):
            self._load_adapter_folder(str(lora["path"]), self._version)
        logger.info("vLLM engine on %s: tp %d, executor %s%s", self.model_path, tensor_parallel_size,
                    self.executor_backend or "default", f", LoRA slot of rank {self.lora_rank}" if lora else "")
        if openai_api is not None:
            self.start_openai_api(openai_api)  # the same server as the hf engine's, over generate_tokens

    @staticmethod
    def plan_kwargs(engine: Any, *, seed: int = 0, verify_checksums: bool = False) -> dict[str, Any]:
        """Return the constructor keyword arguments for an engine group's plan (``EnginePlan``)."""
        return {
            "model_path": engine.model_path,
            "dtype": engine.dtype,
            "max_prompt_tokens": engine.max_prompt_tokens,
            "tensor_parallel_size": engine.tensor_parallel_size,
            "memory_utilization": engine.gpu_memory_utilization,
            "enforce_eager": engine.enforce_eager,
            "enable_prefix_caching": engine.enable_prefix_caching,
            "max_model_len": engine.max_model_len,
            "seed": seed,
            "track_checksum": verify_checksums,
            "trust_remote_code": engine.trust_remote_code,
            "chat_template": engine.chat_template,
            "sleep_mode": bool(getattr(engine, "sleep_mode", False)),
            "lora": ({"rank": engine.lora.rank, "path": engine.lora.adapter_path}
                     if getattr(engine, "lora", None) is not None else None),
        }

    def _engine_args(self, **settings: Any) -> Any:
        from vllm import AsyncEngineArgs

        return AsyncEngineArgs(
            model=self.model_path,
            tokenizer=self.tokenizer_path,
            dtype=self.dtype,
            seed=settings["seed"],
            tensor_parallel_size=self.tensor_parallel_size,
            gpu_memory_utilization=settings["memory_utilization"],
            enforce_eager=settings["enforce_eager"],
            enable_prefix_caching=settings["enable_prefix_caching"],
            max_model_len=settings["max_model_len"] or None,
            trust_remote_code=settings["trust_remote_code"],
            distributed_executor_backend=self.executor_backend,
            worker_extension_cls=extension_qualname(),
            logprobs_mode="processed_logprobs",
            **({"enable_sleep_mode": True} if self.sleep_mode else {}),
            **({"enable_lora": True, "max_lora_rank": lora_slot_rank(self.lora_rank), "max_loras": 1}
               if self.lora_rank else {}),
        )

    @staticmethod
    async def _start(args: Any) -> tuple[_Gate, Any]:
        from vllm.v1.engine.async_llm import AsyncLLM

        return _Gate(), AsyncLLM.from_engine_args(args)

    # ------------------------------------------------------------------ plumbing

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._closed:
            coro.close()
            raise VLLMEngineError("the vLLM engine was shut down")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _rpc(self, method: str, *args: Any, timeout: float | None = None) -> list[Any]:
        return self._run(self.engine.collective_rpc(method, timeout=timeout, args=args))

    @staticmethod
    def _checked(answers: Sequence[Any]) -> list[Any]:
        """The values of the workers' answers (:func:`~trinity.common.models.vllm_worker.replies`), else the error."""
        try:
            return unwrap_replies(answers)
        except RuntimeError as exc:
            raise VLLMEngineError(str(exc)) from None

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    # ------------------------------------------------------------------ sampling

    def generate_tokens(self, prompts: Sequence[Sequence[int]], params: SamplingParams, *,
                        images: Sequence[dict[str, Any] | None] | None = None) -> list[list[Completion]]:
        """Sample ``params.n`` completions for each prompt given as token ids (multi-turn rollouts use this).

        vLLM takes images as images, not as processed tensors: prompts with
        images come through :meth:`chat` (VLLMEngineError here says so).
        """
        if images is not None and any(item is not None for item in images):
            raise VLLMEngineError("the vllm engine takes images through chat() (messages with image parts): vLLM "
                                  "processes the images itself, not their pixel tensors")
        _check_sampling(params)
        rows = [[int(t) for t in p][-self.max_prompt_tokens :] for p in prompts]
        for i, row in enumerate(rows):
            if not row:
                raise VLLMEngineError(f"prompt {i} is empty; give at least one token")
        if not rows:
            return []
        return self._run(self._generate_all(rows, params))

    def chat_with_images(
        self, conversations: Sequence[Sequence[Mapping[str, Any]]], params: SamplingParams
    ) -> list[list[Completion]]:
        """:meth:`chat` of conversations with images: vLLM gets each prompt with one placeholder per image and the
        images (``multi_modal_data``), and expands the placeholders itself.

        Each completion keeps the prompt as vLLM expanded it and the images'
        inputs as the trainer takes them; the two must agree (one placeholder
        per merged patch), else VLLMEngineError. A prompt with images is
        never cut: one over ``max_prompt_tokens`` is refused.
        """
        _check_sampling(params)
        prompts = []
        for i, conversation in enumerate(conversations):
            ids, items = self.vision.prompt(conversation, chat_template=self.chat_template)
            inputs = self.vision.images(items) if items else None
            expanded = self.vision.expand(ids, inputs["image_grid_thw"]) if inputs is not None else ids
            if inputs is not None and len(expanded) > self.max_prompt_tokens:
                raise VLLMEngineError(
                    f"prompt {i} has {len(expanded)} tokens with its images, more than this engine's "
                    f"{self.max_prompt_tokens} prompt tokens (model.max_prompt_tokens); a prompt with images cannot "
                    "be cut: raise the limit or use smaller images")
            prompts.append(_Prompt(ids if inputs is not None else expanded[-self.max_prompt_tokens:], items, inputs,
                                   expanded))
        return self._run(self._generate_all(prompts, params))

    async def _generate_all(self, rows: Sequence[list[int] | _Prompt], params: SamplingParams
                            ) -> list[list[Completion]]:
        prompts = [row if isinstance(row, _Prompt) else _Prompt(row) for row in rows]
        greedy = params.temperature <= 0
        # vLLM refuses n > 1 with greedy sampling; greedy completions of one prompt are identical anyway
        # a reply with an image placeholder would claim an image nobody gave: the trainer could not run it
        never = self.vision.special_ids if self.vision is not None else ()
        sampling = to_vllm_sampling(dataclasses.replace(params, n=1) if greedy else params, never)
        if self._asleep:
            await self._gate.exclusive(self._wake)
        await self._gate.enter_request()
        try:
            version = self._version
            outputs = await asyncio.gather(*(self._generate_one(prompt, sampling) for prompt in prompts))
        finally:
            await self._gate.leave_request()
        filtered = params.top_k > 0 or params.top_p < 1.0 or bool(never)
        result = []
        for prompt, final in zip(prompts, outputs, strict=True):
            row = prompt.ids
            if prompt.inputs is not None:
                row = [int(t) for t in final.prompt_token_ids]
                if row != prompt.expanded:
                    raise VLLMEngineError(
                        f"vLLM expanded the image placeholders of a prompt to {len(row)} tokens, the image "
                        f"processor to {len(prompt.expanded)}: the trainer's image inputs would not match; "
                        "check the model folder's preprocessor_config.json")
            ordered = sorted(final.outputs, key=lambda o: o.index)
            if greedy:
                ordered = ordered[:1] * params.n
            result.append([self._completion(row, out, version, filtered, prompt.inputs) for out in ordered])
        return result

    async def _generate_one(self, prompt: _Prompt, sampling: Any) -> Any:
        from vllm.inputs import TokensPrompt

        request_id = f"trinity-{os.getpid()}-{next(self._requests)}"
        request = TokensPrompt(prompt_token_ids=prompt.ids)
        if prompt.images:
            request["multi_modal_data"] = {"image": list(prompt.images)}
        final = None
        adapter = {"lora_request": self._lora_request} if self._lora_request is not None else {}
        async for output in self.engine.generate(request, sampling, request_id, **adapter):
            final = output
        if final is None or not final.finished:
            raise VLLMEngineError(f"vLLM returned no finished output for request {request_id}")
        return final

    @staticmethod
    def _completion(row: list[int], out: Any, version: int, filtered: bool,
                    images: dict[str, torch.Tensor] | None = None) -> Completion:
        tokens = [int(t) for t in out.token_ids]
        steps = out.logprobs or []
        if len(steps) != len(tokens):
            raise VLLMEngineError(f"vLLM returned {len(steps)} log-probs for {len(tokens)} tokens")
        logprobs = torch.tensor([float(step[tok].logprob) for tok, step in zip(tokens, steps, strict=True)],
                                dtype=torch.float32)
        info: dict[str, Any] = {}
        if filtered:
            info["sampling_logprobs"] = logprobs.clone()
        return Completion(
            prompt_tokens=torch.tensor(row, dtype=torch.long),
            response_tokens=torch.tensor(tokens, dtype=torch.long),
            logprobs=logprobs,
            text=str(out.text),
            finish_reason="length" if out.finish_reason == "length" else "stop",
            model_version=version,
            info=info,
            multi_modal_inputs=images,
        )

    # ------------------------------------------------------------------ weights

    def model_version(self) -> int:
        """Return the version of the weights currently loaded."""
        return self._version

    def describe(self) -> dict[str, Any]:
        """Return what this engine serves: paths, dtype, tensor-parallel size, executor, version."""
        import vllm

        return {
            "engine": "vllm",
            "vllm": str(getattr(vllm, "__version__", "?")),
            "model_path": self.model_path,
            "tokenizer_path": self.tokenizer_path,
            "dtype": self.dtype,
            "tensor_parallel_size": self.tensor_parallel_size,
            "executor": self.executor_backend or "default",
            "device_type": device.get_device_type(),
            "version": self._version,
            "max_prompt_tokens": self.max_prompt_tokens,
            "openai_api": self.openai_api(),
        }

    def device_assignments(self) -> list[dict[str, Any]]:
        """Return the device assignment of each vLLM worker (rank order), as each worker reports it."""
        engine = self.devices.as_record()
        out = []
        for report in self._rpc("trinity_device_report"):
            local, mask = int(report["local_rank"]), report["visible_devices"]
            if len(self.devices.devices) == self.tensor_parallel_size:  # one mask for all workers: the engine's
                devices = [self.devices.devices[local]]
            else:  # each worker masked by Ray to its own device(s)
                devices = [int(i) for i in mask.split(",")] if mask and mask.replace(",", "").isdigit() else []
            out.append({**engine, "worker": int(report["rank"]), "devices": devices, "local_index": local,
                        "visible_devices": mask, "device": report["device"]})
        return out

    def weight_sync_ranks(self) -> int:
        """Return the tensor-parallel size: every vLLM worker joins the weight-sync group."""
        return self.tensor_parallel_size

    def init_weight_sync(self, info: WeightSyncGroupInfo, first_rank: int) -> None:
        """Make worker ``r`` of this engine join the trainer's weight-sync group as rank ``first_rank + r``."""
        self._checked(self._rpc("trinity_init_weight_sync", dataclasses.asdict(info), int(first_rank),
                                timeout=info.timeout_s))

    def receive_weights(self, metas: Sequence[TensorMeta], version: int, bucket_bytes: int) -> None:
        """Receive the trainer's broadcast of ``metas`` in every worker, load it, reset the prefix cache."""
        rows = metas_to_rows(metas)
        self._update(lambda: self.engine.collective_rpc("trinity_receive_weights", args=(rows, int(bucket_bytes))),
                     version)

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Load ``state_dict`` (a subset is fine) into every worker and set the version."""
        complete = self._is_complete(state_dict)
        packed = pack_state_dict(state_dict)
        self._update(lambda: self.engine.collective_rpc("trinity_load_state_dict", args=(packed, complete)), version)

    def load_checkpoint_weights(self, folder: str, version: int) -> None:
        """Load every ``*.safetensors`` file of ``folder`` (resolved once: one weight set) and set the version."""
        files = safetensors_files(folder)
        if not files:
            raise VLLMEngineError(f"{folder}: no *.safetensors file to load weights from")
        self._update(lambda: self.engine.collective_rpc("trinity_load_checkpoint", args=(files,)), version)

    def takes_adapters(self) -> bool:
        """Whether this engine serves a LoRA adapter from a slot: syncs then send the adapter alone."""
        return self.lora_rank > 0

    def load_adapter(self, payload: Mapping[str, Any], version: int) -> None:
        """Serve the adapter of ``payload`` (``{"config": adapter_config, "tensors": {PEFT name: tensor}}``) from
        now on, as ``version``: written as a PEFT folder, added to vLLM's LoRA slot, the previous one removed."""
        if not self.lora_rank:
            raise VLLMEngineError("this vLLM engine has no LoRA slot (it was started without the run's LoRA plan)")
        from trinity.common.models.adapter_files import write_adapter_files
        from trinity.common.models.checksum import state_dict_checksum

        assert self._lora_dir is not None
        tensors = {str(k): v.detach().cpu() for k, v in payload["tensors"].items()}
        folder = os.path.join(self._lora_dir, f"v{int(version)}-{next(self._lora_ids)}")
        staging = folder + ".partial"
        write_adapter_files(staging, payload["config"], tensors)
        os.replace(staging, folder)
        self._swap_adapter(folder, version, state_dict_checksum(tensors))

    def _load_adapter_folder(self, folder: str, version: int) -> None:
        from trinity.common.models.adapter_files import read_adapter_tensors
        from trinity.common.models.checksum import state_dict_checksum

        self._swap_adapter(folder, version, state_dict_checksum(read_adapter_tensors(folder)))

    def _swap_adapter(self, folder: str, version: int, checksum: str) -> None:
        from vllm.lora.request import LoRARequest

        request = LoRARequest(lora_name=f"trinity-policy-v{int(version)}", lora_int_id=next(self._lora_ids),
                              lora_path=folder)

        async def action() -> None:
            if self._asleep:
                await self._wake()
            await self.engine.add_lora(request)
            previous, self._lora_request = self._lora_request, request
            if previous is not None:
                await self.engine.remove_lora(previous.lora_int_id)
                if str(previous.lora_path).startswith(str(self._lora_dir)):
                    shutil.rmtree(previous.lora_path, ignore_errors=True)
            await self.engine.reset_prefix_cache()
            self._version = int(version)
            self._lora_checksum = checksum
            self._loaded_since_start = True

        self._run(self._gate.exclusive(action))

    def _is_complete(self, weights: Mapping[str, torch.Tensor]) -> bool:
        if not self.track_checksum:
            return True
        from safetensors import safe_open

        names: set[str] = set()
        for file in safetensors_files(self.model_path):
            with safe_open(file, framework="pt") as handle:
                names.update(handle.keys())
        return names.issubset(clean_name(name) for name in weights)

    def _update(self, load: Callable[[], Awaitable[Any]], version: int) -> None:
        async def action() -> None:
            if self._asleep:  # the weights' memory first, the KV cache's once they are in (vLLM's RL order)
                await self.engine.wake_up(tags=["weights"])
            if self._lora_request is not None:  # whole (merged) weights replace the adapter served so far
                await self.engine.remove_lora(self._lora_request.lora_int_id)
                self._lora_request, self._lora_checksum = None, None
            try:
                self._checked(await load())
            finally:  # a load that failed may still have changed some layers: no cached prefix outlives it
                await self._wake()
                await self.engine.reset_prefix_cache()
            self._version = int(version)
            self._loaded_since_start = True

        self._run(self._gate.exclusive(action))

    # ------------------------------------------------------------------ sleep mode

    def sleep(self) -> None:
        """Release the device memory of the weights (kept in host memory) and the KV cache, between requests.

        Mode colocate calls it before the trainer steps on the same device;
        the next request or weight load wakes the engine. Without sleep mode,
        or asleep already, it does nothing.
        """
        if not self.sleep_mode or self._asleep:
            return

        async def action() -> None:
            if not self._asleep:
                await self.engine.sleep(level=1)
                self._asleep = True

        self._run(self._gate.exclusive(action))

    def wake_up(self) -> None:
        """Take the weights' and the KV cache's memory back now (the next request would)."""
        if self._asleep:
            self._run(self._gate.exclusive(self._wake))

    def is_sleeping(self) -> bool:
        """Whether the engine's device memory is released (sleep mode)."""
        return self._asleep

    async def _wake(self) -> None:
        if self._asleep:
            await self.engine.wake_up(tags=None)
            self._asleep = False

    def state_dict_checksum(self) -> str:
        """Return the checksum of the weights last loaded completely (the model folder's at start).

        Raises VLLMEngineError when the engine was started without
        ``track_checksum`` (``synchronizer.verify_checksums``) or after a partial load.
        """
        if self._lora_checksum is not None:  # LoRA slots: the adapter served, as the trainer's adapter checksum
            return self._lora_checksum
        if not self._loaded_since_start:
            from safetensors.torch import load_file

            from trinity.common.models.checksum import state_dict_checksum

            merged: dict[str, torch.Tensor] = {}
            for file in safetensors_files(self.model_path):
                merged.update(load_file(file, device="cpu"))
            return state_dict_checksum(merged)
        if not self.track_checksum:
            raise VLLMEngineError(
                "this vLLM engine does not track weight checksums; set synchronizer.verify_checksums: true"
            )
        checksum = self._rpc("trinity_checksum")[0]
        if checksum is None:
            raise VLLMEngineError("no checksum: the last weights loaded were a partial set")
        return str(checksum)

    def shutdown(self) -> None:
        """Leave the weight-sync group, stop vLLM (its workers and processes) and the event loop; idempotent."""
        if self._closed:
            return
        self.stop_openai_api()
        try:
            self._rpc("trinity_close_weight_sync", timeout=30)
        except Exception as exc:  # noqa: BLE001 - shutting down must go on
            logger.debug("closing the weight-sync group: %s", exc)
        self._closed = True
        try:
            self.engine.shutdown()
        finally:
            self._stop_loop()
            if self._lora_dir is not None:
                shutil.rmtree(self._lora_dir, ignore_errors=True)


def _check_sampling(params: SamplingParams) -> None:
    if params.n < 1 or params.max_tokens < 1:
        raise VLLMEngineError(f"n and max_tokens must be at least 1, got n={params.n}, max_tokens={params.max_tokens}")


#: The adapter ranks vLLM's ``max_lora_rank`` takes.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def lora_slot_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM takes that holds an adapter of ``rank``."""
    for slot in VLLM_LORA_RANKS:
        if slot >= rank:
            return slot
    raise VLLMEngineError(f"a LoRA adapter of rank {rank} is more than vLLM's largest slot ({VLLM_LORA_RANKS[-1]})")


#: vLLM's CPU build: the cores each worker's OpenMP threads are bound to (``0-3|4-7``), and cores kept free.
CPU_BIND_ENV, CPU_RESERVED_ENV = "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU"


def cpu_thread_binding(tensor_parallel_size: int, cores: Sequence[int] | None = None) -> dict[str, str]:
    """Return the environment vLLM's CPU build needs for ``tensor_parallel_size`` workers (empty when none).

    vLLM's CPU build binds each worker to a NUMA node of its own and refuses
    more workers than nodes ("Not enough allowed NUMA nodes"), so on a
    one-node host a tensor-parallel engine would not start. This gives each
    worker an equal share of ``cores`` (default: the cores this process may
    use) instead. Nothing is set for one worker, on vLLM's other platforms,
    or where the user has set the binding.
    """
    if tensor_parallel_size < 2 or os.environ.get(CPU_BIND_ENV, "auto") != "auto":
        return {}
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return {}
    allowed = sorted(cores if cores is not None else os.sched_getaffinity(0))
    if len(allowed) < tensor_parallel_size:
        raise VLLMEngineError(
            f"tensor_parallel_size {tensor_parallel_size} on vLLM's CPU build needs a core per worker, but this "
            f"process may use {len(allowed)} ({allowed}); lower explorer.rollout_model.tensor_parallel_size or "
            f"set {CPU_BIND_ENV} yourself")
    share = len(allowed) // tensor_parallel_size
    groups = [allowed[i * share:(i + 1) * share] for i in range(tensor_parallel_size)]
    return {CPU_BIND_ENV: "|".join(",".join(str(c) for c in group) for group in groups), CPU_RESERVED_ENV: "0"}


@contextlib.contextmanager
def _environment(changes: Mapping[str, str]) -> Iterator[None]:
    """Set ``changes`` in ``os.environ`` for the block (vLLM's processes started in it inherit them), then undo."""
    saved = {name: os.environ.get(name) for name in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _default_executor(tensor_parallel_size: int, claimed: bool = False) -> str | None:
    """``ray`` for a tensor-parallel engine inside a Ray actor (its workers join the engine's group), else None.

    ``mp`` when the engine claimed its devices itself (Ray assigns no ids for
    the key, so Ray's workers could not be masked): its own worker processes
    inherit the engine's mask.
    """
    if tensor_parallel_size == 1:
        return None
    if claimed:
        return "mp"
    try:
        import ray

        if ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None:
            return "ray"
    except ImportError:  # pragma: no cover - ray is a dependency
        pass
    return None

