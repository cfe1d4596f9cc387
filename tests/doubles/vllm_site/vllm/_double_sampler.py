"""Token-by-token sampling of one completion with a Hugging Face causal LM (KV cache on).

Per step, as vLLM V1's sampler: ``logit_bias`` is added to the raw logits first; greedy is the argmax;
otherwise the logits are divided by the temperature, filtered by top-k then
top-p (filtered tokens get ``-inf``) and a token is drawn from the softmax
with the request's generator. The reported log-probs follow ``logprobs_mode``.
Stopping follows vLLM's order: EOS, then stop token ids, then the length cap;
then a stop string completed by the new token overrides any of these.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from vllm.logprobs import Logprob
from vllm.outputs import CompletionOutput
from vllm.sampling_params import SAMPLING_EPS, SamplingParams


@dataclass(frozen=True)
class StopConfig:
    """What ends a completion besides the request's own stop settings."""

    #: The tokenizer's EOS id: finish_reason "stop", stop_reason None.
    eos_token_id: int | None
    #: The generation config's other EOS ids: they act as stop token ids (stop_reason = the id).
    extra_eos_token_ids: frozenset[int]
    #: Most tokens this completion may have (max_tokens capped by max_model_len).
    max_new_tokens: int


def filter_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set to ``-inf`` the logits outside the top ``top_k`` (-1: all), then outside the top-``top_p`` mass."""
    out = logits
    if top_k != -1 and top_k < out.shape[-1]:
        kth_best = torch.topk(out, top_k).values[-1]
        out = out.masked_fill(out < kth_best, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(out, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = torch.cumsum(probs, dim=-1) - probs
        drop_sorted = mass_before >= top_p
        drop_sorted[0] = False  # the most likely token always stays
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        out = out.masked_fill(drop, float("-inf"))
    return out


def _reported_scores(raw: torch.Tensor, processed: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "raw_logprobs":
        return torch.log_softmax(raw, dim=-1)
    if mode == "raw_logits":
        return raw
    if mode == "processed_logprobs":
        return torch.log_softmax(processed, dim=-1)
    return processed  # processed_logits


def _biased(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The logits with the request's ``logit_bias`` added (a logits processor: before temperature and filters)."""
    if not params.logit_bias:
        return logits
    out = logits.clone()
    for token, bias in params.logit_bias.items():
        out[token] += float(bias)
    return out


def _sample_step(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> tuple[int, torch.Tensor]:
    """Return the sampled token and the processed logits it was drawn from."""
    if params.temperature < SAMPLING_EPS:
        return int(torch.argmax(logits)), logits
    processed = filter_top_k_top_p(logits / params.temperature, params.top_k, params.top_p)
    probs = torch.softmax(processed, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator)), processed


def _token_logprobs(scores: torch.Tensor, token: int, k: int, decode: Any) -> dict[int, Logprob]:
    chosen = float(scores[token])
    entry = {token: Logprob(chosen, int((scores >= scores[token]).sum()), decode(token))}
    if k > 0:
        top = torch.topk(scores, min(k, scores.shape[-1]))
        for rank, (value, tid) in enumerate(zip(top.values.tolist(), top.indices.tolist(), strict=True), start=1):
            entry.setdefault(tid, Logprob(float(value), rank, decode(tid)))
    return entry


def _find_stop_string(text: str, checked_upto: int, params: SamplingParams) -> tuple[str, int] | None:
    """The first stop string (in list order) that ends after ``checked_upto``, and where to cut the text."""
    for stop in params.stop or []:
        index = text.find(stop, max(0, checked_upto - len(stop) + 1))
        if index == -1:
            continue
        cut = index + len(stop) if params.include_stop_str_in_output else index
        return stop, cut
    return None


def _cache_keyword(model: torch.nn.Module) -> str:
    """The forward keyword (and output field) of the KV cache: ``cache`` in recent transformers, else the old name."""
    forward = getattr(model, "hf_model", model).forward
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def _forget_rotary_offsets(model: torch.nn.Module) -> None:
    for module in model.modules():
        if getattr(module, "rope_deltas", None) is not None:
            module.rope_deltas = None


def _common_prefix_length(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@torch.no_grad()
def sample_completion(
    model: torch.nn.Module,
    prompt_token_ids: list[int],
    params: SamplingParams,
    *,
    generator: torch.Generator,
    stop_config: StopConfig,
    tokenizer: Any,
    logprobs_mode: str,
    index: int,
    first_inputs: dict[str, torch.Tensor] | None = None,
) -> CompletionOutput:
    """Generate one completion of ``prompt_token_ids`` (``tokenizer`` None: no text).

    ``first_inputs``: extra inputs of the prompt's forward (a multi-modal
    prompt's images); later steps reuse the rotary offsets the model keeps.
    """
    detokenize = tokenizer is not None and params.detokenize

    def decode_one(token: int) -> str | None:
        return tokenizer.decode([token]) if detokenize else None

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=params.skip_special_tokens) if detokenize else ""

    stop_token_ids = set(params.stop_token_ids or []) | set(stop_config.extra_eos_token_ids)
    token_ids: list[int] = []
    logprobs: list[dict[int, Logprob]] | None = [] if params.logprobs is not None else None
    cumulative = 0.0
    text = ""
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    cache: Any = None
    cache_kwarg = _cache_keyword(model)
    step_input = torch.tensor([prompt_token_ids], dtype=torch.long)
    _forget_rotary_offsets(model)  # a vision-language model keeps them per request
    extra = dict(first_inputs or {})
    while finish_reason is None:
        out = model(input_ids=step_input, use_cache=True, **{cache_kwarg: cache}, **extra)
        extra = {}
        cache = getattr(out, cache_kwarg)
        raw = out.logits[0, -1].float()
        token, processed = _sample_step(_biased(raw, params), params, generator)
        token_ids.append(token)
        if logprobs is not None:
            scores = _reported_scores(raw, processed, logprobs_mode)
            logprobs.append(_token_logprobs(scores, token, params.logprobs or 0, decode_one))
            cumulative += float(scores[token])

        stopped_by_token = False
        if token == stop_config.eos_token_id:
            finish_reason, stopped_by_token = "stop", True
        elif token in stop_token_ids:
            finish_reason, stop_reason, stopped_by_token = "stop", token, True
        elif len(token_ids) >= stop_config.max_new_tokens:
            finish_reason = "length"

        if detokenize:
            # The token that stopped the request is not detokenized unless its text is asked for.
            text_ids = token_ids[:-1] if stopped_by_token and not params.include_stop_str_in_output else token_ids
            new_text = decode(text_ids)
            checked_upto = _common_prefix_length(text, new_text)
            text = new_text
            if len(text) > checked_upto and (match := _find_stop_string(text, checked_upto, params)) is not None:
                stop, cut = match
                text = text[:cut]
                finish_reason, stop_reason = "stop", stop
        step_input = torch.tensor([[token]], dtype=torch.long)

    return CompletionOutput(
        index=index,
        text=text,
        token_ids=token_ids,
        cumulative_logprob=cumulative if logprobs is not None else None,
        logprobs=logprobs,
        finish_reason=finish_reason,
        stop_reason=stop_reason,
    )
