"""Experiences and their padded, next-token-aligned batches."""

from __future__ import annotations

import pytest
import torch

from trinity.common.experience import Experience, make_batch


def test_batch_alignment_by_hand() -> None:
    first = Experience(tokens=[5, 6, 7, 8, 9], prompt_length=3, logprobs=[-0.5, -1.5], reward=1.0, group_id="g")
    second = Experience(tokens=[5, 6, 4], prompt_length=2, logprobs=[-2.0], action_mask=[0], reward=0.0, group_id="g")
    third = Experience(tokens=[1, 2], prompt_length=1, reward=None, group_id="h")
    batch = make_batch([first, second, third], pad_token_id=0)
    assert batch.input_ids.tolist() == [[5, 6, 7, 8, 9], [5, 6, 4, 0, 0], [1, 2, 0, 0, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]]
    # position t predicts input_ids[t + 1]: the first response token 8 sits at index 3, predicted at t = 2
    assert batch.response_mask.tolist() == [[0, 0, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0]]
    assert batch.old_logprobs[0].tolist() == [0.0, 0.0, -0.5, -1.5]
    assert batch.old_logprobs[1].tolist() == [0.0, -2.0, 0.0, 0.0]
    assert batch.rewards.tolist() == [1.0, 0.0, 0.0]
    assert batch.group_index.tolist() == [0, 0, 1]


def test_round_trip_through_dict() -> None:
    exp = Experience(tokens=[1, 2, 3], prompt_length=1, logprobs=[-0.1, -0.2], reward=0.5, info={"text": "hi"})
    again = Experience.from_dict(exp.to_dict())
    assert torch.equal(again.tokens, exp.tokens) and torch.allclose(again.logprobs, exp.logprobs)
    assert again.reward == 0.5 and again.info == {"text": "hi"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tokens": [1, 2], "prompt_length": 3}, "prompt_length 3 outside 1..2"),
        ({"tokens": [1, 2, 3], "prompt_length": 1, "logprobs": [0.0]}, "logprobs has shape (1,), expected (2,)"),
    ],
)
def test_malformed_experiences_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Experience(**kwargs)
