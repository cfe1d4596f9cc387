"""An in-process engine that answers from a script, with the tiny model's tokenizer (workflow tests)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from trinity.common.models.engine import Completion, SamplingParams


class ScriptedEngine:
    """Replies ``reply(prompt_text)`` (ending with EOS) to every prompt; log-prob -0.5 per token."""

    def __init__(self, tokenizer: Any, reply: Callable[[str], str], version: int = 0) -> None:
        self.tokenizer = tokenizer
        self.reply = reply
        self.version = version
        self.calls: list[tuple[str, int, SamplingParams]] = []

    def model_version(self) -> int:
        return self.version

    def _complete(self, prompt: list[int]) -> Completion:
        text = self.reply(self.tokenizer.decode(prompt))
        ids = [*self.tokenizer(text, add_special_tokens=False)["input_ids"], self.tokenizer.eos_token_id]
        return Completion(
            prompt_tokens=torch.tensor(prompt), response_tokens=torch.tensor(ids),
            logprobs=torch.full((len(ids),), -0.5), text=text, finish_reason="stop", model_version=self.version,
        )

    def generate_tokens(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        self.calls.append(("generate_tokens", len(prompts), params))
        return [[self._complete(list(p)) for _ in range(params.n)] for p in prompts]

    def chat(
        self, conversations: Sequence[Sequence[Mapping[str, str]]], params: SamplingParams
    ) -> list[list[Completion]]:
        self.calls.append(("chat", len(conversations), params))
        prompts = []
        for conv in conversations:
            text = self.tokenizer.apply_chat_template([dict(m) for m in conv], add_generation_prompt=True,
                                                      tokenize=False)
            prompts.append(list(self.tokenizer(text, add_special_tokens=False)["input_ids"]))
        return [[self._complete(p) for _ in range(params.n)] for p in prompts]

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Completion]]:
        ids = [list(self.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
        return self.generate_tokens(ids, params)


def cycling(replies: Sequence[str]) -> Callable[[str], str]:
    """Return a reply function giving ``replies`` in turn, round and round."""
    state = {"i": 0}

    def reply(_prompt: str) -> str:
        text = replies[state["i"] % len(replies)]
        state["i"] += 1
        return text

    return reply
