"""Loss aggregation modes and masked statistics, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from trinity.algorithm.aggregation import LOSS_AGGREGATIONS, aggregate
from trinity.algorithm.masked import masked_mean, masked_var, masked_whiten
from trinity.utils.registry import UnknownNameError

NAN = float("nan")
# Row 0 keeps 1, 2, 3; row 1 keeps 4; row 2 keeps nothing. NaNs sit only at masked positions.
VALUES = torch.tensor([[1.0, 2.0, 3.0, NAN], [4.0, NAN, NAN, NAN], [NAN, NAN, NAN, NAN]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 2 + 3 + 4) / 4),  # 2.5: every kept token weighs the same
        ("seq-mean-token-mean", (2.0 + 4.0) / 2),  # row means 2 and 4; the empty row is left out
        ("seq-mean-token-sum", (6.0 + 4.0) / 2),  # row sums 6 and 4; the empty row is left out
        ("seq-mean-token-sum-norm", 10.0 / 4),  # every kept token summed, over the mask width 4 (no row mean)
    ],
)
def test_modes_match_hand_values_and_ignore_masked_nan(mode: str, expected: float) -> None:
    result = aggregate(VALUES, MASK, mode)
    assert result.dim() == 0
    assert result.item() == pytest.approx(expected)


def test_bool_and_float_masks_agree() -> None:
    assert aggregate(VALUES, MASK.bool(), "token-mean").item() == pytest.approx(2.5)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_empty_mask_gives_zero_and_a_zero_gradient(mode: str) -> None:
    values = torch.tensor([[1.0, NAN], [3.0, 4.0]], requires_grad=True)
    result = aggregate(values, torch.zeros(2, 2), mode)
    assert result.item() == 0.0
    result.backward()
    assert values.grad is not None
    assert torch.equal(values.grad, torch.zeros(2, 2))


def test_token_mean_gradient_is_mask_over_count() -> None:
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    aggregate(values, mask, "token-mean").backward()
    assert values.grad is not None
    assert torch.allclose(values.grad, mask / 3)


def test_seq_mean_token_mean_weighs_rows_equally() -> None:
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    aggregate(values, mask, "seq-mean-token-mean").backward()
    assert values.grad is not None
    # Row 0 has 2 tokens, row 1 has 1; each row weighs 1/2.
    assert torch.allclose(values.grad, torch.tensor([[0.25, 0.25, 0.0], [0.0, 0.5, 0.0]]))


def test_registry_holds_upstreams_four_modes() -> None:
    assert LOSS_AGGREGATIONS.names() == [
        "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "token-mean",
    ]  # fmt: skip


def test_sum_norm_divides_by_a_fixed_normalizer() -> None:
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    result = aggregate(values, mask, "seq-mean-token-sum-norm", normalizer=8)
    assert result.item() == pytest.approx((1 + 2 + 5) / 8)
    result.backward()
    assert values.grad is not None
    assert torch.allclose(values.grad, mask / 8)
    with pytest.raises(ValueError, match="normalizer"):
        aggregate(values, mask, "seq-mean-token-sum-norm", normalizer=0)


def test_unknown_mode_is_one_line_with_a_suggestion() -> None:
    with pytest.raises(UnknownNameError) as err:
        aggregate(VALUES, MASK, "token_mean")
    message = str(err.value)
    assert "\n" not in message
    assert "did you mean 'token-mean'" in message


def test_shape_mismatch_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="shape"):
        aggregate(torch.zeros(2, 3), torch.ones(2, 4))


def test_masked_mean_of_nothing_is_zero() -> None:
    assert masked_mean(torch.tensor([NAN, 1.0]), torch.tensor([False, False])).item() == 0.0


def test_masked_var_is_the_population_variance_or_the_sample_one() -> None:
    # kept 1, 2, 3, 6: mean 3, squared deviations 4 + 1 + 0 + 9 = 14, divided by n = 4 (or n - 1 = 3)
    values = torch.tensor([[1.0, 2.0, 99.0], [3.0, 6.0, NAN]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    assert masked_var(values, mask).item() == pytest.approx(14 / 4)
    assert masked_var(values, mask, unbiased=True).item() == pytest.approx(14 / 3)
    assert masked_var(values[:1, :1], mask[:1, :1], unbiased=True).item() == 0.0  # one value: 0, not NaN


def test_masked_whiten_hand_values() -> None:
    # kept 1, 2, 3: mean 2, population variance 2/3
    values = torch.tensor([[1.0, 2.0, 99.0], [3.0, NAN, NAN]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    scale = 1 / math.sqrt(2 / 3 + 1e-8)
    expected = torch.tensor([[-scale, 0.0, 0.0], [scale, 0.0, 0.0]])
    assert torch.allclose(masked_whiten(values, mask), expected)


def test_masked_whiten_of_one_token_or_none_is_finite() -> None:
    one = masked_whiten(torch.tensor([[5.0, NAN]]), torch.tensor([[1, 0]]))
    assert torch.equal(one, torch.zeros(1, 2))  # (5 - 5) / sqrt(0 + eps)
    none = masked_whiten(torch.tensor([[NAN, NAN]]), torch.tensor([[0, 0]]))
    assert torch.equal(none, torch.zeros(1, 2))
