"""Advantage functions, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from tests.algorithm.helpers import assert_values
from trinity.algorithm.advantage import ADVANTAGE_FNS, AdvantageInputs, compute_advantages
from trinity.algorithm.options import UnknownOptionError
from trinity.algorithm.returns import discounted_returns, generalized_advantage_estimation, outcome_token_rewards
from trinity.common.experience import Experience, make_batch
from trinity.utils.registry import UnknownNameError

NAN = float("nan")
EPS = 1e-6  # GRPO's default epsilon


def outcome_inputs(rewards: list[float], groups: list[int], width: int = 3, **extra: torch.Tensor) -> AdvantageInputs:
    """Rows whose response mask is [0, 1, ..., 1] (one prompt position, then response tokens)."""
    mask = torch.ones(len(rewards), width)
    mask[:, 0] = 0
    return AdvantageInputs(
        rewards=torch.tensor(rewards), response_mask=mask, group_index=torch.tensor(groups), **extra
    )


def per_row(advantages: torch.Tensor) -> list[float]:
    """The advantage of each row at its first response position (index 1)."""
    return advantages[:, 1].tolist()


def test_registry_names() -> None:
    assert ADVANTAGE_FNS.names() == [
        "asymre", "asymre_verl", "clipb", "clipv", "gae", "grpo", "grpo_verl", "jsd", "on_policy_distill", "opmd",
        "opmd_verl", "ppo", "rec", "reinforce", "reinforce_plus_plus", "reinforceplusplus", "remax", "rloo",
        "step_wise_grpo",
    ]  # fmt: skip
    assert ADVANTAGE_FNS.get("ppo") is ADVANTAGE_FNS.get("gae")
    assert ADVANTAGE_FNS.get("reinforceplusplus") is ADVANTAGE_FNS.get("reinforce_plus_plus")


# ---------------------------------------------------------------- GRPO


def test_grpo_hand_values_with_interleaved_groups() -> None:
    # group 7: rewards 1, 3, 5 (mean 3, sample std sqrt((4 + 0 + 4) / 2) = 2)
    # group 2: 4, 4 (equal rewards -> 0); group 9: 5 alone -> mean 0, std 1 (upstream) -> 5 / (1 + eps)
    inputs = outcome_inputs([1.0, 4.0, 3.0, 5.0, 5.0, 4.0], [7, 2, 7, 9, 7, 2])
    advantages, returns = ADVANTAGE_FNS.get("grpo")(inputs)
    expected = [-2 / (2 + EPS), 0.0, 0.0, 5 / (1 + EPS), 2 / (2 + EPS), 0.0]
    assert per_row(advantages) == pytest.approx(expected)
    assert torch.equal(advantages[:, 0], torch.zeros(6))  # the prompt position stays 0
    assert torch.equal(advantages[:, 1], advantages[:, 2])  # one value over the whole response
    assert torch.equal(returns, advantages)


def test_grpo_without_std_normalisation_only_centres() -> None:
    inputs = outcome_inputs([1.0, 3.0, 5.0], [0, 0, 0])
    advantages, _ = compute_advantages("grpo", inputs, std_normalize=False)
    assert per_row(advantages) == pytest.approx([-2.0, 0.0, 2.0])


def test_grpo_single_member_keeps_its_reward_and_equal_rewards_give_zero() -> None:
    inputs = outcome_inputs([3.0, 1.0, 1.0, 1.0], [0, 1, 1, 1])
    advantages, _ = compute_advantages("grpo", inputs)
    assert bool(torch.isfinite(advantages).all())
    assert per_row(advantages) == pytest.approx([3 / (1 + EPS), 0.0, 0.0, 0.0])


def test_grpo_std_threshold_zeroes_skipped_groups() -> None:
    # group 0: 1, 1 (std 0 <= 0.1: skipped); group 1: 2, 0 (mean 1, std sqrt 2); group 2: alone (skipped)
    inputs = outcome_inputs([1.0, 1.0, 2.0, 0.0, 5.0], [0, 0, 1, 1, 2])
    advantages, _ = compute_advantages("grpo", inputs, std_threshold=0.1)
    a = 1 / (math.sqrt(2.0) + EPS)
    assert per_row(advantages) == pytest.approx([0.0, 0.0, a, -a, 0.0])


def test_grpo_batch_level_std_keeps_group_means() -> None:
    # group means 2 (1, 3) and 4 (2, 6); batch rewards 1, 3, 2, 6: mean 3, squared deviations 4 + 0 + 1 + 9 = 14,
    # sample std sqrt(14 / 3) = 2.160247
    inputs = outcome_inputs([1.0, 3.0, 2.0, 6.0], [0, 0, 1, 1])
    advantages, _ = compute_advantages("grpo", inputs, std_cal_level="batch")
    s = 2.160246899469287 + EPS
    assert per_row(advantages) == pytest.approx([-1 / s, 1 / s, -2 / s, 2 / s])


def test_grpo_rank_penalty_changes_the_group_statistics_only() -> None:
    # mean old log-probs: row 0 -1, row 1 (-2 - 4) / 2 = -3, row 2 -2 (its masked 99 is not read)
    # ranks by mean log-prob / 3: row 1 0, row 2 1/3, row 0 2/3; penalty 0.3:
    # scored rewards 1 * (1 - 0.2) = 0.8, 1 * 1 = 1, 0 -> mean 0.6, sample std sqrt(0.28) = 0.5291503
    # numerators keep the raw reward (as upstream): (1 - 0.6), (1 - 0.6), (0 - 0.6)
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    old = torch.tensor([[-1.0, -1.0], [-2.0, -4.0], [-2.0, 99.0]])
    inputs = AdvantageInputs(
        rewards=torch.tensor([1.0, 1.0, 0.0]), response_mask=mask, group_index=torch.tensor([0, 0, 0]),
        old_logprobs=old,
    )
    advantages, _ = compute_advantages("grpo", inputs, rank_penalty=0.3)
    s = 0.5291502622129182 + EPS
    assert advantages[:, 0].tolist() == pytest.approx([0.4 / s, 0.4 / s, -0.6 / s])


def test_grpo_masked_padding_never_contributes() -> None:
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    inputs = AdvantageInputs(rewards=torch.tensor([1.0, 0.0]), response_mask=mask, group_index=torch.tensor([0, 0]))
    advantages, _ = compute_advantages("grpo", inputs)
    # mean 0.5, sample std sqrt(0.5): +-0.5 / sqrt(0.5)
    a = 0.5 / (math.sqrt(0.5) + EPS)
    assert_values(advantages, [[0.0, a, a, 0.0], [0.0, 0.0, -a, 0.0]])


@pytest.mark.parametrize(("options", "match"), [({}, "group_index"), ({"std_cal_level": "task"}, "std_cal_level")])
def test_grpo_errors(options: dict[str, str], match: str) -> None:
    groups = {} if not options else {"group_index": torch.tensor([0])}
    inputs = AdvantageInputs(rewards=torch.tensor([1.0]), response_mask=torch.ones(1, 2), **groups)
    with pytest.raises(ValueError, match=match):
        compute_advantages("grpo", inputs, **options)


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


def test_grpo_verl_scores_rows_by_their_penalised_token_rewards() -> None:
    # token rewards (a KL penalty already applied) sum to 1 and -1: mean 0, sample std sqrt(2)
    inputs = AdvantageInputs(
        rewards=torch.tensor([100.0, 100.0]),
        response_mask=torch.ones(2, 2),
        group_index=torch.tensor([0, 0]),
        token_level_rewards=torch.tensor([[0.5, 0.5], [0.0, -1.0]]),
    )
    a = 1 / (math.sqrt(2.0) + EPS)
    for name in ("grpo_verl", "grpo"):
        advantages, _ = compute_advantages(name, inputs)
        assert_values(advantages, [[a, a], [-a, -a]])
    with pytest.raises(UnknownOptionError, match="std_threshold"):
        compute_advantages("grpo_verl", inputs, std_threshold=0.1)


# ---------------------------------------------------------------- multi-step GRPO


def step_inputs() -> AdvantageInputs:
    # group 0: episode A = rows 0, 1 (last reward 1; row 0's 99 is not its score), episode B = row 2 (reward 0)
    # group 1: episode C = rows 3, 4 (last reward 2), alone in its group
    return outcome_inputs(
        [99.0, 1.0, 0.0, -7.0, 2.0], [0, 0, 0, 1, 1], width=2, run_index=torch.tensor([0, 0, 1, 2, 2])
    )


def test_step_wise_grpo_broadcasts_each_episode_score_to_its_steps() -> None:
    advantages, returns = compute_advantages("step_wise_grpo", step_inputs())
    # group 0: last rewards 1, 0 -> mean 0.5, std sqrt(0.5); group 1: one episode -> mean 0, std 1
    a = 0.5 / (math.sqrt(0.5) + EPS)
    assert per_row(advantages) == pytest.approx([a, a, -a, 2 / (1 + EPS), 2 / (1 + EPS)])
    assert torch.equal(returns, advantages)


def test_step_wise_grpo_step_norm_and_threshold() -> None:
    a = 0.5 / (math.sqrt(0.5) + EPS)
    normed, _ = compute_advantages("step_wise_grpo", step_inputs(), enable_step_norm=True)
    assert per_row(normed) == pytest.approx([a / 2, a / 2, -a, 1 / (1 + EPS), 1 / (1 + EPS)])
    skipped, _ = compute_advantages("step_wise_grpo", step_inputs(), std_threshold=0.01)
    assert per_row(skipped) == pytest.approx([a, a, -a, 0.0, 0.0])  # a group of one episode is skipped


def test_step_wise_grpo_episodes_from_a_real_batch() -> None:
    def step(run: int, reward: float) -> Experience:
        return Experience(tokens=torch.tensor([1, 2, 3]), prompt_length=2, reward=reward, group_id="t", run_id=run)

    batch = make_batch([step(0, 5.0), step(0, 1.0), step(1, 0.0)], pad_token_id=0)
    assert batch.run_index.tolist() == [0, 0, 1]
    advantages, _ = compute_advantages("step_wise_grpo", AdvantageInputs.from_batch(batch))
    a = 0.5 / (math.sqrt(0.5) + EPS)
    assert advantages[:, 1].tolist() == pytest.approx([a, a, -a])


# ---------------------------------------------------------------- baselines


def test_reinforce_is_the_raw_reward() -> None:
    advantages, returns = compute_advantages("reinforce", outcome_inputs([2.0, -1.0], [0, 0]))
    assert per_row(advantages) == pytest.approx([2.0, -1.0])
    assert torch.equal(returns, advantages)


def test_rloo_leave_one_out_baseline() -> None:
    # group 0: 1, 2, 6 -> baselines (2 + 6) / 2 = 4, (1 + 6) / 2 = 3.5, (1 + 2) / 2 = 1.5; group 1 alone keeps 9
    inputs = outcome_inputs([1.0, 2.0, 9.0, 6.0], [0, 0, 1, 0])
    advantages, returns = compute_advantages("rloo", inputs)
    assert per_row(advantages) == pytest.approx([-3.0, -1.5, 9.0, 4.5])
    assert torch.equal(returns, advantages)


def test_rloo_equal_rewards_give_zero() -> None:
    advantages, _ = compute_advantages("rloo", outcome_inputs([2.0, 2.0], [5, 5]))
    assert torch.equal(advantages, torch.zeros_like(advantages))


def test_opmd_mean_baseline_and_single_member() -> None:
    # group 0: 1, 2, 6 with mean 3; group 1: 5 alone -> baseline 0 (as upstream), advantage 5
    inputs = outcome_inputs([1.0, 2.0, 5.0, 6.0], [0, 0, 1, 0])
    advantages, returns = compute_advantages("opmd", inputs)
    assert per_row(advantages) == pytest.approx([-2.0, -1.0, 5.0, 3.0])
    assert torch.equal(returns, advantages)


def test_opmd_logavgexp_baseline() -> None:
    # rewards 0, ln 3 with tau 1: baseline ln((e^0 + e^ln3) / 2) = ln 2
    inputs = outcome_inputs([0.0, math.log(3.0)], [0, 0])
    advantages, _ = compute_advantages("opmd", inputs, opmd_baseline="logavgexp", tau=1.0)
    assert per_row(advantages) == pytest.approx([-math.log(2.0), math.log(3.0) - math.log(2.0)])


def test_opmd_logavgexp_tau_scales_and_is_stable() -> None:
    # rewards 0, 2 ln 3 with tau 2: r / tau = 0, ln 3 -> baseline 2 ln 2
    inputs = outcome_inputs([0.0, 2 * math.log(3.0)], [0, 0])
    advantages, _ = compute_advantages("opmd_verl", inputs, opmd_baseline="logavgexp", tau=2.0)
    assert per_row(advantages) == pytest.approx([-2 * math.log(2.0), 2 * math.log(3.0) - 2 * math.log(2.0)])
    big = outcome_inputs([1000.0, 1000.0 + math.log(3.0)], [0, 0])
    advantages, _ = compute_advantages("opmd", big, opmd_baseline="logavgexp", tau=1.0)
    assert per_row(advantages) == pytest.approx([-math.log(2.0), math.log(3.0) - math.log(2.0)], abs=1e-4)


def test_opmd_rejects_an_unknown_baseline() -> None:
    with pytest.raises(ValueError, match="opmd_baseline"):
        compute_advantages("opmd", outcome_inputs([1.0], [0]), opmd_baseline="median")


def test_asymre_shifted_mean_baseline() -> None:
    # group 0: 1, 0, 2 -> mean 1, baseline 1 - 0.1 = 0.9; group 1: 5 alone -> baseline 0
    inputs = outcome_inputs([1.0, 0.0, 2.0, 5.0], [0, 0, 0, 1])
    advantages, _ = compute_advantages("asymre", inputs)
    assert per_row(advantages) == pytest.approx([0.1, -0.9, 1.1, 5.0])
    shifted, _ = compute_advantages("asymre", inputs, baseline_shift=0.5)
    assert per_row(shifted) == pytest.approx([-0.5, -1.5, 0.5, 5.0])


def test_rec_centred_and_optionally_std_normalised() -> None:
    # rewards 1, 0, 0, 0: mean 0.25; population variance (0.5625 + 3 * 0.0625) / 4 = 0.1875
    inputs = outcome_inputs([1.0, 0.0, 0.0, 0.0, 3.0], [0, 0, 0, 0, 1])
    plain, _ = compute_advantages("rec", inputs)
    assert per_row(plain) == pytest.approx([0.75, -0.25, -0.25, -0.25, 3.0])  # a group of one: mean 0
    normed, _ = compute_advantages("rec", inputs, std_normalize=True)
    s = math.sqrt(0.1875) + EPS
    assert per_row(normed) == pytest.approx([0.75 / s, -0.25 / s, -0.25 / s, -0.25 / s, 3.0 / (1 + EPS)])


def test_rec_balance_drops_surplus_negatives() -> None:
    # 1 at-or-above-mean row, 3 below: 2 random negatives dropped (0); kept 1 and 0 -> mean 0.5
    inputs = outcome_inputs([1.0, 0.0, 0.0, 0.0], [0, 0, 0, 0])
    torch.manual_seed(0)
    advantages, _ = compute_advantages("rec", inputs, drop="balance")
    values = per_row(advantages)
    assert values[0] == pytest.approx(0.5)
    assert sorted(values[1:]) == pytest.approx([-0.5, 0.0, 0.0])
    with pytest.raises(ValueError, match="drop"):
        compute_advantages("rec", inputs, drop="all")


# ---------------------------------------------------------------- discounted: REINFORCE++, ReMax, GAE


def test_reinforce_plus_plus_discounts_then_whitens_with_the_sample_variance() -> None:
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
    inputs = AdvantageInputs(rewards=torch.tensor([1.0, 2.0]), response_mask=mask)
    advantages, returns = compute_advantages("reinforceplusplus", inputs, gamma=0.5)
    # row 0: reward 1 at position 3 -> returns 0.25, 0.5, 1; row 1: reward 2 at position 2 -> returns 1, 2
    assert_values(returns, [[0.0, 0.25, 0.5, 1.0], [0.0, 1.0, 2.0, 0.0]])
    # kept returns 0.25, 0.5, 1, 1, 2: mean 0.95; squared deviations .49 + .2025 + .0025 + .0025 + 1.1025 = 1.8;
    # sample variance 1.8 / 4 = 0.45 -> std 0.6708204
    s = 0.6708203932499369
    assert_values(
        advantages, [[0.0, -0.7 / s, -0.45 / s, 0.05 / s], [0.0, 0.05 / s, 1.05 / s, 0.0]], atol=1e-5
    )


def test_given_token_level_rewards_replace_the_outcome_reward() -> None:
    inputs = AdvantageInputs(
        rewards=torch.tensor([100.0]),
        response_mask=torch.tensor([[1.0, 1.0, 1.0]]),
        token_level_rewards=torch.tensor([[1.0, 0.0, 2.0]]),
    )
    _, returns = compute_advantages("reinforce_plus_plus", inputs, gamma=0.5)
    # G2 = 2, G1 = 0 + 0.5 * 2 = 1, G0 = 1 + 0.5 * 1 = 1.5
    assert_values(returns, [[1.5, 1.0, 2.0]])


def test_remax_subtracts_the_greedy_baseline() -> None:
    inputs = AdvantageInputs(
        rewards=torch.tensor([2.0, 0.0]),
        response_mask=torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]]),
        reward_baselines=torch.tensor([0.5, 1.0]),
    )
    advantages, returns = compute_advantages("remax", inputs)
    assert_values(returns, [[0.0, 2.0, 2.0], [0.0, 0.0, 0.0]])
    assert_values(advantages, [[0.0, 1.5, 1.5], [0.0, -1.0, 0.0]])
    with pytest.raises(ValueError, match="reward_baselines"):
        compute_advantages("remax", outcome_inputs([1.0], [0]))


def test_discounted_returns_skip_masked_positions_of_a_multi_turn_row() -> None:
    # position 1 is an environment token: not an action, so it is neither rewarded nor discounted over
    token_rewards = torch.tensor([[0.0, 7.0, 1.0]])
    returns = discounted_returns(token_rewards, torch.tensor([[1.0, 0.0, 1.0]]), gamma=0.5)
    assert_values(returns, [[0.5, 0.0, 1.0]])


def test_outcome_token_rewards_sit_on_the_last_response_token() -> None:
    mask = torch.tensor([[0.0, 1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    result = outcome_token_rewards(torch.tensor([3.0, 4.0]), mask)
    assert_values(result, [[0.0, 0.0, 0.0, 3.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]])


def gae_inputs(values: list[float], mask: list[float], reward: float = 1.0) -> AdvantageInputs:
    return AdvantageInputs(
        rewards=torch.tensor([reward], dtype=torch.float64),
        response_mask=torch.tensor([mask]),
        values=torch.tensor([values], dtype=torch.float64),
    )


def test_gae_hand_values() -> None:
    inputs = gae_inputs([9.0, 0.5, 0.6, 0.7], [0.0, 1.0, 1.0, 1.0])
    assert inputs.values is not None
    advantages, returns = generalized_advantage_estimation(
        inputs.token_rewards(), inputs.values, inputs.response_mask, 0.9, 0.8
    )
    # t3: delta = 1 - 0.7 = 0.3                      A3 = 0.3
    # t2: delta = 0.9 * 0.7 - 0.6 = 0.03             A2 = 0.03 + 0.72 * 0.3 = 0.246
    # t1: delta = 0.9 * 0.6 - 0.5 = 0.04             A1 = 0.04 + 0.72 * 0.246 = 0.21712
    assert_values(advantages, [[0.0, 0.21712, 0.246, 0.3]])
    assert_values(returns, [[0.0, 0.21712 + 0.5, 0.246 + 0.6, 0.3 + 0.7]])


def test_gae_with_gamma_and_lambda_one_is_return_minus_value() -> None:
    inputs = gae_inputs([0.0, 0.5, 0.6, 0.7], [0.0, 1.0, 1.0, 1.0])
    assert inputs.values is not None
    advantages, returns = generalized_advantage_estimation(
        inputs.token_rewards(), inputs.values, inputs.response_mask, 1.0, 1.0
    )
    assert_values(advantages, [[0.0, 0.5, 0.4, 0.3]])
    assert_values(returns, [[0.0, 1.0, 1.0, 1.0]])


def test_gae_skips_masked_positions_and_their_nan_values() -> None:
    inputs = gae_inputs([0.5, NAN, 0.7], [1.0, 0.0, 1.0])
    assert inputs.values is not None
    advantages, _ = generalized_advantage_estimation(
        inputs.token_rewards(), inputs.values, inputs.response_mask, 0.9, 0.8
    )
    # t2: A = 1 - 0.7 = 0.3; t0: delta = 0.9 * 0.7 - 0.5 = 0.13, A = 0.13 + 0.72 * 0.3 = 0.346
    assert_values(advantages, [[0.346, 0.0, 0.3]])


def test_ppo_advantages_are_whitened_with_the_sample_variance_and_returns_are_not() -> None:
    inputs = gae_inputs([9.0, 0.5, 0.6, 0.7], [0.0, 1.0, 1.0, 1.0])
    advantages, returns = compute_advantages("ppo", inputs, gamma=0.9, lam=0.8)
    raw = [0.21712, 0.246, 0.3]  # as in test_gae_hand_values
    mean = sum(raw) / 3
    std = math.sqrt(sum((a - mean) ** 2 for a in raw) / 2)
    assert_values(advantages, [[0.0, *[(a - mean) / std for a in raw]]], atol=1e-5)
    assert_values(returns, [[0.0, 0.71712, 0.846, 1.0]])


def test_ppo_advantages_follow_penalised_token_rewards() -> None:
    inputs = AdvantageInputs(
        rewards=torch.tensor([1.0]),
        response_mask=torch.tensor([[1.0, 1.0]]),
        values=torch.zeros(1, 2),
        token_level_rewards=torch.tensor([[-1.0, 0.5]]),
    )
    _, returns = compute_advantages("ppo", inputs)
    # values 0, gamma = lam = 1: returns are the reward-to-go -0.5, 0.5
    assert_values(returns, [[-0.5, 0.5]])


def test_gae_needs_values_and_valid_parameters() -> None:
    inputs = AdvantageInputs(rewards=torch.tensor([1.0]), response_mask=torch.ones(1, 2))
    with pytest.raises(ValueError, match="needs values"):
        compute_advantages("gae", inputs)
    with pytest.raises(ValueError, match="lam"):
        compute_advantages("gae", gae_inputs([0.0, 0.0], [1.0, 1.0]), lam=1.5)


# ---------------------------------------------------------------- distillation


def distill_inputs() -> AdvantageInputs:
    return AdvantageInputs(
        rewards=torch.tensor([0.0]),
        response_mask=torch.tensor([[1.0, 1.0, 0.0]]),
        old_logprobs=torch.tensor([[-1.0, -0.5, NAN]]),
        teacher_logprobs=torch.tensor([[-2.0, -1.0, NAN]]),
    )


def test_on_policy_distill_is_scaled_teacher_minus_student() -> None:
    advantages, returns = compute_advantages("on_policy_distill", distill_inputs(), kl_coef=2.0)
    # 2 * (-2 - -1) = -2, 2 * (-1 - -0.5) = -1, masked 0
    assert_values(advantages, [[-2.0, -1.0, 0.0]])
    assert torch.equal(returns, advantages)


def test_jsd_hand_values() -> None:
    # token 0: s = -1, t = -2; m = ln(0.5 e^-1 + 0.5 e^-2) = -1.3798855; JSD = 0.5 (t - m) + 0.5 (s - m) = -0.1201145
    # token 1: s = -0.5, t = -1 is token 0 halved: with temperature 2 token 0 becomes it, JSD -0.0309298
    advantages, _ = compute_advantages("jsd", distill_inputs())
    assert advantages[0, 0].item() == pytest.approx(0.12011450695827763)
    assert advantages[0, 2].item() == 0.0
    halved, _ = compute_advantages("jsd", distill_inputs(), temperature=2.0)
    assert halved[0, 0].item() == pytest.approx(advantages[0, 1].item())
    assert halved[0, 0].item() == pytest.approx(0.0309298036201614)
    # lambda 0.25: m = ln(0.75 e^-1 + 0.25 e^-2); JSD = 0.25 (t - m) + 0.75 (s - m) = -0.0779889; kl_coef 3
    weighted, _ = compute_advantages("jsd", distill_inputs(), lambda_coef=0.25, kl_coef=3.0)
    assert weighted[0, 0].item() == pytest.approx(3 * 0.07798893924286987)


def test_jsd_pure_kl_ends() -> None:
    # lambda 0: JSD = s - t; lambda 1: t - s; advantages are minus those
    student_side, _ = compute_advantages("jsd", distill_inputs(), lambda_coef=0.0)
    teacher_side, _ = compute_advantages("jsd", distill_inputs(), lambda_coef=1.0)
    assert_values(student_side, [[-1.0, -0.5, 0.0]])
    assert_values(teacher_side, [[1.0, 0.5, 0.0]])


@pytest.mark.parametrize(
    ("options", "match"), [({"lambda_coef": 1.5}, "lambda_coef"), ({"temperature": 0.0}, "temperature")]
)
def test_jsd_rejects_bad_options(options: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        compute_advantages("jsd", distill_inputs(), **options)


def test_distillation_needs_teacher_logprobs() -> None:
    inputs = AdvantageInputs(rewards=torch.tensor([0.0]), response_mask=torch.ones(1, 2), old_logprobs=torch.ones(1, 2))
    for name in ("on_policy_distill", "jsd"):
        with pytest.raises(ValueError, match="needs teacher_logprobs"):
            compute_advantages(name, inputs)


# ---------------------------------------------------------------- conventions and errors


def test_inputs_validate_shapes() -> None:
    with pytest.raises(ValueError, match="rewards must be"):
        AdvantageInputs(rewards=torch.zeros(2, 1), response_mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match="response_mask must be"):
        AdvantageInputs(rewards=torch.zeros(2), response_mask=torch.ones(3, 3))
    with pytest.raises(ValueError, match="values must have the shape"):
        AdvantageInputs(rewards=torch.zeros(2), response_mask=torch.ones(2, 3), values=torch.ones(2, 4))
    with pytest.raises(ValueError, match="run_index must be"):
        AdvantageInputs(rewards=torch.zeros(2), response_mask=torch.ones(2, 3), run_index=torch.zeros(3))


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
