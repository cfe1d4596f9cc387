"""Advantage functions, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from tests.algorithm.helpers import assert_values
from trinity.algorithm.advantage import ADVANTAGE_FNS, AdvantageInputs, compute_advantages
from trinity.algorithm.options import UnknownOptionError
from trinity.algorithm.returns import discounted_returns, outcome_token_rewards
from trinity.common.experience import Experience, make_batch
from trinity.common.registry import UnknownNameError

NAN = float("nan")
EPS = 1e-6  # GRPO's default epsilon


def outcome_inputs(rewards: list[float], groups: list[int], width: int = 3) -> AdvantageInputs:
    """Rows whose response mask is [0, 1, ..., 1] (one prompt position, then response tokens)."""
    mask = torch.ones(len(rewards), width)
    mask[:, 0] = 0
    return AdvantageInputs(rewards=torch.tensor(rewards), response_mask=mask, group_index=torch.tensor(groups))


def per_row(advantages: torch.Tensor) -> list[float]:
    """The advantage of each row at its first response position (index 1)."""
    return advantages[:, 1].tolist()


def test_registry_names() -> None:
    assert ADVANTAGE_FNS.names() == ["gae", "grpo", "opmd", "ppo", "reinforce_plus_plus", "rloo"]
    assert ADVANTAGE_FNS.get("ppo") is ADVANTAGE_FNS.get("gae")


# ---------------------------------------------------------------- GRPO


def test_grpo_hand_values_with_interleaved_groups() -> None:
    # group 7: rewards 1, 3, 5 (mean 3, sample std sqrt((4 + 0 + 4) / 2) = 2)
    # group 2: 4, 4 (equal rewards); group 9: 5 alone
    inputs = outcome_inputs([1.0, 4.0, 3.0, 5.0, 5.0, 4.0], [7, 2, 7, 9, 7, 2])
    advantages, returns = ADVANTAGE_FNS.get("grpo")(inputs)
    expected = [-2 / (2 + EPS), 0.0, 0.0, 0.0, 2 / (2 + EPS), 0.0]
    assert per_row(advantages) == pytest.approx(expected)
    assert torch.equal(advantages[:, 0], torch.zeros(6))  # the prompt position stays 0
    assert torch.equal(advantages[:, 1], advantages[:, 2])  # one value over the whole response
    assert torch.equal(returns, advantages)


def test_grpo_without_std_normalisation_only_centres() -> None:
    inputs = outcome_inputs([1.0, 3.0, 5.0], [0, 0, 0])
    advantages, _ = compute_advantages("grpo", inputs, std_normalize=False)
    assert per_row(advantages) == pytest.approx([-2.0, 0.0, 2.0])


def test_grpo_single_member_and_equal_rewards_give_zero_not_nan() -> None:
    inputs = outcome_inputs([3.0, 1.0, 1.0, 1.0], [0, 1, 1, 1])
    advantages, returns = compute_advantages("grpo", inputs)
    assert bool(torch.isfinite(advantages).all())
    assert torch.equal(advantages, torch.zeros_like(advantages))
    assert torch.equal(returns, torch.zeros_like(returns))


def test_grpo_masked_padding_never_contributes() -> None:
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    inputs = AdvantageInputs(rewards=torch.tensor([1.0, 0.0]), response_mask=mask, group_index=torch.tensor([0, 0]))
    advantages, _ = compute_advantages("grpo", inputs)
    # mean 0.5, sample std sqrt(0.5): +-0.5 / sqrt(0.5)
    a = 0.5 / (math.sqrt(0.5) + EPS)
    assert_values(advantages, [[0.0, a, a, 0.0], [0.0, 0.0, -a, 0.0]])


def test_grpo_needs_group_index() -> None:
    inputs = AdvantageInputs(rewards=torch.tensor([1.0]), response_mask=torch.ones(1, 2))
    with pytest.raises(ValueError, match="group_index"):
        compute_advantages("grpo", inputs)


def test_grpo_from_a_real_batch() -> None:
    batch = make_batch(
        [
            Experience(tokens=torch.tensor([1, 2, 3, 4]), prompt_length=2, reward=1.0, group_id="a"),
            Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=2, reward=0.0, group_id="a"),
        ],
        pad_token_id=0,
    )
    advantages, _ = compute_advantages("grpo", AdvantageInputs.from_batch(batch))
    a = 0.5 / (math.sqrt(0.5) + EPS)
    # the response of row 0 is predicted at positions 1, 2; of row 1 at position 1
    assert_values(advantages, [[0.0, a, a], [0.0, -a, 0.0]])


# ---------------------------------------------------------------- RLOO


def test_rloo_leave_one_out_baseline() -> None:
    # group 0: 1, 2, 6 -> baselines (2 + 6) / 2 = 4, (1 + 6) / 2 = 3.5, (1 + 2) / 2 = 1.5; group 1 alone
    inputs = outcome_inputs([1.0, 2.0, 9.0, 6.0], [0, 0, 1, 0])
    advantages, returns = compute_advantages("rloo", inputs)
    assert per_row(advantages) == pytest.approx([-3.0, -1.5, 0.0, 4.5])
    assert torch.equal(returns, advantages)


def test_rloo_equal_rewards_give_zero() -> None:
    advantages, _ = compute_advantages("rloo", outcome_inputs([2.0, 2.0], [5, 5]))
    assert torch.equal(advantages, torch.zeros_like(advantages))


# ---------------------------------------------------------------- OPMD


def test_opmd_mean_baseline_and_single_member() -> None:
    # group 0: 1, 2, 6 with mean 3; group 1: 5 alone -> baseline 0 (as Trinity-RFT), advantage 5
    inputs = outcome_inputs([1.0, 2.0, 5.0, 6.0], [0, 0, 1, 0])
    advantages, returns = compute_advantages("opmd", inputs)
    assert per_row(advantages) == pytest.approx([-2.0, -1.0, 5.0, 3.0])
    assert torch.equal(returns, advantages)


def test_opmd_logavgexp_baseline() -> None:
    # rewards 0, ln 3 with tau 1: baseline ln((e^0 + e^ln3) / 2) = ln 2
    inputs = outcome_inputs([0.0, math.log(3.0)], [0, 0])
    advantages, _ = compute_advantages("opmd", inputs, baseline="logavgexp", tau=1.0)
    assert per_row(advantages) == pytest.approx([-math.log(2.0), math.log(3.0) - math.log(2.0)])


def test_opmd_logavgexp_tau_scales_and_is_stable() -> None:
    # rewards 0, 2 ln 3 with tau 2: r / tau = 0, ln 3 -> baseline 2 ln 2
    inputs = outcome_inputs([0.0, 2 * math.log(3.0)], [0, 0])
    advantages, _ = compute_advantages("opmd", inputs, baseline="logavgexp", tau=2.0)
    assert per_row(advantages) == pytest.approx([-2 * math.log(2.0), 2 * math.log(3.0) - 2 * math.log(2.0)])
    big = outcome_inputs([1000.0, 1000.0 + math.log(3.0)], [0, 0])
    advantages, _ = compute_advantages("opmd", big, baseline="logavgexp", tau=1.0)
    assert per_row(advantages) == pytest.approx([-math.log(2.0), math.log(3.0) - math.log(2.0)], abs=1e-4)


def test_opmd_rejects_an_unknown_baseline() -> None:
    with pytest.raises(ValueError, match="baseline"):
        compute_advantages("opmd", outcome_inputs([1.0], [0]), baseline="median")


# ---------------------------------------------------------------- REINFORCE++


def test_reinforce_plus_plus_discounts_then_whitens() -> None:
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
    inputs = AdvantageInputs(rewards=torch.tensor([1.0, 2.0]), response_mask=mask)
    advantages, returns = compute_advantages("reinforce_plus_plus", inputs, gamma=0.5)
    # row 0: reward 1 at position 3 -> returns 0.25, 0.5, 1; row 1: reward 2 at position 2 -> returns 1, 2
    assert_values(returns, [[0.0, 0.25, 0.5, 1.0], [0.0, 1.0, 2.0, 0.0]])
    # kept returns 0.25, 0.5, 1, 1, 2: mean 0.95; squared deviations .49 + .2025 + .0025 + .0025 + 1.1025 = 1.8;
    # population variance 1.8 / 5 = 0.36 -> std 0.6
    assert_values(
        advantages,
        [[0.0, -0.7 / 0.6, -0.45 / 0.6, 0.05 / 0.6], [0.0, 0.05 / 0.6, 1.05 / 0.6, 0.0]],
        atol=1e-5,
    )


def test_reinforce_plus_plus_kl_penalty_per_token() -> None:
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
    kl = torch.tensor([[NAN, 1.0, 1.0, 1.0], [NAN, 1.0, 1.0, NAN]])  # NaN only where masked
    inputs = AdvantageInputs(rewards=torch.tensor([1.0, 2.0]), response_mask=mask, kl=kl)
    _, returns = compute_advantages("reinforce_plus_plus", inputs, gamma=1.0, kl_coef=0.1)
    # token rewards row 0: [-, -0.1, -0.1, 0.9] -> returns 0.7, 0.8, 0.9; row 1: [-, -0.1, 1.9, -] -> 1.8, 1.9
    assert_values(returns, [[0.0, 0.7, 0.8, 0.9], [0.0, 1.8, 1.9, 0.0]])


def test_kl_coef_without_kl_is_an_error() -> None:
    inputs = AdvantageInputs(rewards=torch.tensor([1.0]), response_mask=torch.ones(1, 2))
    with pytest.raises(ValueError, match="needs kl"):
        compute_advantages("reinforce_plus_plus", inputs, kl_coef=0.1)


def test_given_token_level_rewards_replace_the_outcome_reward() -> None:
    inputs = AdvantageInputs(
        rewards=torch.tensor([100.0]),
        response_mask=torch.tensor([[1.0, 1.0, 1.0]]),
        token_level_rewards=torch.tensor([[1.0, 0.0, 2.0]]),
    )
    _, returns = compute_advantages("reinforce_plus_plus", inputs, gamma=0.5)
    # G2 = 2, G1 = 0 + 0.5 * 2 = 1, G0 = 1 + 0.5 * 1 = 1.5
    assert_values(returns, [[1.5, 1.0, 2.0]])


def test_discounted_returns_skip_masked_positions_of_a_multi_turn_row() -> None:
    # position 1 is an environment token: not an action, so it is neither rewarded nor discounted over
    token_rewards = torch.tensor([[0.0, 7.0, 1.0]])
    returns = discounted_returns(token_rewards, torch.tensor([[1.0, 0.0, 1.0]]), gamma=0.5)
    assert_values(returns, [[0.5, 0.0, 1.0]])


def test_outcome_token_rewards_sit_on_the_last_response_token() -> None:
    mask = torch.tensor([[0.0, 1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    result = outcome_token_rewards(torch.tensor([3.0, 4.0]), mask)
    assert_values(result, [[0.0, 0.0, 0.0, 3.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]])


# ---------------------------------------------------------------- PPO / GAE


def gae_inputs(values: list[float], mask: list[float], reward: float = 1.0) -> AdvantageInputs:
    return AdvantageInputs(
        rewards=torch.tensor([reward], dtype=torch.float64),
        response_mask=torch.tensor([mask]),
        values=torch.tensor([values], dtype=torch.float64),
    )


def test_gae_hand_values() -> None:
    inputs = gae_inputs([9.0, 0.5, 0.6, 0.7], [0.0, 1.0, 1.0, 1.0])
    advantages, returns = compute_advantages("gae", inputs, gamma=0.9, lam=0.8, whiten=False)
    # t3: delta = 1 - 0.7 = 0.3                      A3 = 0.3
    # t2: delta = 0.9 * 0.7 - 0.6 = 0.03             A2 = 0.03 + 0.72 * 0.3 = 0.246
    # t1: delta = 0.9 * 0.6 - 0.5 = 0.04             A1 = 0.04 + 0.72 * 0.246 = 0.21712
    assert_values(advantages, [[0.0, 0.21712, 0.246, 0.3]])
    assert_values(returns, [[0.0, 0.21712 + 0.5, 0.246 + 0.6, 0.3 + 0.7]])


def test_gae_with_gamma_and_lambda_one_is_return_minus_value() -> None:
    inputs = gae_inputs([0.0, 0.5, 0.6, 0.7], [0.0, 1.0, 1.0, 1.0])
    advantages, returns = compute_advantages("ppo", inputs, gamma=1.0, lam=1.0, whiten=False)
    assert_values(advantages, [[0.0, 0.5, 0.4, 0.3]])
    assert_values(returns, [[0.0, 1.0, 1.0, 1.0]])


def test_gae_skips_masked_positions_and_their_nan_values() -> None:
    inputs = gae_inputs([0.5, NAN, 0.7], [1.0, 0.0, 1.0])
    advantages, _ = compute_advantages("gae", inputs, gamma=0.9, lam=0.8, whiten=False)
    # t2: A = 1 - 0.7 = 0.3; t0: delta = 0.9 * 0.7 - 0.5 = 0.13, A = 0.13 + 0.72 * 0.3 = 0.346
    assert_values(advantages, [[0.346, 0.0, 0.3]])


def test_gae_whitening_centres_and_scales_response_tokens_only() -> None:
    inputs = gae_inputs([9.0, 0.5, 0.6, 0.7], [0.0, 1.0, 1.0, 1.0])
    advantages, returns = compute_advantages("gae", inputs, gamma=0.9, lam=0.8, whiten=True)
    raw = [0.21712, 0.246, 0.3]
    mean = sum(raw) / 3
    std = math.sqrt(sum((a - mean) ** 2 for a in raw) / 3)
    assert_values(advantages, [[0.0, *[(a - mean) / std for a in raw]]], atol=1e-5)
    assert_values(returns, [[0.0, 0.71712, 0.846, 1.0]])  # returns are never whitened


def test_gae_kl_penalty_changes_the_token_rewards() -> None:
    inputs = AdvantageInputs(
        rewards=torch.tensor([1.0]),
        response_mask=torch.tensor([[1.0, 1.0]]),
        values=torch.zeros(1, 2),
        kl=torch.tensor([[2.0, 1.0]]),
    )
    advantages, _ = compute_advantages("gae", inputs, gamma=1.0, lam=1.0, whiten=False, kl_coef=0.5)
    # token rewards [-1, 1 - 0.5] = [-1, 0.5]; values 0 -> advantages are the returns -0.5, 0.5
    assert_values(advantages, [[-0.5, 0.5]])


def test_gae_needs_values_and_valid_parameters() -> None:
    inputs = AdvantageInputs(rewards=torch.tensor([1.0]), response_mask=torch.ones(1, 2))
    with pytest.raises(ValueError, match="needs values"):
        compute_advantages("gae", inputs)
    with pytest.raises(ValueError, match="lam"):
        compute_advantages("gae", gae_inputs([0.0, 0.0], [1.0, 1.0]), lam=1.5)


# ---------------------------------------------------------------- conventions and errors


def test_inputs_validate_shapes() -> None:
    with pytest.raises(ValueError, match="rewards must be"):
        AdvantageInputs(rewards=torch.zeros(2, 1), response_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match="response_mask must be"):
        AdvantageInputs(rewards=torch.zeros(2), response_mask=torch.ones(3, 3))
    with pytest.raises(ValueError, match="values must have the shape"):
        AdvantageInputs(rewards=torch.zeros(2), response_mask=torch.ones(2, 3), values=torch.ones(2, 4))


def test_unknown_name_is_one_line_with_a_suggestion() -> None:
    with pytest.raises(UnknownNameError) as err:
        compute_advantages("gpro", outcome_inputs([1.0], [0]))
    assert "\n" not in str(err.value)
    assert "did you mean 'grpo'" in str(err.value)


def test_unknown_option_is_one_line_with_a_suggestion() -> None:
    with pytest.raises(UnknownOptionError) as err:
        compute_advantages("grpo", outcome_inputs([1.0], [0]), std_normalise=False)
    message = str(err.value)
    assert "\n" not in message
    assert "did you mean 'std_normalize'" in message


def test_outputs_carry_no_gradient() -> None:
    values = torch.zeros(1, 2, requires_grad=True)
    inputs = AdvantageInputs(rewards=torch.tensor([1.0]), response_mask=torch.ones(1, 2), values=values)
    advantages, returns = compute_advantages("gae", inputs)
    assert not advantages.requires_grad
    assert not returns.requires_grad
