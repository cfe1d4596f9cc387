"""KL estimators and the two ways KL is applied, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from tests.algorithm.helpers import assert_values
from trinity.algorithm.kl import (
    KL_FNS,
    AdaptiveKLController,
    compute_kl,
    kl_loss,
    kl_reward_penalty,
    sequence_mean_kl,
)
from trinity.utils.registry import UnknownNameError

LOGP = torch.tensor([-1.0, -2.0], dtype=torch.float64)
REF = torch.tensor([-1.5, -1.0], dtype=torch.float64)
# logp - ref = [0.5, -1.0]; ref - logp = [-0.5, 1.0]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("k1", [0.5, -1.0]),
        ("k2", [0.5 * 0.5**2, 0.5 * 1.0**2]),
        ("k3", [math.exp(-0.5) + 0.5 - 1, math.exp(1.0) - 1.0 - 1]),
        ("low_var_kl", [math.exp(-0.5) + 0.5 - 1, math.exp(1.0) - 1.0 - 1]),
        ("abs", [0.5, 1.0]),
        ("corrected_k3", [math.exp(-0.5) + 0.5 - 1, math.exp(1.0) - 1.0 - 1]),  # k3 without old log-probs
        ("none", [0.0, 0.0]),
    ],
)
def test_estimators_hand_values(name: str, expected: list[float]) -> None:
    result = compute_kl(LOGP, REF, name)
    assert result.tolist() == pytest.approx(expected)


def test_registry_holds_upstreams_estimators() -> None:
    assert KL_FNS.names() == ["abs", "corrected_k3", "k1", "k2", "k3", "low_var_kl", "none"]


def test_corrected_k3_weights_k3_by_the_clamped_behaviour_ratio() -> None:
    # ratios pi / pi_old: exp(-1 - -1.5) = e^0.5, exp(-2 - -1) = e^-1, and exp(-1 - -4) = e^3 clamped to 2
    logp = torch.tensor([-1.0, -2.0, -1.0], dtype=torch.float64)
    ref = torch.tensor([-1.5, -1.0, -1.5], dtype=torch.float64)
    old = torch.tensor([-1.5, -1.0, -4.0], dtype=torch.float64)
    k3 = [math.exp(-0.5) + 0.5 - 1, math.exp(1.0) - 1.0 - 1, math.exp(-0.5) + 0.5 - 1]
    result = compute_kl(logp, ref, "corrected_k3", old)
    assert result.tolist() == pytest.approx([math.exp(0.5) * k3[0], math.exp(-1.0) * k3[1], 2.0 * k3[2]])
    assert compute_kl(logp, ref, "k3", old).tolist() == pytest.approx(k3)  # the others ignore old log-probs


def test_k3_is_never_negative_and_zero_at_equality() -> None:
    logp = torch.tensor([-3.0, -0.1, -1.0, -7.0])
    ref = torch.tensor([-0.2, -2.5, -1.0, -7.0])
    result = compute_kl(logp, ref, "k3")
    assert bool((result >= 0).all())
    assert result[2:].tolist() == [0.0, 0.0]


def test_low_var_kl_clamps_where_k3_does_not() -> None:
    logp = torch.tensor([-30.0, 0.0], dtype=torch.float64)
    ref = torch.tensor([0.0, -30.0], dtype=torch.float64)
    # k3 with ref - logp = 30: e^30 - 31, huge; with -30: e^-30 + 30 - 1 = 29.0000...
    k3 = compute_kl(logp, ref, "k3")
    assert k3[0].item() == pytest.approx(math.exp(30) - 31)
    assert k3[1].item() == pytest.approx(29.0)
    assert compute_kl(logp, ref, "low_var_kl").tolist() == [10.0, 10.0]


def test_reward_penalty_subtracts_coef_kl_at_response_tokens_only() -> None:
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    logp = torch.tensor([[float("nan"), -1.0, -2.0]])  # position 0 is prompt: never read
    ref = torch.tensor([[0.0, -1.5, -1.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    penalised, metrics = kl_reward_penalty(rewards, logp, ref, mask, coef=0.1, kl_fn="k1")
    # k1 = [-, 0.5, -1.0] -> rewards [0, 0 - 0.05, 1 + 0.1]
    assert_values(penalised, [[0.0, -0.05, 1.1]])
    assert metrics["kl/reward_penalty_kl"] == pytest.approx(-0.25)
    assert metrics["kl/coef"] == pytest.approx(0.1)


def test_batch_kl_is_the_mean_of_row_means_as_upstream() -> None:
    kl = torch.tensor([[1.0, 3.0], [5.0, 99.0], [99.0, 99.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    # row means 2 and 5; the row without tokens (a padding row) is left out; a token mean would give 3
    assert sequence_mean_kl(kl, mask) == pytest.approx(3.5)


def test_adaptive_controller_moves_the_coefficient_towards_the_target() -> None:
    controller = AdaptiveKLController(kl_coef=0.1, target_kl=0.5, horizon=10)
    # kl 1.0: error clip(1.0 / 0.5 - 1, -0.2, 0.2) = 0.2; factor 1 + 0.2 * 5 / 10 = 1.1
    assert controller.update(1.0, batch_size=5) == pytest.approx(0.11)
    # kl 0.45: error -0.1; factor 1 - 0.1 * 5 / 10 = 0.95
    assert controller.update(0.45, batch_size=5) == pytest.approx(0.1045)
    restored = AdaptiveKLController(kl_coef=1.0, target_kl=0.5, horizon=10)
    restored.load_state_dict(controller.state_dict())
    assert restored.coef == pytest.approx(0.1045)
    with pytest.raises(ValueError, match="positive"):
        AdaptiveKLController(kl_coef=0.1, target_kl=0.0, horizon=10)


def test_kl_loss_value_and_gradient() -> None:
    logp = torch.tensor([[-1.0, -2.0, -9.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    term, metrics = kl_loss(logp, ref, mask, coef=0.5, kl_fn="k1", aggregation="token-mean")
    # k1 mean over the two kept tokens: (0.5 - 1.0) / 2 = -0.25; times 0.5
    assert term.item() == pytest.approx(-0.125)
    assert metrics["kl/loss_kl"] == pytest.approx(-0.25)
    term.backward()
    assert logp.grad is not None
    # d(0.5 * mean(logp - ref)) / d logp = 0.5 / 2 at kept tokens
    assert_values(logp.grad, [[0.25, 0.25, 0.0]])


def test_kl_loss_passes_old_logprobs_to_corrected_k3_and_the_normalizer_on() -> None:
    logp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64)
    ref = torch.tensor([[-1.5, -1.0]], dtype=torch.float64)
    old = torch.tensor([[-1.5, -1.0]], dtype=torch.float64)
    mask = torch.ones(1, 2)
    corrected, _ = kl_loss(logp, ref, mask, coef=1.0, kl_fn="corrected_k3", old_logprobs=old)
    k3 = [math.exp(-0.5) + 0.5 - 1, math.exp(1.0) - 2]
    assert corrected.item() == pytest.approx((math.exp(0.5) * k3[0] + math.exp(-1.0) * k3[1]) / 2)
    summed, _ = kl_loss(logp, ref, mask, coef=1.0, kl_fn="k1", aggregation="seq-mean-token-sum-norm", normalizer=4)
    assert summed.item() == pytest.approx((0.5 - 1.0) / 4)


def test_unknown_kl_fn_is_one_line_with_a_suggestion() -> None:
    with pytest.raises(UnknownNameError) as err:
        compute_kl(LOGP, REF, "low_var")
    assert "\n" not in str(err.value)
    assert "did you mean 'low_var_kl'" in str(err.value)


def test_shape_mismatch_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="ref_logprobs"):
        compute_kl(torch.zeros(2, 3), torch.zeros(2, 2), "k2")


def test_low_var_kl_gradient_stays_finite_for_extreme_log_ratios() -> None:
    # ref - logp = 1000: exp overflows unless the log-ratio is clamped first; the clamped result has gradient 0
    logp = torch.tensor([-1000.0, -1.0], requires_grad=True)
    ref = torch.tensor([0.0, -1.5])
    result = compute_kl(logp, ref, "low_var_kl")
    assert result[0].item() == 10.0
    result.sum().backward()
    assert logp.grad is not None
    # second token: d/dlogp (e^(ref - logp) - (ref - logp) - 1) = 1 - e^(ref - logp) = 1 - e^-0.5
    assert logp.grad.tolist() == pytest.approx([0.0, 1 - math.exp(-0.5)])
