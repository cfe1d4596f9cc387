"""Multi-turn rollouts: the model talks with an environment until it is done.

:class:`MultiTurnWorkflow` runs ``repeat_times`` episodes of an
:class:`Environment` side by side (one batched engine call per turn). Each
episode is one :class:`~trinity.common.experience.Experience` whose tokens are
exactly what the model saw and wrote::

    [chat prompt] [reply 1] [env glue + observation 1 + generation prompt] [reply 2] ...

Replies have ``action_mask`` 1 and the engine's log-probs; environment tokens
have ``action_mask`` 0 and log-prob 0. Every turn is generated from the
accumulated token ids (``generate_tokens``), never from re-tokenised text, so
the trainer scores the very context the policy sampled from.

The environment's tokens come from the tokenizer's chat template: the turn
``assistant: <placeholder>, user: <observation>`` is rendered with a
generation prompt and the text after the placeholder is tokenised (its
leading EOS dropped when the reply already ended with EOS).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from trinity.common.experience import Experience
from trinity.common.models.client import RolloutModel
from trinity.common.models.engine import SamplingParams
from trinity.common.workflows.base import Task, Workflow, WorkflowError

_PLACEHOLDER = "\u2063TRINITY-ASSISTANT-REPLY\u2063"


@dataclass
class EnvStep:
    """What an environment answers to one reply."""

    #: The next user message; None ends the episode.
    observation: str | None
    #: Reward of this step (summed over the episode).
    reward: float = 0.0
    #: Whether the episode is over.
    done: bool = False


class Environment:
    """One episode of a multi-turn task; subclass it."""

    def reset(self) -> list[dict[str, str]]:
        """Return the opening conversation (the model answers it first)."""
        raise NotImplementedError

    def step(self, reply: str) -> EnvStep:
        """Return the environment's answer to the model's ``reply``."""
        raise NotImplementedError

    def finish(self) -> float:
        """Return a final reward added when the episode ends (after the last step or the turn limit)."""
        return 0.0

    def metrics(self) -> dict[str, Any]:
        """Return JSON-serialisable facts about the episode for the experience's info."""
        return {}


