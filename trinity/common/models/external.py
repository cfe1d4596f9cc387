"""Models served outside the run: OpenAI-compatible endpoints.

An auxiliary model with ``engine_type: external`` (:class:`ExternalEndpoint`),
and the rollout model of a mode ``bench`` run with ``model.external_model``
enabled (:class:`ExternalChatEngine`).

No engine of the run serves either. Workflows reach an auxiliary one as they
reach an engine's API, ``self.auxiliary[name].get_openai_client()``; the
base URL and key are read from the environment variables the config names
when a client is made (the key never enters the run's plan, logs or
records). Nothing an endpoint answers is recorded or trained on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from trinity.common.config.plan.explorer import ExternalPlan
from trinity.common.models.engine import Completion, SamplingParams


class ExternalEndpoint:
    """The engine-shaped stand-in for an external endpoint: it describes the endpoint and does nothing else."""

    def __init__(self, name: str, endpoint: ExternalPlan) -> None:
        self.name = name
        self.endpoint = endpoint

    def describe(self) -> dict[str, Any]:
        """Return what an engine's ``describe`` says, with the endpoint as its OpenAI API (no history)."""
        url = os.environ.get(self.endpoint.base_url_env, "").rstrip("/")
        if not url:
            raise RuntimeError(f"auxiliary model {self.name!r}: the environment variable "
                               f"{self.endpoint.base_url_env} (its endpoint's base URL) is not set in this process")
        return {
            "engine": "external",
            "model_path": self.endpoint.model_name,
            "openai_api": {"url": url.removesuffix("/v1"), "base_url": url, "history": False,
                           "model_names": [self.endpoint.model_name],
                           "api_key": os.environ.get(self.endpoint.api_key_env) or "EMPTY"},
        }

    def model_version(self) -> int:
        """Return 0: the run never changes the endpoint's weights."""
        return 0

    def device_assignments(self) -> list[dict[str, Any]]:
        """Return no workers: nothing of the run serves this model."""
        return []

    def _only_openai(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"auxiliary model {self.name!r} is an external endpoint: call it through "
            f"self.auxiliary[{self.name!r}].get_openai_client()"
        )

    chat = generate = generate_tokens = score_tokens = _only_openai

    def take_history(self, session: str, clear: bool = True) -> tuple[list[Any], int]:
        """Return nothing: an external endpoint's requests are not recorded."""
        return [], 0

    def drop_history(self, session: str) -> None:
        """Do nothing (nothing is recorded)."""

    def shutdown(self) -> None:
        """Do nothing: the endpoint is not the run's to stop."""


class ExternalChatEngine(ExternalEndpoint):
    """The rollout model of a mode ``bench`` run whose ``model.external_model`` is enabled (upstream's ExternalModel).

    It evaluates an OpenAI-compatible endpoint: :meth:`chat` sends each
    conversation to ``/chat/completions`` and returns the reply texts as
    :class:`~trinity.common.models.engine.Completion` objects without the
    endpoint's token ids (its tokenizer is not ours): one placeholder prompt
    token, no response token, the endpoint's token counts in ``info["usage"]``.
    :meth:`generate` sends a raw prompt as one user message, as upstream does.
    Token-level calls, weight loading and training are refused with a line
    saying why. Runs as a Ray actor that takes no device.
    """

    def __init__(self, *, name: str, endpoint: ExternalPlan, max_response_tokens: int, timeout_s: float = 600.0
                 ) -> None:
        super().__init__(name, endpoint)
        self.max_response_tokens = max_response_tokens
        self.timeout_s = timeout_s
        self._client: Any = None

    @staticmethod
    def plan_kwargs(engine: Any, *, seed: int = 0, verify_checksums: bool = False) -> dict[str, Any]:
        """Return the constructor keyword arguments for an engine group's plan (``EnginePlan``)."""
        return {"name": engine.name, "endpoint": engine.external, "max_response_tokens": engine.max_response_tokens}

    def _openai(self) -> Any:
        if self._client is None:
            import openai

            api = self.describe()["openai_api"]
            self._client = openai.OpenAI(base_url=api["base_url"], api_key=api["api_key"], timeout=self.timeout_s,
                                         max_retries=2)
        return self._client

    def chat(self, conversations: Sequence[Sequence[Mapping[str, Any]]], params: SamplingParams
             ) -> list[list[Completion]]:
        """Return ``params.n`` replies of the endpoint for each conversation (text only, no token ids)."""
        return [self._ask([dict(m) for m in conversation], params) for conversation in conversations]

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Completion]]:
        """Return ``params.n`` replies for each prompt, each sent as one user message (as upstream)."""
        return [self._ask([{"role": "user", "content": prompt}], params) for prompt in prompts]

    def _ask(self, messages: list[dict[str, Any]], params: SamplingParams) -> list[Completion]:
        import openai
        import torch

        request: dict[str, Any] = {
            "model": self.endpoint.model_name, "messages": messages, "n": params.n,
            "temperature": params.temperature, "top_p": params.top_p,
            "max_completion_tokens": params.max_tokens or self.max_response_tokens,
        }
        if params.stop:
            request["stop"] = list(params.stop)
        if params.seed is not None:
            request["seed"] = params.seed
        try:
            reply = self._openai().chat.completions.create(**request)
        except openai.OpenAIError as exc:
            url = os.environ.get(self.endpoint.base_url_env, "")
            raise RuntimeError(f"external model {self.endpoint.model_name!r} at {url}: {type(exc).__name__}: "
                               f"{exc}") from None
        usage = reply.usage.model_dump() if reply.usage is not None else {}
        # the endpoint's token ids are not ours: one placeholder prompt token (an experience needs a prompt), no
        # response tokens; the endpoint's own counts are in info["usage"]
        placeholder, empty = torch.zeros(1, dtype=torch.long), torch.zeros(0, dtype=torch.long)
        return [
            Completion(prompt_tokens=placeholder, response_tokens=empty, logprobs=torch.zeros(0),
                       text=choice.message.content or "",
                       finish_reason="length" if choice.finish_reason == "length" else "stop",
                       model_version=0, info={"usage": usage, "external_model": self.endpoint.model_name})
            for choice in reply.choices
        ]

    def _no_tokens(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"the rollout model is the external endpoint {self.endpoint.model_name!r}: it answers chat requests "
            "only (no token ids, log-probs or weights); use a workflow that calls chat, or evaluate a local model"
        )

    generate_tokens = score_tokens = load_checkpoint_weights = load_state_dict = receive_weights = _no_tokens
    init_weight_sync = _no_tokens

    def weight_sync_ranks(self) -> int:
        """Return 0: nothing of the run's weights reaches an external endpoint."""
        return 0

    def state_dict_checksum(self) -> str:
        """Return the endpoint's name: its weights are not the run's to read."""
        return f"external:{self.endpoint.model_name}"
