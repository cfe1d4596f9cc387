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


def test_the_batch_equals_a_row_by_row_fill_on_random_experiences() -> None:
    generator = torch.Generator().manual_seed(7)
    experiences = []
    for i in range(40):
        prompt = int(torch.randint(1, 9, (1,), generator=generator))
        response = int(torch.randint(0, 7, (1,), generator=generator))
        experiences.append(Experience(
            tokens=torch.randint(3, 50, (prompt + response,), generator=generator), prompt_length=prompt,
            logprobs=-torch.rand(response, generator=generator),
            advantages=torch.randn(response, generator=generator) if i % 3 else None,  # rows without: zeros
            action_mask=torch.rand(response, generator=generator) > 0.3, reward=float(i), group_id=f"g{i // 4}",
        ))
    batch = make_batch(experiences, pad_token_id=1)
    width = max(len(e.tokens) for e in experiences)
    for i, e in enumerate(experiences):
        length, start = len(e.tokens), e.prompt_length - 1
        assert batch.input_ids[i, :length].tolist() == e.tokens.tolist()
        assert (batch.input_ids[i, length:] == 1).all() and int(batch.attention_mask[i].sum()) == length
        for name, value in (("response_mask", e.action_mask), ("old_logprobs", e.logprobs),
                            ("advantages", e.advantages)):
            row = getattr(batch, name)[i]
            expected = torch.zeros(width - 1)
            if value is not None:
                expected[start : start + e.response_length] = value.float()
            assert torch.equal(row, expected), (i, name)
    assert batch.group_index.tolist() == [i // 4 for i in range(40)]
