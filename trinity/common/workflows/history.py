"""Experiences from an engine's recorded OpenAI API requests (agent workflows).

An agent talks to its engine through an ``openai`` client; the engine records
each completion it served (:class:`~trinity.common.models.openai_api.history.RequestRecord`).
Two ways to train on them:

* **one experience per turn** (:func:`experiences_from_records`): prompt and
  response tokens exactly as sampled, the response's log-probs, every
  response token trained on. Step-wise algorithms and per-turn rewards use these.
* **one experience per episode** (:func:`episode_experiences`): turns whose
  prompt begins with the previous turn's prompt and response, token for token,
  are joined into one sequence; the model's replies are trained on
  (``action_mask`` 1, their log-probs) and what came between them (tool results,
  the user's next message, the chat template's glue) is context (mask 0). A
  turn whose prompt does not continue the previous one (the template rewrote
  history, or the reply's text re-tokenises differently) starts a new
  experience, so nothing is trained on tokens the model did not sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from trinity.common.experience import Experience
from trinity.common.models.openai_api.history import RequestRecord


def _info(record: RequestRecord) -> dict[str, Any]:
    info: dict[str, Any] = {"response": record.text, "finish_reason": record.finish_reason,
                            "request_id": record.request_id}
    if record.tool_calls:
        info["tool_calls"] = len(record.tool_calls)
    if record.tool_call_error is not None:
        info["tool_call_error"] = record.tool_call_error
    if record.reasoning is not None:
        info["reasoning_content"] = record.reasoning
    return info


def experience_from_record(record: RequestRecord) -> Experience:
    """Return the experience of one recorded completion (reward unset)."""
    prompt, response = record.prompt_tokens.long(), record.response_tokens.long()
    return Experience(
        tokens=torch.cat([prompt, response]),
        prompt_length=len(prompt),
        logprobs=record.logprobs.float(),
        action_mask=torch.ones(len(response), dtype=torch.bool),
        model_version=record.model_version,
        info=_info(record),
    )


def experiences_from_records(records: Sequence[RequestRecord]) -> list[Experience]:
    """Return one experience per recorded completion, in order (rewards unset)."""
    return [experience_from_record(r) for r in records]


def _continues(tokens: torch.Tensor, record: RequestRecord) -> bool:
    prompt = record.prompt_tokens
    return len(prompt) >= len(tokens) and bool(torch.equal(prompt[: len(tokens)].long(), tokens))


def _shared_prefix(tokens: torch.Tensor, prompt: torch.Tensor) -> int:
    """Return how many leading tokens ``tokens`` and ``prompt`` share."""
    length = min(len(tokens), len(prompt))
    differs = (tokens[:length].long() != prompt[:length].long()).nonzero()
    return int(differs[0]) if len(differs) else length


def episode_experiences(records: Sequence[RequestRecord]) -> list[Experience]:
    """Join turns that continue each other token for token into one experience each (see the module docstring).

    Each record joins the longest episode whose tokens its prompt extends,
    else starts one; with ``n > 1`` choices, each choice continues its own
    episode. An episode's ``info`` holds ``turns`` and the last turn's reply;
    one started while others existed also holds ``split_at``: the tokens its
    first prompt shares with the closest of them (where it departed).
    """
    episodes: list[dict[str, Any]] = []
    for record in records:
        response = record.response_tokens.long()
        matches = [e for e in episodes if _continues(e["tokens"], record)]
        if matches:
            episode = max(matches, key=lambda e: len(e["tokens"]))
        else:
            episode = {"tokens": record.prompt_tokens.long(), "prompt_length": len(record.prompt_tokens),
                       "logprobs": [], "mask": [], "turns": 0, "version": record.model_version}
            if episodes:
                episode["split_at"] = max(_shared_prefix(e["tokens"], record.prompt_tokens) for e in episodes)
            episodes.append(episode)
        glue = record.prompt_tokens.long()[len(episode["tokens"]):]
        episode["logprobs"] += [torch.zeros(len(glue)), record.logprobs.float()]
        episode["mask"] += [torch.zeros(len(glue), dtype=torch.bool), torch.ones(len(response), dtype=torch.bool)]
        episode["tokens"] = torch.cat([episode["tokens"], glue, response])
        episode["turns"] += 1
        episode["version"] = min(episode["version"], record.model_version)
        episode["last"] = record
    out = []
    for episode in episodes:
        info = _info(episode["last"])
        info["turns"] = episode["turns"]
        if "split_at" in episode:
            info["split_at"] = episode["split_at"]
        out.append(Experience(
            tokens=episode["tokens"], prompt_length=episode["prompt_length"],
            logprobs=torch.cat(episode["logprobs"]), action_mask=torch.cat(episode["mask"]),
            model_version=episode["version"], info=info,
        ))
    return out
