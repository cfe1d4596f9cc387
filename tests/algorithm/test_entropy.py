"""Entropy from logits and the entropy bonus, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from trinity.algorithm.entropy import ENTROPY_LOSS_FNS, entropy_bonus, entropy_from_logits, entropy_loss

# p = [1/4, 3/4]: H = -(1/4 ln 1/4 + 3/4 ln 3/4)
H_QUARTER = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))


def test_uniform_and_two_point_distributions() -> None:
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, math.log(3.0), -1e9, -1e9]], dtype=torch.float64)
    assert entropy_from_logits(logits).tolist() == pytest.approx([math.log(4.0), H_QUARTER])


def test_large_logits_do_not_overflow() -> None:
    logits = torch.tensor([1000.0, 1000.0 + math.log(3.0)])
    result = entropy_from_logits(logits)
    assert result.item() == pytest.approx(H_QUARTER, abs=1e-4)


def test_minus_infinity_logits_add_nothing_and_keep_gradients_finite() -> None:
    logits = torch.tensor([[0.0, 0.0, -math.inf]], requires_grad=True)
    result = entropy_from_logits(logits)
    assert result.item() == pytest.approx(math.log(2.0))
    result.sum().backward()
    assert logits.grad is not None
    assert bool(torch.isfinite(logits.grad).all())


def test_gradient_hand_values() -> None:
    # dH/dz_i = -p_i (log p_i + H)
    logits = torch.tensor([0.0, math.log(3.0)], dtype=torch.float64, requires_grad=True)
    entropy_from_logits(logits).backward()
    expected = [-p * (math.log(p) + H_QUARTER) for p in (0.25, 0.75)]
    assert logits.grad is not None
    assert logits.grad.tolist() == pytest.approx(expected)


def test_shape_is_logits_without_vocabulary() -> None:
    assert entropy_from_logits(torch.zeros(2, 5, 7)).shape == (2, 5)


def test_half_precision_is_computed_in_float32() -> None:
    result = entropy_from_logits(torch.zeros(3, 8, dtype=torch.bfloat16))
    assert result.dtype == torch.float32
    assert result.tolist() == pytest.approx([math.log(8.0)] * 3)


def test_scalar_logits_are_rejected() -> None:
    with pytest.raises(ValueError, match="vocabulary"):
        entropy_from_logits(torch.tensor(1.0))


def test_bonus_is_coef_times_aggregated_entropy_over_response_tokens() -> None:
    nan = float("nan")
    entropy = torch.tensor([[1.0, 2.0, nan], [3.0, nan, nan]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    bonus, metrics = entropy_bonus(entropy, mask, coef=0.01)
    # token-mean of 1, 2, 3 is 2
    assert bonus.item() == pytest.approx(0.02)
    assert metrics["entropy"] == pytest.approx(2.0)
    bonus_seq, _ = entropy_bonus(entropy, mask, coef=1.0, aggregation="seq-mean-token-mean")
    assert bonus_seq.item() == pytest.approx((1.5 + 3.0) / 2)


def test_entropy_terms_by_name() -> None:
    assert ENTROPY_LOSS_FNS.names() == ["default", "mix", "none"]
    entropy = torch.tensor([[1.0, 2.0], [3.0, 5.0]])
    mask = torch.ones(2, 2)
    term, metrics = entropy_loss("default", entropy, mask, entropy_coef=0.1)
    assert term.item() == pytest.approx(0.1 * 2.75)
    assert metrics["entropy"] == pytest.approx(2.75)
    # mix: only non-expert rows count (row 1 is expert data): mean of 1 and 2
    mixed, metrics = entropy_loss("mix", entropy, mask, entropy_coef=0.1, expert_mask=torch.tensor([False, True]))
    assert mixed.item() == pytest.approx(0.1 * 1.5)
    none, metrics = entropy_loss("none", entropy, mask, entropy_coef=0.1)
    assert none.item() == 0.0 and metrics == {}
    with pytest.raises(ValueError, match="needs expert_mask"):
        entropy_loss("mix", entropy, mask, entropy_coef=0.1)
