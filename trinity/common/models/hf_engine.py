"""The ``hf`` inference engine: Hugging Face ``transformers`` models sampled on any torch device.

:class:`HFEngine` implements :class:`~trinity.common.models.engine.InferenceEngine`.
It loads a model folder onto the device assigned to its process
(:func:`trinity.device.assign_devices`, then :func:`trinity.device.torch_device`) and samples with
:func:`~trinity.common.models.decoding.decode` (each distinct prompt's forward pass runs once, however many
samples it is asked for; models with another cache layout use ``model.generate``):
prompts left-padded and left-truncated to ``max_prompt_tokens``, batches of at
most ``max_batch_size`` rows, ``n`` completions per prompt, stopping at EOS
(kept as the last response token) or at a stop string (matched in the
generated text only, never across the prompt; the tokens keep the string,
``Completion.text`` ends before it).

Sampling is done by :class:`~trinity.common.models.sampling.LogprobRecorder`
inside the decode loop: temperature, then top-k, then top-p. The model folder's own
``generation_config`` defaults (repetition penalty, default top-k, ...) are
*not* applied: rollouts sample exactly what :class:`SamplingParams` says.
Log-probs (see :mod:`trinity.common.models.sampling`): ``Completion.logprobs``
is the policy log-prob ``log_softmax(logits / T)`` of each sampled token (what
a trainer recomputes); when top-k/top-p filtering is active,
``Completion.info["sampling_logprobs"]`` holds the log-prob under the filtered
distribution actually sampled from.

Concurrent calls (threads in-process, or a Ray actor created with
``max_concurrency > 1``) are combined: while one batch runs, new requests
queue, and the next thread to get the model serves all queued requests with
equal sampling settings as one batch. The serving thread first waits
``batch_wait_ms`` for company, and longer while a cohort of calls the explorer
started together still misses members (:mod:`~trinity.common.models.cohorts`;
``in_cohort``). A request with a ``seed`` is served on
its own, after seeding the device's generators, so it is reproducible.

As a Ray actor: ``ray.remote(HFEngine).options(max_concurrency=...).remote(model_path, ...)``
(see :func:`trinity.common.models.engines.create_engines`); every public method
is a remote method. Besides the :class:`InferenceEngine` contract it offers
``generate_tokens`` (prompts as token ids: multi-turn workflows),
``chat_prompt_tokens``, ``describe`` and ``score_tokens`` (log-probs of
given response tokens: a teacher scoring a student's rollouts).

Batching is what makes it fast: on the tiny model (hidden 64, 2 layers, one
torch thread) 16 prompts at once give about 7x the new tokens per second of
one prompt, and 64 about 17x (32 new tokens each).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from trinity import device
from trinity.common.models.checksum import state_dict_checksum
from trinity.common.models.cohorts import COHORT_METHODS, Cohorts
from trinity.common.models.decoding import decode, left_padded, unsupported_reason
from trinity.common.models.engine import Completion, SamplingParams
from trinity.common.models.openai_api.serving import ServesOpenAI
from trinity.common.models.prompting import TextPrompts
from trinity.common.models.sampling import LogprobRecorder
from trinity.weight_transport.protocol import TensorMeta, WeightSyncGroupInfo

logger = logging.getLogger(__name__)

#: The version an engine reports while (or after failing) loading weights in place: neither the old nor the new.
UNKNOWN_VERSION = -1

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: Prefixes that wrappers add to parameter names (DDP/FSDP1, torch.compile); stripped when a name is unknown.
_WRAPPER_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.")


class EngineError(RuntimeError):
    """An inference engine cannot do what it was asked (bad weights, no weight-sync group, ...)."""


@dataclasses.dataclass
class _Request:
    """One call waiting to be served (see the module docstring on combining)."""

    prompts: list[list[int]]
    params: SamplingParams
    #: Per prompt, its image inputs (None: a text prompt); None when no prompt has images.
    images: list[dict[str, torch.Tensor] | None] | None = None
    done: bool = False
    result: list[list[Completion]] | None = None
    error: BaseException | None = None


@dataclasses.dataclass
class _Row:
    """One completion to sample: which request, prompt and sample it belongs to, and its prompt ids."""

    request: _Request
    prompt_index: int
    sample_index: int
    ids: list[int]
    images: dict[str, torch.Tensor] | None = None


class _StopStrings:
    """A generate stopping criterion: a row is done once its *generated* text contains a stop string.

    (transformers' own ``stop_strings`` also match across the prompt, so a
    prompt ending in ``\\n`` stops at once on a ``\\n\\n`` stop string.)
    """

    def __init__(self, tokenizer: Any, stop: Sequence[str], prompt_width: int) -> None:
        self.tokenizer = tokenizer
        self.stop = tuple(stop)
        self.prompt_width = prompt_width

    def __call__(self, input_ids: torch.Tensor, scores: Any = None, **kwargs: Any) -> torch.Tensor:
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        for i, row in enumerate(input_ids[:, self.prompt_width :].tolist()):
            text = self.tokenizer.decode(row, skip_special_tokens=True)
            done[i] = any(s in text for s in self.stop)
        return done


class HFEngine(TextPrompts, ServesOpenAI):
    """A transformers-based rollout engine; see the module docstring."""

    def __init__(
        self,
        model_path: str,
        *,
        tokenizer_path: str = "",
        dtype: str = "float32",
        max_prompt_tokens: int = 256,
        max_batch_size: int = 32,
        seed: int = 0,
        version: int = 0,
        trust_remote_code: bool = False,
        chat_template: str | None = None,
        torch_threads: int = 0,
        batch_wait_ms: float = 5.0,
        openai_api: Mapping[str, Any] | None = None,
    ) -> None:
        """Load the model and tokenizer; raises EngineError for an unknown or unsupported dtype or bad sizes.

        ``dtype`` ``auto`` is the device backend's preferred dtype; the attention
        kernel is the one the backend names for the dtype.

        ``batch_wait_ms``: before serving, wait this long for concurrent requests
        to join the batch (runners of one step arrive within milliseconds of each
        other; one generate call for all of them beats two).

        ``torch_threads > 0`` sets torch's intra-op thread count for this process: a tiny model on a
        busy CPU generates ~10x faster with 1 thread than with 2 (Ray actors get
        ``OMP_NUM_THREADS`` = their CPUs already).

        ``openai_api`` (see ``trinity.common.models.openai_api.serving.api_options``): serve the
        OpenAI-compatible API from this process once the model is loaded.
        """
        from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

        from trinity.common.models.vision import VisionInputs, folder_is_vision_language, rope_index, takes_token_types

        if dtype not in _DTYPES and dtype != "auto":
            raise EngineError(f"unknown dtype {dtype!r}; use one of {', '.join(_DTYPES)} or auto")
        if max_prompt_tokens < 1 or max_batch_size < 1:
            raise EngineError(
                f"max_prompt_tokens and max_batch_size must be at least 1, got {max_prompt_tokens}, {max_batch_size}"
            )
        if torch_threads > 0:
            torch.set_num_threads(torch_threads)
        if batch_wait_ms < 0:
            raise EngineError(f"batch_wait_ms must be 0 or more, got {batch_wait_ms}")
        self.batch_wait_s = batch_wait_ms / 1000.0
        self.model_path = str(model_path)
        self.tokenizer_path = str(tokenizer_path or model_path)
        try:
            self.dtype = device.resolve_dtype(dtype)
        except device.UnsupportedDtypeError as exc:
            raise EngineError(str(exc)) from None
        self.attn_implementation = device.attention_implementation(self.dtype).implementation
        self.max_prompt_tokens = max_prompt_tokens
        self.max_batch_size = max_batch_size
        #: This engine's device on its node (claimed, or Ray's), made current before the model loads.
        self.devices = device.assign_devices(1)
        self.device = device.torch_device()
        self.tokenizer: Any = AutoTokenizer.from_pretrained(self.tokenizer_path, trust_remote_code=trust_remote_code)
        self.chat_template = chat_template
        self.tokenizer.padding_side = "left"
        vision_language = folder_is_vision_language(self.model_path)
        auto = AutoModelForImageTextToText if vision_language else AutoModelForCausalLM
        self.model: Any = auto.from_pretrained(
            self.model_path, dtype=_DTYPES[self.dtype], trust_remote_code=trust_remote_code,
            attn_implementation=self.attn_implementation,
        )
        #: Whether generate takes ``mm_token_type_ids`` (transformers 5 builds the 3-D rotary positions from them).
        self._takes_token_types = False
        if vision_language:
            self.vision = VisionInputs(self.model_path, tokenizer=self.tokenizer)
            self._takes_token_types = takes_token_types(rope_index(self.model))
        self.model.to(self.device)
        self.model.eval()  # type: ignore[no-untyped-call]
        self._eos_ids = self._collect_eos_ids()
        pad = self.tokenizer.pad_token_id
        self._pad_id = int(pad) if pad is not None else min(self._eos_ids)
        # generate() fills unset options from the model's generation_config (a folder's repetition
        # penalty, default top-k, ...); rollouts must sample exactly as asked, so keep only the ids.
        from transformers import GenerationConfig

        self.model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
            eos_token_id=sorted(self._eos_ids), pad_token_id=self._pad_id,
            bos_token_id=getattr(self.model.generation_config, "bos_token_id", None),
        )
        self._version = int(version)
        #: Mode colocate's shared weights file (SharedWeights), once attached; the model reads its tensors.
        self._shared: Any = None
        #: The model's own tensors a new shared version is copied into (those the file cannot back directly).
        self._shared_copies: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._model_lock = _ModelLock(self)
        self._pending_lock = threading.Lock()
        self._pending: list[_Request] = []
        #: API requests accepted and not yet handed to generate_tokens (see note_incoming).
        self._incoming = 0
        self._cohorts = Cohorts()
        self._sync_group: Any = None
        #: The model :meth:`_decode_unsupported` last checked, and its answer.
        self._decode_checked_for: Any = None
        self._decode_reason: str | None = None
        device.manual_seed(seed)
        if openai_api is not None:
            self.start_openai_api(openai_api)

    @staticmethod
    def plan_kwargs(engine: Any, *, seed: int = 0, verify_checksums: bool = False) -> dict[str, Any]:
        """Return the constructor keyword arguments for an engine group's plan (``EnginePlan``)."""
        return {
            "model_path": engine.model_path,
            "dtype": engine.dtype,
            "max_prompt_tokens": engine.max_prompt_tokens,
            "max_batch_size": engine.max_batch_size,
            "seed": seed,
            "trust_remote_code": engine.trust_remote_code,
            "chat_template": engine.chat_template,
        }

    def _collect_eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for value in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
        if not ids:
            raise EngineError(f"{self.tokenizer_path}: the tokenizer has no EOS token; generation could never stop")
        return ids

    # ------------------------------------------------------------------ sampling

    def note_incoming(self) -> None:
        """Count a request the API server accepted and is preparing: batches wait for it (see :meth:`generate_tokens`).

        The server hands it over with ``generate_tokens(..., incoming=True)``,
        or calls :meth:`forget_incoming` when the request fails before that.
        """
        with self._pending_lock:
            self._incoming += 1

    def forget_incoming(self) -> None:
        """Uncount a request counted by :meth:`note_incoming` that will not be handed over."""
        with self._pending_lock:
            self._incoming = max(0, self._incoming - 1)

    def in_cohort(self, cohort: str, size: int, method: str, *args: Any) -> Any:
        """Call sampling ``method`` with ``args`` as a member of ``cohort`` (of ``size``; see the module docstring).

        Raises EngineError for a method that does not sample or a size below 1.
        """
        if method not in COHORT_METHODS or size < 1:
            raise EngineError(
                f"in_cohort takes one of {', '.join(sorted(COHORT_METHODS))} and a size of at least 1, "
                f"got {method!r} and {size}")
        self._cohorts.enter(cohort, size)
        try:
            return getattr(self, method)(*args)
        finally:
            self._cohorts.leave()

    def generate_tokens(self, prompts: Sequence[Sequence[int]], params: SamplingParams, *,
                        incoming: bool = False, images: Sequence[dict[str, Any] | None] | None = None
                        ) -> list[list[Completion]]:
        """Sample ``params.n`` completions for each prompt given as token ids (multi-turn rollouts use this).

        ``images``: per prompt, the image inputs its placeholder tokens stand for
        (:class:`~trinity.common.models.vision.VisionInputs`; None: a text prompt).
        A prompt with images is never truncated: one too long is refused.

        Before serving, a batch waits ``batch_wait_ms`` for concurrent requests,
        then for the missing members of the cohorts it holds (:meth:`in_cohort`),
        then for the API requests still being prepared (:meth:`note_incoming`;
        at most :attr:`incoming_wait_s`). ``incoming``: this call hands over
        such a request.
        """
        queued = False
        try:
            if params.n < 1 or params.max_tokens < 1:
                raise EngineError(
                    f"n and max_tokens must be at least 1, got n={params.n}, max_tokens={params.max_tokens}")
            request = _Request([[int(t) for t in p] for p in prompts], params,
                               self._checked_images(prompts, images) if images is not None else None)
            for i, p in enumerate(request.prompts):
                if not p:
                    raise EngineError(f"prompt {i} is empty; give at least one token")
            if not request.prompts:
                return []
            member = self._cohorts.take_current()
            with self._pending_lock:
                self._pending.append(request)
                if member is not None:
                    self._cohorts.arrived(*member)
                if incoming:
                    self._incoming = max(0, self._incoming - 1)
                    queued = True
        finally:
            if incoming and not queued:
                self.forget_incoming()
        with self._model_lock:
            if not request.done:
                if self.batch_wait_s:
                    time.sleep(self.batch_wait_s)  # let the other runners of this step join the batch
                self._await_cohorts()
                self._await_incoming()
                with self._pending_lock:
                    batch, self._pending = self._pending, []
                self._serve(batch)
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    #: Seconds a batch waits at most for API requests still being prepared.
    incoming_wait_s: float = 0.05

    def _checked_images(self, prompts: Sequence[Sequence[int]], images: Sequence[dict[str, Any] | None]
                        ) -> list[dict[str, torch.Tensor] | None]:
        """``images`` as tensors, one entry per prompt; EngineError for a prompt the model cannot take whole."""
        if len(images) != len(prompts):
            raise EngineError(f"{len(images)} image entries for {len(prompts)} prompts; give one per prompt")
        if any(item is not None for item in images) and self.vision is None:
            raise EngineError(f"a prompt has images, but {self.model_path} has no vision tower")
        out: list[dict[str, torch.Tensor] | None] = []
        for i, (prompt, item) in enumerate(zip(prompts, images, strict=True)):
            if item is not None and len(prompt) > self.max_prompt_tokens:
                raise EngineError(f"prompt {i} has {len(prompt)} tokens with its images, more than this engine's "
                                  f"{self.max_prompt_tokens} prompt tokens (model.max_prompt_tokens); a prompt with "
                                  "images cannot be cut: raise the limit or use smaller images")
            out.append(None if item is None else {name: torch.as_tensor(value) for name, value in item.items()})
        return out

    def _await_cohorts(self) -> None:
        """Wait (model lock held) while a cohort misses members (bounded per cohort) and the batch is not full."""
        while self._cohorts.waiting():
            with self._pending_lock:
                rows = sum(len(r.prompts) * r.params.n for r in self._pending)
            if rows >= self.max_batch_size:
                return
            time.sleep(0.0005)

    def _await_incoming(self) -> None:
        """Wait (model lock held) until no API request is being prepared, or :attr:`incoming_wait_s` passed."""
        deadline = time.monotonic() + self.incoming_wait_s
        while time.monotonic() < deadline:
            with self._pending_lock:
                if not self._incoming:
                    return
            time.sleep(0.0005)

    def _serve(self, requests: list[_Request]) -> None:
        """Serve ``requests`` (model lock held): group equal settings, sample, fill results or errors."""
        groups: dict[Any, list[_Request]] = {}
        for req in requests:
            key: Any = dataclasses.replace(req.params, n=1)
            if req.params.seed is not None or req.images is not None:
                key = (key, id(req))  # seeded requests run alone: reproducible; so do requests with images
            groups.setdefault(key, []).append(req)
        for group in groups.values():
            try:
                self._serve_group(group)
            except Exception as exc:  # noqa: BLE001 - the callers of this group get it; others are unaffected
                for req in group:
                    req.error = exc
            finally:
                for req in group:
                    req.done = True

    def _serve_group(self, group: list[_Request]) -> None:
        params = group[0].params
        rows = [
            _Row(req, i, j, prompt[-self.max_prompt_tokens :], req.images[i] if req.images is not None else None)
            for req in group
            for i, prompt in enumerate(req.prompts)
            for j in range(req.params.n)
        ]
        results: dict[int, list[list[Completion | None]]] = {
            id(req): [[None] * req.params.n for _ in req.prompts] for req in group
        }
        if params.seed is not None:
            device.manual_seed(params.seed)
        with_images: dict[tuple[int, int], list[_Row]] = {}
        for row in rows:
            if row.images is not None:  # the samples of one prompt with images share its image inputs
                with_images.setdefault((id(row.request), row.prompt_index), []).append(row)
        rows = [row for row in rows if row.images is None]
        rows.sort(key=lambda r: len(r.ids))  # less padding per batch
        size = self.max_batch_size
        chunks: list[tuple[list[_Row], dict[str, torch.Tensor] | None]] = [
            (rows[start : start + size], None) for start in range(0, len(rows), size)]
        for same in with_images.values():
            chunks += [(same[start : start + size], same[0].images) for start in range(0, len(same), size)]
        for chunk, images in chunks:
            for row, completion in zip(chunk, self._sample([r.ids for r in chunk], params, images), strict=True):
                results[id(row.request)][row.prompt_index][row.sample_index] = completion
        for req in group:
            req.result = [[c for c in per_prompt if c is not None] for per_prompt in results[id(req)]]

    @torch.no_grad()
    def _sample(self, prompts: list[list[int]], params: SamplingParams,
                images: dict[str, torch.Tensor] | None = None) -> list[Completion]:
        """Sample ``prompts`` (at most ``max_batch_size``) in one decode loop and build their completions.

        The loop is :func:`~trinity.common.models.decoding.decode` (one prefill
        per distinct prompt); a model it cannot run uses transformers' generate.
        ``images``: the image inputs of every prompt of the chunk (the samples of one prompt).
        """
        greedy = params.temperature <= 0
        # a reply with an image placeholder would claim an image nobody gave: the trainer could not run it
        suppress = self.vision.special_ids if self.vision is not None else ()
        recorder = LogprobRecorder(params.temperature, params.top_k, params.top_p, suppress=suppress)
        if images is not None:
            generated = self._generate(prompts, params, recorder, images)
        elif self._decode_unsupported() is None:
            generated = decode(
                self.model, prompts, max_tokens=params.max_tokens, greedy=greedy, processor=recorder,
                eos_ids=sorted(self._eos_ids), pad_id=self._pad_id,
                stop=_StopStrings(self.tokenizer, params.stop, 0) if params.stop else None, device=self.device,
            ).cpu()
        else:
            generated = self._generate(prompts, params, recorder)
        policy, sampling = recorder.finish(generated)
        out = []
        for i, prompt in enumerate(prompts):
            length, reason, text = self._finish(generated[i], params.stop)
            info: dict[str, Any] = {}
            if sampling is not None:  # recorded only while top-k/top-p filtering is active
                info["sampling_logprobs"] = sampling[i, :length].clone()
            out.append(
                Completion(
                    prompt_tokens=torch.tensor(prompt, dtype=torch.long),
                    response_tokens=generated[i, :length].clone(),
                    logprobs=policy[i, :length].clone(),
                    text=text,
                    finish_reason=reason,
                    model_version=self._version,
                    info=info,
                    multi_modal_inputs=images,
                )
            )
        return out

    def _decode_unsupported(self) -> str | None:
        """Why this engine's model cannot take the shared-prefix decode loop (None: it can); checked once per model."""
        model = self.model
        if self._decode_checked_for is not model:
            self._decode_reason = unsupported_reason(model)
            self._decode_checked_for = model
            if self._decode_reason is not None:
                logger.info("hf engine: sampling with transformers' generate: %s", self._decode_reason)
        return self._decode_reason

    def _generate(self, prompts: list[list[int]], params: SamplingParams, recorder: LogprobRecorder,
                  images: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Sample ``prompts`` with transformers' generate; return the ``[B, L]`` generated ids.

        ``images``: the image inputs every prompt of the chunk shares (one prompt's samples).
        """
        from transformers import GenerationConfig, LogitsProcessorList

        from trinity.common.models.vision import token_types

        input_ids, attention_mask = left_padded(prompts, self._pad_id)
        width = input_ids.shape[1]
        greedy = params.temperature <= 0
        config = GenerationConfig(  # type: ignore[no-untyped-call]
            max_new_tokens=params.max_tokens,
            do_sample=not greedy,
            temperature=1.0,
            top_k=None if greedy else 0,  # None: no warning in greedy mode; 0: no default top-k when sampling
            top_p=1.0,
            repetition_penalty=1.0,
            eos_token_id=sorted(self._eos_ids),
            pad_token_id=self._pad_id,
        )
        extra: dict[str, Any] = {}
        if params.stop:
            from transformers import StoppingCriteriaList

            extra["stopping_criteria"] = StoppingCriteriaList([_StopStrings(self.tokenizer, params.stop, width)])
        if images is not None:
            copies = len(prompts)
            extra["pixel_values"] = images["pixel_values"].repeat(copies, 1).to(self.device, self.model.dtype)
            extra["image_grid_thw"] = images["image_grid_thw"].repeat(copies, 1).to(self.device)
            if self._takes_token_types:
                extra["mm_token_type_ids"] = token_types(input_ids, self.model.config).to(self.device)
        sequences = self.model.generate(
            input_ids=input_ids.to(self.device),
            attention_mask=attention_mask.to(self.device),
            generation_config=config,
            logits_processor=LogitsProcessorList([recorder]),
            **extra,
        )
        generated: torch.Tensor = sequences[:, width:].cpu()
        return generated

    def _finish(self, tokens: torch.Tensor, stop: Sequence[str]) -> tuple[int, str, str]:
        """Return where a generated row ends (EOS included), why (``stop``/``length``) and its text.

        The end is the first EOS, or the token completing the first stop
        string, whichever comes first; the text excludes the stop string.
        """
        ids = tokens.tolist()
        end, reason = len(ids), "length"
        for k, tok in enumerate(ids):
            if tok in self._eos_ids:
                end, reason = k + 1, "stop"
                break
        if stop:
            for k in range(1, end + 1):
                text = str(self.tokenizer.decode(ids[:k], skip_special_tokens=True))
                cut = min((text.find(s) for s in stop if s in text), default=-1)
                if cut >= 0:
                    return k, "stop", text[:cut]
        return end, reason, str(self.tokenizer.decode(ids[:end], skip_special_tokens=True))

    # ------------------------------------------------------------------ scoring

    #: Logit elements one scoring forward pass may produce (rows x kept positions x vocabulary): ~1 GiB in float32.
    score_logits_budget: int = 2**28

    def score_tokens(
        self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], temperature: float = 1.0
    ) -> list[torch.Tensor]:
        """Return the log-prob of each response token given its prompt and the response tokens before it.

        The log-probs are ``log_softmax(logits / temperature)``, what sampling
        at that temperature reports as ``Completion.logprobs`` (``temperature
        <= 0`` scores at 1, as greedy sampling reports); one float32 CPU tensor
        of the response's length per pair. Prompts are not truncated. Rows are
        left-padded like sampling's, at most ``max_batch_size`` per forward pass
        and fewer when their logits would pass :attr:`score_logits_budget`.
        Raises EngineError for unequal counts or an empty prompt.
        """
        if len(prompts) != len(responses):
            raise EngineError(f"score_tokens got {len(prompts)} prompts but {len(responses)} responses; pair them")
        pairs = [([int(t) for t in p], [int(t) for t in r]) for p, r in zip(prompts, responses, strict=True)]
        for i, (prompt, _) in enumerate(pairs):
            if not prompt:
                raise EngineError(f"score_tokens: prompt {i} is empty; give at least one token")
        scale = float(temperature) if temperature > 0 else 1.0
        out: list[torch.Tensor] = [torch.zeros(0)] * len(pairs)
        with self._model_lock:
            for chunk in self._score_chunks(pairs):
                for i, scores in zip(chunk, self._score([pairs[i] for i in chunk], scale), strict=True):
                    out[i] = scores
        return out

    def _score_chunks(self, pairs: list[tuple[list[int], list[int]]]) -> list[list[int]]:
        """Group pair indices (similar lengths together) into forward passes within the row and logit budgets."""
        vocab = int(self.model.get_output_embeddings().weight.shape[0])
        order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][1]), len(pairs[i][0])))
        chunks: list[list[int]] = []
        chunk: list[int] = []
        for i in order:
            keep = len(pairs[i][1]) + 1  # sorted: the widest response of the chunk so far
            too_many = len(chunk) >= self.max_batch_size
            if chunk and (too_many or (len(chunk) + 1) * keep * vocab > self.score_logits_budget):
                chunks.append(chunk)
                chunk = []
            chunk.append(i)
        return [*chunks, chunk] if chunk else chunks

    def top_logprobs(self, prompt: Sequence[int], response: Sequence[int], k: int, temperature: float = 1.0
                     ) -> list[list[tuple[int, float]]]:
        """Return, for each response token's position, the ``k`` likeliest tokens and their log-probs.

        Log-probs as :meth:`score_tokens` computes them (``log_softmax(logits /
        temperature)``, greedy scored at 1); the OpenAI API's ``top_logprobs``.
        """
        pair = ([int(t) for t in prompt], [int(t) for t in response])
        if not pair[0]:
            raise EngineError("top_logprobs: the prompt is empty; give at least one token")
        if not pair[1] or k < 1:
            return [[] for _ in pair[1]]
        scale = float(temperature) if temperature > 0 else 1.0
        with self._model_lock, torch.no_grad():
            rows = self._response_logits([pair])[0].float() / scale
            values, ids = torch.log_softmax(rows, dim=-1).topk(k, dim=-1)
        return [list(zip(i, v, strict=True)) for i, v in zip(ids.tolist(), values.tolist(), strict=True)]

    @torch.no_grad()
    def _score(self, pairs: list[tuple[list[int], list[int]]], temperature: float) -> list[torch.Tensor]:
        """Score one forward pass (model lock held): each response token's log-prob at ``temperature``."""
        result = []
        for (_prompt, response), rows in zip(pairs, self._response_logits(pairs), strict=True):
            if not response:
                result.append(torch.zeros(0, dtype=torch.float32))
                continue
            targets = torch.tensor(response, dtype=torch.long, device=rows.device).view(-1, 1)
            result.append(torch.log_softmax(rows.float() / temperature, dim=-1).gather(1, targets).squeeze(1).cpu())
        return result

    def _response_logits(self, pairs: list[tuple[list[int], list[int]]]) -> list[torch.Tensor]:
        """One forward pass (model lock held): per pair, the ``[len(response), V]`` logits predicting its response.

        Rows are left-padded, logits kept for the response positions only.
        """
        width = max(len(p) + len(r) for p, r in pairs)
        keep = max(len(r) for _, r in pairs) + 1
        input_ids = torch.full((len(pairs), width), self._pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(pairs), width), dtype=torch.long)
        for i, (prompt, response) in enumerate(pairs):
            row = prompt + response
            input_ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            attention_mask[i, width - len(row) :] = 1
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # as generate numbers left-padded rows
        inputs = {"input_ids": input_ids.to(self.device), "attention_mask": attention_mask.to(self.device),
                  "position_ids": position_ids.to(self.device)}
        try:
            logits = self.model(**inputs, logits_to_keep=keep).logits
        except TypeError as exc:  # a model without logits_to_keep: compute all, keep the tail
            if "logits_to_keep" not in str(exc):
                raise
            logits = self.model(**inputs).logits
        logits = logits[:, -keep:]
        # kept position k is input position width - keep + k; the response is predicted by the n before the last
        return [logits[i, keep - len(response) - 1 : keep - 1] for i, (_prompt, response) in enumerate(pairs)]

    # ------------------------------------------------------------------ weights

    def model_version(self) -> int:
        """Return the version of the weights currently loaded (with shared weights: the version the file holds)."""
        if self._shared is not None:
            with self._model_lock:
                pass  # taking the model takes the file's newest version
        return self._version

    def attach_shared_weights(self, path: str, metas: Sequence[TensorMeta]) -> None:
        """Map the trainer's shared weights file (mode colocate on the CPU) and serve its weights from now on.

        Each parameter the file holds in the same dtype and shape is pointed at
        the file's tensor (no copy: the trainer's next write is the next
        version); any other is copied when a new version appears. A forward
        pass holds the file's read lock, so a version is never half-written
        under it. Raises EngineError for tensors the model lacks.
        """
        from trinity.weight_transport.shared_file import SharedWeights

        shared = SharedWeights.attach(path, metas)
        own = self.model.state_dict(keep_vars=True)
        direct: list[tuple[torch.Tensor, torch.Tensor]] = []
        copies: list[tuple[torch.Tensor, torch.Tensor]] = []
        unknown = []
        for name, view in shared.tensors.items():
            target = own.get(self._resolve(name, own))
            if target is None or tuple(target.shape) != tuple(view.shape):
                unknown.append(name)
            elif target.dtype == view.dtype and target.device == view.device:
                direct.append((target, view))
            else:
                copies.append((target, view))
        if unknown:
            shared.close()
            raise EngineError(f"{len(unknown)} shared weight(s) unknown to the model in {self.model_path} "
                              f"({', '.join(repr(n) for n in unknown[:5])}); are trainer and engine loading the "
                              "same architecture?")
        with self._model_lock, torch.no_grad():
            for target, view in direct:
                target.data = view
            if self._shared is not None:
                self._shared.close()
            self._shared, self._shared_copies = shared, copies
            self._version = UNKNOWN_VERSION  # the file's version is taken when the model is next taken
        logger.info("serving shared weights from %s: %d tensors mapped, %d copied per version", path, len(direct),
                    len(copies))

    def _take_shared_version(self, version: int) -> None:
        """Called holding the model and the file's read lock: adopt ``version`` (copying what is not mapped)."""
        if version == self._version or version < 0:
            return
        with torch.no_grad():
            for target, view in self._shared_copies:
                target.copy_(view)
        self._version = version

    def describe(self) -> dict[str, Any]:
        """Return what this engine serves: paths, dtype, attention kernel, device, version."""
        return {
            "engine": "hf",
            "model_path": self.model_path,
            "tokenizer_path": self.tokenizer_path,
            "dtype": self.dtype,
            "attn_implementation": self.attn_implementation,
            "device": str(self.device),
            "version": self._version,
            "max_prompt_tokens": self.max_prompt_tokens,
            "openai_api": self.openai_api(),
        }

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy ``state_dict`` into the model (a subset is fine; unknown names are an error) and set the version.

        Names may carry a wrapper prefix (``module.``, ``_orig_mod.``). Raises
        EngineError naming the unknown tensors or a shape mismatch; the model
        is unchanged then.
        """
        own = self.model.state_dict(keep_vars=True)
        plan: list[tuple[torch.Tensor, torch.Tensor]] = []
        unknown: list[str] = []
        for name, value in state_dict.items():
            target = own.get(self._resolve(name, own))
            if target is None:
                unknown.append(name)
                continue
            if tuple(target.shape) != tuple(value.shape):
                raise EngineError(
                    f"weight {name!r} has shape {tuple(value.shape)}, the model expects {tuple(target.shape)}"
                )
            plan.append((target, value))
        if unknown:
            shown = ", ".join(repr(n) for n in unknown[:5])
            raise EngineError(
                f"{len(unknown)} weight(s) unknown to the model in {self.model_path} ({shown}); "
                "are trainer and engine loading the same architecture?"
            )
        with self._model_lock, torch.no_grad():
            for target, value in plan:
                target.copy_(value.to(device=target.device, dtype=target.dtype))
            self._version = int(version)
        logger.debug("loaded %d tensors, version %d", len(plan), version)

    @staticmethod
    def _resolve(name: str, own: Mapping[str, torch.Tensor]) -> str:
        if name in own:
            return name
        stripped = name
        changed = True
        while changed:
            changed = False
            for prefix in _WRAPPER_PREFIXES:
                if stripped.startswith(prefix):
                    stripped, changed = stripped[len(prefix) :], True
            stripped = stripped.replace("._orig_mod.", ".").replace("._fsdp_wrapped_module.", ".")
        return stripped

    def load_checkpoint_weights(self, folder: str, version: int) -> None:
        """Load every ``*.safetensors`` file of ``folder`` and set the version.

        The checkpoint sync method writes ``model.safetensors`` (and a ``version``
        file, which ``version`` repeats) behind a link it swaps atomically;
        Hugging Face shards (``model-0000x-of-0000y.safetensors``) load too.
        Raises EngineError when the folder holds no safetensors file.
        """
        from safetensors.torch import load_file

        files = sorted(Path(folder).resolve().glob("*.safetensors"))  # resolved once: a swapped link never mixes
        if not files:
            raise EngineError(f"{folder}: no *.safetensors file to load weights from")
        merged: dict[str, torch.Tensor] = {}
        for file in files:
            merged.update(load_file(str(file), device="cpu"))
        self.load_state_dict(merged, version)

    def device_assignments(self) -> list[dict[str, Any]]:
        """Return the device assignment of each worker process of this engine: one, this process's."""
        return [{"worker": 0, **self.devices.as_record()}]

    def weight_sync_ranks(self) -> int:
        """Return 1: the engine is one process on one device."""
        return 1

    def init_weight_sync(self, info: WeightSyncGroupInfo, first_rank: int) -> None:
        """Join the trainer's weight-sync group as rank ``first_rank``."""
        from trinity.weight_transport.group import WeightSyncGroup

        self.close_weight_sync()
        self._sync_group = WeightSyncGroup.join(info, rank=first_rank)

    def close_weight_sync(self) -> None:
        """Leave the weight-sync group, if any (a later :meth:`init_weight_sync` joins a new one)."""
        group, self._sync_group = self._sync_group, None
        if group is not None:
            group.close()

    def shutdown(self) -> None:
        """Stop the API server, leave the weight-sync group and free the model's device memory."""
        self.stop_openai_api()
        self.close_weight_sync()
        with self._model_lock:
            self.model = None
            shared, self._shared = self._shared, None
        if shared is not None:
            shared.close()
        device.empty_cache()

    def receive_weights(self, metas: Sequence[TensorMeta], version: int, bucket_bytes: int) -> None:
        """Receive the trainer's broadcast of ``metas`` (rank 0) into the model's parameters and set the version.

        The buckets land in the parameters in place (no copy of the whole
        model is held; see ``WeightSyncGroup.receive_into``); generation waits
        meanwhile, and the version reads ``UNKNOWN_VERSION`` until the last
        bucket is in. Metas naming tensors the model lacks (or with other
        shapes) are received aside and refused by :meth:`load_state_dict`,
        the model unchanged. Raises EngineError when :meth:`init_weight_sync`
        was not called first.
        """
        if self._sync_group is None:
            raise EngineError("receive_weights before init_weight_sync: this engine is in no weight-sync group")
        targets = self._receive_targets(metas)
        if targets is None:  # names or shapes the model lacks: receive aside, so load_state_dict names them
            device.synchronize()
            received = self._sync_group.receive_state_dict(list(metas), bucket_bytes, self.device)
            device.synchronize()
            self.load_state_dict(received, version)
            return
        with self._model_lock, torch.no_grad():
            self._version = UNKNOWN_VERSION  # a broadcast failing midway leaves a mix of old and new weights
            self._sync_group.receive_into(list(metas), bucket_bytes, targets)
            self._version = int(version)

    def _receive_targets(self, metas: Sequence[TensorMeta]) -> list[torch.Tensor] | None:
        """Return the model's own tensor for each meta (detached, shared storage), or None when one does not fit."""
        own = self.model.state_dict(keep_vars=True)
        targets = []
        for meta in metas:
            target = own.get(self._resolve(meta.name, own))
            if target is None or tuple(target.shape) != tuple(meta.shape):
                return None
            targets.append(target.detach())
        return targets

    def state_dict_checksum(self) -> str:
        """Return the checksum of the loaded weights (:func:`trinity.common.models.checksum.state_dict_checksum`)."""
        with self._model_lock:
            return state_dict_checksum(self.model.state_dict())


class _ModelLock:
    """The engine's model lock; with shared weights attached it also holds the file's read lock.

    Taking it adopts the newest version the trainer wrote (mode colocate), so
    every use of the model (generation, scoring, checksums) sees whole
    versions and reports the version it used.
    """

    def __init__(self, engine: HFEngine) -> None:
        self._lock = threading.Lock()
        self._engine = engine
        self._reading: Any = None

    def __enter__(self) -> None:
        self._lock.acquire()
        shared = self._engine._shared
        if shared is None:
            return
        reading = shared.reading()
        try:
            version = reading.__enter__()
            self._reading = reading
            self._engine._take_shared_version(version)
        except BaseException:
            if self._reading is not None:
                self._reading, held = None, self._reading
                held.__exit__(None, None, None)
            self._lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        reading, self._reading = self._reading, None
        try:
            if reading is not None:
                reading.__exit__(None, None, None)
        finally:
            self._lock.release()
