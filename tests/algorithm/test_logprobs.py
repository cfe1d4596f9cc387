"""Next-token log-probabilities, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from tests.algorithm.helpers import assert_values
from trinity.algorithm.logprobs import token_logprobs
from trinity.common.experience import Experience, make_batch

NAN = float("nan")


def _logits() -> torch.Tensor:
    # One row, T = 3, V = 3. logits[:, -1] predicts past the end and must never be read (NaN).
    return torch.tensor([[[0.0, math.log(3.0), 0.0], [1.0, 1.0, 1.0], [NAN, NAN, NAN]]], dtype=torch.float64)


IDS = torch.tensor([[2, 1, 0]])  # token 1 follows position 0, token 0 follows position 1


def test_hand_values_and_alignment() -> None:
    result = token_logprobs(_logits(), IDS)
    # position 0: softmax([1, 3, 1])[1] = 3/5; position 1: uniform 1/3
    assert result.shape == (1, 2)
    assert_values(result, [[math.log(3 / 5), math.log(1 / 3)]])


def test_temperature_divides_the_logits() -> None:
    result = token_logprobs(_logits(), IDS, temperature=2.0)
    # position 0 logits / 2 = [0, ln 3 / 2, 0]: p_1 = sqrt 3 / (2 + sqrt 3)
    root3 = math.sqrt(3.0)
    assert_values(result, [[math.log(root3 / (2 + root3)), math.log(1 / 3)]])


def test_gradient_is_one_hot_minus_softmax() -> None:
    logits = _logits().clone().requires_grad_(True)
    result = token_logprobs(logits, IDS)
    result[0, 1].backward()
    assert logits.grad is not None
    assert logits.grad[0, 1].tolist() == pytest.approx([2 / 3, -1 / 3, -1 / 3])
    assert logits.grad[0, 0].tolist() == [0.0, 0.0, 0.0]


def test_rows_in_chunks_match_hand_values() -> None:
    logits = torch.cat([_logits(), _logits()])
    ids = torch.tensor([[2, 1, 0], [0, 0, 2]])
    result = token_logprobs(logits, ids, chunk_rows=1)
    # row 1: position 0 -> token 0 at 1/5; position 1 -> token 2 at 1/3
    assert_values(result, [[math.log(3 / 5), math.log(1 / 3)], [math.log(1 / 5), math.log(1 / 3)]])


def test_half_precision_logits_give_float32() -> None:
    result = token_logprobs(_logits().to(torch.bfloat16), IDS)
    assert result.dtype == torch.float32
    assert_values(result, [[math.log(3 / 5), math.log(1 / 3)]], atol=2e-2)


def test_matches_the_batch_response_mask_positions() -> None:
    # prompt [5], response [1, 2]: the response tokens sit at [B, T-1] positions 0 and 1
    batch = make_batch([Experience(tokens=torch.tensor([5, 1, 2]), prompt_length=1)], pad_token_id=0)
    logits = torch.full((1, 3, 6), 0.0)
    logits[0, 0, 1] = math.log(5.0)  # p(1 | 5) = 5 / 10
    result = token_logprobs(logits, batch.input_ids)
    assert batch.response_mask.tolist() == [[1.0, 1.0]]
    assert result[0, 0].item() == pytest.approx(math.log(0.5))
    assert result[0, 1].item() == pytest.approx(math.log(1 / 6))


@pytest.mark.parametrize(
    ("logits", "ids", "kwargs", "match"),
    [
        (torch.zeros(1, 3, 4), torch.zeros(1, 2, dtype=torch.long), {}, "expected logits"),
        (torch.zeros(3, 4), torch.zeros(1, 3, dtype=torch.long), {}, "expected logits"),
        (torch.zeros(1, 3, 4), torch.zeros(1, 3, dtype=torch.long), {"temperature": 0.0}, "temperature"),
        (torch.zeros(1, 3, 4), torch.zeros(1, 3, dtype=torch.long), {"chunk_rows": 0}, "chunk_rows"),
    ],
)
def test_bad_input_is_a_value_error(
    logits: torch.Tensor, ids: torch.Tensor, kwargs: dict[str, float], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        token_logprobs(logits, ids, **kwargs)  # type: ignore[arg-type]
