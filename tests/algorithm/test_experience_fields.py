"""The experience fields the algorithms read: teacher log-probs, expert rows, episodes (additions to Batch)."""

from __future__ import annotations

import pytest
import torch

from trinity.common.experience import Batch, Experience, make_batch


def test_make_batch_aligns_teacher_logprobs_and_marks_expert_rows_and_episodes() -> None:
    student = Experience(
        tokens=[5, 6, 7, 8], prompt_length=2, logprobs=[-1.0, -2.0], teacher_logprobs=[-0.5, -0.25], group_id="g"
    )
    expert = Experience(tokens=[5, 9, 9], prompt_length=2, group_id="g", run_id=1, is_expert=True)
    step = Experience(tokens=[1, 2], prompt_length=1, group_id="g", run_id=1)
    alone = Experience(tokens=[1, 2], prompt_length=1)
    batch = make_batch([student, expert, step, alone], pad_token_id=0)
    # position t predicts token t + 1: the response of row 0 sits at positions 1, 2
    assert batch.teacher_logprobs.tolist() == [[0.0, -0.5, -0.25], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0] * 3]
    assert batch.expert_mask.tolist() == [False, True, False, False]
    assert batch.run_index.tolist() == [0, 1, 1, 2]  # rows 1 and 2 are steps of one episode (group g, run 1)


def test_a_batch_built_without_the_new_fields_gets_neutral_ones() -> None:
    batch = make_batch([Experience(tokens=[1, 2, 3], prompt_length=1)] * 2, pad_token_id=0)
    old_style = Batch(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, response_mask=batch.response_mask,
        old_logprobs=batch.old_logprobs, advantages=batch.advantages, returns=batch.returns, rewards=batch.rewards,
        group_index=batch.group_index,
    )  # fmt: skip
    assert torch.equal(old_style.teacher_logprobs, torch.zeros(2, 2))
    assert old_style.expert_mask.tolist() == [False, False] and old_style.run_index.tolist() == [0, 1]
    moved = old_style.to("cpu")
    assert torch.equal(moved.run_index, old_style.run_index)


def test_the_new_experience_fields_round_trip_and_are_checked() -> None:
    exp = Experience(tokens=[1, 2, 3], prompt_length=1, teacher_logprobs=[-0.1, -0.2], is_expert=True)
    again = Experience.from_dict(exp.to_dict())
    assert again.teacher_logprobs is not None and torch.allclose(again.teacher_logprobs, torch.tensor([-0.1, -0.2]))
    assert again.is_expert
    legacy = {k: v for k, v in exp.to_dict().items() if k not in ("teacher_logprobs", "is_expert")}
    assert Experience.from_dict(legacy).teacher_logprobs is None
    with pytest.raises(ValueError, match="teacher_logprobs has shape"):
        Experience(tokens=[1, 2, 3], prompt_length=1, teacher_logprobs=[-0.1])