def chat_prompt_ids(tokenizer: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    """Return the token ids of ``messages`` under the chat template, with the generation prompt."""
    text = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def env_token_ids(
    tokenizer: Any, history: Sequence[dict[str, str]], observation: str, reply_ended_with_eos: bool
) -> list[int]:
    """Return the ids following a reply: the end of the assistant turn, the user turn, the generation prompt.

    ``history`` is the conversation before the reply. Raises WorkflowError when
    the chat template does not render the reply verbatim.
    """
    messages = [*history, {"role": "assistant", "content": _PLACEHOLDER}, {"role": "user", "content": observation}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    if _PLACEHOLDER not in text:
        raise WorkflowError("the chat template does not render assistant messages verbatim; cannot build env tokens")
    after = text.split(_PLACEHOLDER, 1)[1]
    eos = tokenizer.eos_token or ""
    if reply_ended_with_eos and eos and after.startswith(eos):
        after = after[len(eos) :]
    return list(tokenizer(after, add_special_tokens=False)["input_ids"])


@dataclass
class _Episode:
    env: Environment
    messages: list[dict[str, str]]
    tokens: list[int]
    prompt_length: int
    mask: list[bool] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reward: float = 0.0
    turns: int = 0
    done: bool = False
    stop: str = ""
    model_version: int = 0

    def add(self, ids: Sequence[int], generated: bool, logprobs: Sequence[float] | None = None) -> None:
        self.tokens.extend(int(i) for i in ids)
        self.mask.extend([generated] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))


class MultiTurnWorkflow(Workflow):
    """Episodes of an environment; subclasses implement :meth:`make_env`.

    Workflow args: ``max_turns`` (replies per episode), ``max_total_tokens``
    (prompt + all turns; an episode stops before exceeding it).
    """

    def __init__(self, sampling: SamplingParams | None = None, *, max_turns: int = 4, max_total_tokens: int = 1024):
        super().__init__(sampling)
        if max_turns < 1 or max_total_tokens < 2:
            raise WorkflowError(
                f"max_turns must be >= 1 and max_total_tokens >= 2, got {max_turns}, {max_total_tokens}"
            )
        self.max_turns = max_turns
        self.max_total_tokens = max_total_tokens

    def make_env(self, task: Task, run_id: int) -> Environment:
        """Return a fresh environment for episode ``run_id`` of ``task``."""
        raise NotImplementedError

    def run(self, engine: RolloutModel, task: Task) -> list[Experience]:
        """Play ``task.repeat_times`` episodes side by side and return one experience per episode."""
        tokenizer = engine.tokenizer
        eos_id = tokenizer.eos_token_id
        episodes = []
        for run_id in range(task.repeat_times):
            env = self.make_env(task, run_id)
            messages = list(env.reset())
            ids = chat_prompt_ids(tokenizer, messages)
            episodes.append(_Episode(env=env, messages=messages, tokens=ids, prompt_length=len(ids)))
        params = self.sampling_for(task, n=1)
        for _turn in range(self.max_turns):
            for e in episodes:
                if not e.done and len(e.tokens) >= self.max_total_tokens:
                    e.done, e.stop = True, "context"
            active = [e for e in episodes if not e.done]
            if not active:
                break
            budget = min(self.max_total_tokens - len(e.tokens) for e in active)
            turn_params = dataclasses.replace(params, max_tokens=max(1, min(params.max_tokens, budget)))
            outputs = engine.generate_tokens([e.tokens for e in active], turn_params)
            for episode, completions in zip(active, outputs, strict=True):
                self._advance(episode, completions[0], tokenizer, eos_id)
        experiences = []
        for run_id, e in enumerate(episodes):
            e.reward += float(e.env.finish())
            experiences.append(
                Experience(
                    tokens=torch.tensor(e.tokens, dtype=torch.long),
                    prompt_length=e.prompt_length,
                    logprobs=torch.tensor(e.logprobs, dtype=torch.float32),
                    action_mask=torch.tensor(e.mask, dtype=torch.bool),
                    reward=e.reward,
                    group_id=task.group_id,
                    run_id=run_id,
                    model_version=e.model_version,
                    info={
                        "task_set": task.task_set,
                        "task_index": task.index,
                        "turns": e.turns,
                        "stop": e.stop or "turns",
                        "messages": e.messages,
                        **e.env.metrics(),
                    },
                )
            )
        return experiences

    def _advance(self, episode: _Episode, completion: Any, tokenizer: Any, eos_id: int | None) -> None:
        """Append one reply, let the environment answer, append its tokens or end the episode."""
        if len(completion.prompt_tokens) != len(episode.tokens):
            raise WorkflowError(
                f"the engine truncated a {len(episode.tokens)}-token multi-turn context to "
                f"{len(completion.prompt_tokens)}; lower max_total_tokens below the engine's max_prompt_tokens"
            )
        reply = completion.response_tokens.tolist()
        episode.add(reply, generated=True, logprobs=completion.logprobs.tolist())
        episode.model_version = completion.model_version
        episode.turns += 1
        history = list(episode.messages)
        episode.messages.append({"role": "assistant", "content": completion.text})
        step = episode.env.step(completion.text)
        episode.reward += float(step.reward)
        if step.done or step.observation is None:
            episode.done, episode.stop = True, "env"
            return
        if episode.turns >= self.max_turns:
            episode.done, episode.stop = True, "turns"
            return
        ended_with_eos = bool(reply) and eos_id is not None and reply[-1] == eos_id
        glue = env_token_ids(tokenizer, history, step.observation, ended_with_eos)
        if len(episode.tokens) + len(glue) >= self.max_total_tokens:
            episode.done, episode.stop = True, "context"
            return
        episode.add(glue, generated=False)
        episode.messages.append({"role": "user", "content": step.observation})
