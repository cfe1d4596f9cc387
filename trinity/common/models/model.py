"""Upstream Trinity-RFT's model handle for workflows: :class:`ModelWrapper` over an engine client.

A workflow written for upstream calls ``self.model.chat(messages, n=..., temperature=...)``
or ``self.model.generate(prompts, ...)`` and gets back :class:`~trinity.common.experience.Experience`
objects: ``tokens`` (prompt and response), ``prompt_length``, ``logprobs`` of
the response, ``prompt_text``, ``response_text`` and the weights version
that sampled them, one per completion (``n`` per prompt). The ``*_async``
forms run the same call in a worker thread. ``get_openai_client()`` and
``extract_experience_from_history()`` reach the engine's OpenAI API and its
record of the requests, as upstream's do. Underneath is the attempt's
:class:`~trinity.common.models.client.EngineClient`, so deadlines,
cancellation and engine deaths work as for every workflow.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from trinity.common.experience import EID, Experience
from trinity.common.models.engine import Completion, SamplingParams

#: Upstream's sampling keyword arguments that trinity-rft's engines take, by SamplingParams field.
_SAMPLING_KEYS = frozenset(f.name for f in dataclasses.fields(SamplingParams))
#: Upstream keyword arguments accepted and not needed here (log-probs are always recorded; text is always decoded).
_IGNORED_KEYS = frozenset({"logprobs", "include_stop_str_in_output", "skip_special_tokens", "return_token_ids",
                           "detokenize"})


class ModelWrapper:
    """An engine as upstream's workflows see it; see the module docstring."""

    def __init__(self, client: Any, sampling: SamplingParams | None = None, *, name: str = "") -> None:
        """``client`` is an :class:`~trinity.common.models.client.EngineClient`; ``sampling`` the defaults."""
        self.client = client
        self.sampling = sampling or SamplingParams()
        self.name = name
        #: The newest weights version a call of this wrapper saw (the version of experiences built by hand).
        self.last_version = 0

    # -- sampling -------------------------------------------------------------------------------------

    def params(self, **kwargs: Any) -> SamplingParams:
        """Return the sampling of one call: the defaults, then upstream's keyword arguments.

        Raises TypeError for an argument the engines do not take.
        """
        unknown = sorted(set(kwargs) - _SAMPLING_KEYS - _IGNORED_KEYS)
        if unknown:
            raise TypeError(f"ModelWrapper: unsupported sampling argument(s) {unknown}; the engines take "
                            f"{sorted(_SAMPLING_KEYS)}")
        chosen = {k: v for k, v in kwargs.items() if k in _SAMPLING_KEYS and v is not None}
        if chosen.get("top_k", 0) < 0:  # upstream's "off" is -1, the engines' is 0
            chosen["top_k"] = 0
        if "stop" in chosen:
            chosen["stop"] = (chosen["stop"],) if isinstance(chosen["stop"], str) else tuple(chosen["stop"])
        return dataclasses.replace(self.sampling, **chosen)

    def chat(self, messages: Sequence[Mapping[str, Any]], **kwargs: Any) -> list[Experience]:
        """Sample ``n`` replies to one conversation; return one experience per reply."""
        completions = self.client.chat([list(messages)], self.params(**kwargs))[0]
        return [self._experience(c) for c in completions]

    def generate(self, prompts: Sequence[str], **kwargs: Any) -> list[Experience]:
        """Sample ``n`` completions of each raw prompt; return them prompt by prompt."""
        if isinstance(prompts, str):
            prompts = [prompts]
        completions = self.client.generate(list(prompts), self.params(**kwargs))
        return [self._experience(c) for per_prompt in completions for c in per_prompt]

    async def chat_async(self, messages: Sequence[Mapping[str, Any]], **kwargs: Any) -> list[Experience]:
        """:meth:`chat`, awaitable."""
        return await asyncio.to_thread(self.chat, messages, **kwargs)

    async def generate_async(self, prompts: Sequence[str], **kwargs: Any) -> list[Experience]:
        """:meth:`generate`, awaitable."""
        return await asyncio.to_thread(self.generate, prompts, **kwargs)

    def logprobs(self, tokens: Sequence[int], temperature: float | None = None) -> torch.Tensor:
        """Return the log-prob of every token of ``tokens`` after the first, given the ones before it."""
        tokens = list(tokens)
        if len(tokens) < 2:
            return torch.zeros(0)
        scored = self.client.score_tokens([tokens[:1]], [tokens[1:]], 1.0 if temperature is None else temperature)
        return torch.as_tensor(scored[0])

    async def logprobs_async(self, tokens: Sequence[int], temperature: float | None = None) -> torch.Tensor:
        """:meth:`logprobs`, awaitable."""
        return await asyncio.to_thread(self.logprobs, tokens, temperature)

    def _experience(self, completion: Completion) -> Experience:
        self.last_version = max(self.last_version, int(completion.model_version))
        prompt, response = completion.prompt_tokens.long(), completion.response_tokens.long()
        if len(response) == 0:  # an empty reply still needs one response position: its end of turn
            response = torch.tensor([self._end_token()], dtype=torch.long)
            logprobs = torch.zeros(1)
        else:
            logprobs = completion.logprobs.float()
        return Experience(
            tokens=torch.cat([prompt, response]), prompt_length=len(prompt), logprobs=logprobs,
            model_version=int(completion.model_version), prompt_text=self._decode(prompt),
            response_text=completion.text,
            info={"finish_reason": completion.finish_reason},
            truncate_status="response_truncated" if completion.finish_reason == "length" else None,
            multi_modal_inputs=completion.multi_modal_inputs,
            eid=EID(),  # upstream's replies carry an id the workflow may set (run, step, its own task id)
        )

    def _decode(self, tokens: torch.Tensor) -> str | None:
        try:
            return str(self.client.tokenizer.decode(tokens.tolist(), skip_special_tokens=False))
        except Exception:  # noqa: BLE001 - the text is a convenience; the tokens are what trains
            return None

    def _end_token(self) -> int:
        tokenizer = self.client.tokenizer
        return int(tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0)

    # -- the OpenAI API and its history ---------------------------------------------------------------

    def get_openai_client(self) -> Any:
        """An ``openai.OpenAI`` client of the engine's API (``model_path`` names the model)."""
        return self.client.get_openai_client()

    def get_openai_async_client(self) -> Any:
        """An ``openai.AsyncOpenAI`` client of the engine's API."""
        return self.client.get_openai_async_client()

    def extract_experience_from_history(self, clear_history: bool = True) -> list[Experience]:
        """The experiences of this wrapper's OpenAI requests (one per completion), forgotten when ``clear_history``."""
        experiences = list(self.client.extract_experience_from_history(clear_history))
        for experience in experiences:
            if experience.eid is None:
                experience.eid = EID()
        return experiences

    def clone_with_isolated_history(self) -> ModelWrapper:
        """A wrapper of the same engine whose OpenAI requests are recorded apart (one per concurrent episode)."""
        return ModelWrapper(self.client.fork(), self.sampling, name=self.name)

    # -- facts ----------------------------------------------------------------------------------------

    @property
    def model_version(self) -> int:
        """The engine's weights version."""
        version = int(self.client.model_version())
        self.last_version = max(self.last_version, version)
        return version

    async def model_version_async(self) -> int:
        """:attr:`model_version`, awaitable."""
        return await asyncio.to_thread(lambda: self.model_version)

    @property
    def model_path(self) -> str:
        """The model folder the engine serves (the name its OpenAI API answers to)."""
        return str(self.client.call("describe")["model_path"])

    async def model_path_async(self) -> str:
        """:attr:`model_path`, awaitable."""
        return await asyncio.to_thread(lambda: self.model_path)

    @property
    def model_name(self) -> str:
        """The engine group's name (``rollout`` or an auxiliary model's name)."""
        return self.name

    @property
    def api_key(self) -> str:
        """The API key the engine's OpenAI API expects (none is checked)."""
        return "EMPTY"

    @property
    def generate_kwargs(self) -> dict[str, Any]:
        """The default sampling, as keyword arguments."""
        return dataclasses.asdict(self.sampling)


__all__ = ["ModelWrapper"]
