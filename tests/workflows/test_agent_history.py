"""Experiences from recorded API requests: one per call, or joined per episode where the calls continue."""

from __future__ import annotations

import torch

from trinity.common.models.openai_api.history import RequestRecord
from trinity.common.workflows.history import episode_experiences, experiences_from_records


def turn(prompt: list[int], response: list[int], version: int = 3, name: str = "") -> RequestRecord:
    return RequestRecord(kind="chat", request_id=name or f"{prompt}", choice=0, prompt_tokens=torch.tensor(prompt),
                         response_tokens=torch.tensor(response),
                         logprobs=-torch.arange(1, len(response) + 1, dtype=torch.float32) / 10,
                         model_version=version, finish_reason="stop", text="x")


def test_one_experience_per_call_keeps_the_tokens_and_logprobs() -> None:
    records = [turn([1, 2, 3], [4, 5]), turn([9], [8, 7, 6])]
    first, second = experiences_from_records(records)
    assert first.tokens.tolist() == [1, 2, 3, 4, 5] and first.prompt_length == 3
    assert torch.equal(first.logprobs, records[0].logprobs) and first.action_mask.tolist() == [True, True]
    assert second.tokens.tolist() == [9, 8, 7, 6] and second.model_version == 3


def test_calls_that_continue_each_other_join_and_the_rest_stand_alone() -> None:
    episode_a = [turn([1, 2], [3, 4], version=2), turn([1, 2, 3, 4, 50, 51], [5]), turn([1, 2, 3, 4, 50, 51, 5, 60],
                                                                                        [6, 7])]
    other = turn([1, 2, 3, 9], [10])  # shares a prefix with episode a's first reply, but not all of it
    branch = turn([1, 2, 3, 4, 50, 51], [99])  # a second reply to episode a's second prompt (n > 1)
    joined, alone, forked = episode_experiences([episode_a[0], other, episode_a[1], branch, episode_a[2]])
    assert joined.tokens.tolist() == [1, 2, 3, 4, 50, 51, 5, 60, 6, 7] and joined.prompt_length == 2
    assert joined.action_mask.tolist() == [True, True, False, False, True, False, True, True]
    assert torch.allclose(joined.logprobs, torch.tensor([-0.1, -0.2, 0, 0, -0.1, 0, -0.1, -0.2]))
    assert joined.info["turns"] == 3 and joined.model_version == 2  # the oldest weights that wrote a reply
    assert alone.tokens.tolist() == [1, 2, 3, 9, 10] and alone.info["turns"] == 1
    assert forked.tokens.tolist() == [1, 2, 3, 4, 50, 51, 99] and forked.prompt_length == 6
    # where each later episode departed from the closest one before it
    assert "split_at" not in joined.info and alone.info["split_at"] == 3 and forked.info["split_at"] == 6
