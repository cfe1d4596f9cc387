"""Policy losses, against hand-computed values and gradients."""

from __future__ import annotations

import math

import pytest
import torch

from tests.algorithm.helpers import assert_values
from trinity.algorithm.options import UnknownOptionError
from trinity.algorithm.policy_loss import (
    POLICY_LOSS_FNS,
    PolicyLossInputs,
    compute_policy_loss,
    interleave_pairs,
)
from trinity.common.experience import Experience, make_batch
from trinity.utils.registry import UnknownNameError

NAN = float("nan")
F64 = torch.float64


def ppo_inputs(
    ratios: list[float], advantages: list[float], mask: list[float] | None = None
) -> tuple[PolicyLossInputs, torch.Tensor]:
    """One row whose token ratios are exactly ``ratios`` (old log-probs 0, log-probs ln r), float64."""
    logprobs = torch.tensor([[math.log(r) if r > 0 else NAN for r in ratios]], dtype=F64, requires_grad=True)
    inputs = PolicyLossInputs(
        logprobs=logprobs,
        response_mask=torch.tensor([mask if mask is not None else [1.0] * len(ratios)]),
        old_logprobs=torch.zeros(1, len(ratios), dtype=F64),
        advantages=torch.tensor([advantages], dtype=F64),
    )
    return inputs, logprobs


def grad_of(loss: torch.Tensor, leaf: torch.Tensor) -> torch.Tensor:
    loss.backward()
    assert leaf.grad is not None
    return leaf.grad


def test_registry_names() -> None:
    assert POLICY_LOSS_FNS.names() == [
        "cispo", "dpo", "gspo", "importance_sampling", "mix", "mix_chord", "opmd", "ppo", "rec", "sapo", "sft",
        "sft_is", "sft_phi", "sppo", "topr",
    ]  # fmt: skip


# ---------------------------------------------------------------- PPO


def test_ppo_clipped_surrogate_hand_values() -> None:
    # clip 0.2 -> [0.8, 1.2]; token losses:
    #   A=+1 r=1.1: max(-1.1, -1.1) = -1.1        A=+1 r=1.5: max(-1.5, -1.2) = -1.2 (clipped)
    #   A=-1 r=0.9: max(0.9, 0.9) = 0.9           A=-1 r=0.5: max(0.5, 0.8) = 0.8 (clipped)
    # the fifth position is padding (NaN log-prob, huge advantage) and must not count
    inputs, _ = ppo_inputs([1.1, 1.5, 0.9, 0.5, -1.0], [1.0, 1.0, -1.0, -1.0, 1e9], [1, 1, 1, 1, 0])
    loss, metrics = compute_policy_loss("ppo", inputs, clip_range=0.2)
    assert loss.item() == pytest.approx((-1.1 - 1.2 + 0.9 + 0.8) / 4)
    assert metrics["pg_loss"] == pytest.approx(-0.15)
    assert metrics["clip_frac"] == pytest.approx(0.5)
    assert metrics["ratio_mean"] == pytest.approx((1.1 + 1.5 + 0.9 + 0.5) / 4)
    assert metrics["approx_kl"] == pytest.approx(-math.log(1.1 * 1.5 * 0.9 * 0.5) / 4)
    assert metrics["dual_clip_frac"] == 0.0  # the dual clip (3.0, upstream's default) binds nowhere here


def test_ppo_gradient_inside_the_clip_range_is_minus_a_times_ratio() -> None:
    ratios, advantages = [1.1, 0.95, 1.0], [2.0, -0.5, 1.0]
    inputs, logprobs = ppo_inputs(ratios, advantages)
    loss, metrics = compute_policy_loss("ppo", inputs, clip_range=0.2)
    # d(-A exp(logp - old)) / d logp = -A r, averaged over 3 tokens
    assert_values(grad_of(loss, logprobs), [[-2.0 * 1.1 / 3, 0.5 * 0.95 / 3, -1.0 / 3]], atol=1e-12)
    assert metrics["clip_frac"] == 0.0


def test_ppo_clipped_tokens_get_no_gradient_and_padding_none() -> None:
    inputs, logprobs = ppo_inputs([1.5, 0.5, 1.1, -1.0], [1.0, -1.0, 1.0, 3.0], [1, 1, 1, 0])
    loss, _ = compute_policy_loss("ppo", inputs, clip_range=0.2)
    assert_values(grad_of(loss, logprobs), [[0.0, 0.0, -1.1 / 3, 0.0]], atol=1e-12)


def test_ppo_ratio_exactly_at_the_clip_boundaries() -> None:
    # ratios 1.25 and 0.75 are exact in float64 (exp(ln 1.25) == 1.25)
    assert torch.exp(torch.log(torch.tensor([1.25, 0.75], dtype=F64))).tolist() == [1.25, 0.75]
    inputs, logprobs = ppo_inputs([1.25, 0.75], [1.0, -1.0])
    loss, metrics = compute_policy_loss("ppo", inputs, clip_range=0.25)
    # at 1 +- eps the clipped and unclipped terms are equal: nothing counts as clipped
    assert loss.item() == pytest.approx((-1.25 + 0.75) / 2)
    assert metrics["clip_frac"] == 0.0
    # and the gradient is still -A r (the boundary belongs to the trust region)
    assert_values(grad_of(loss, logprobs), [[-1.25 / 2, 0.75 / 2]], atol=1e-12)


def test_ppo_just_outside_the_boundary_is_clipped() -> None:
    inputs, logprobs = ppo_inputs([1.2500001, 0.7499999], [1.0, -1.0])
    loss, metrics = compute_policy_loss("ppo", inputs, clip_range=0.25)
    assert loss.item() == pytest.approx((-1.25 + 0.75) / 2)
    assert metrics["clip_frac"] == 1.0
    assert_values(grad_of(loss, logprobs), [[0.0, 0.0]], atol=1e-12)


def test_ppo_does_not_clip_in_the_pessimistic_direction() -> None:
    # A > 0 with r < 1 - eps (or A < 0 with r > 1 + eps): the unclipped term is the larger loss, kept
    inputs, logprobs = ppo_inputs([0.5, 1.5], [1.0, -1.0])
    loss, metrics = compute_policy_loss("ppo", inputs, clip_range=0.2)
    assert loss.item() == pytest.approx((-0.5 + 1.5) / 2)
    assert metrics["clip_frac"] == 0.0
    assert_values(grad_of(loss, logprobs), [[-0.5 / 2, 1.5 / 2]], atol=1e-12)


def test_ppo_asymmetric_clip_ranges() -> None:
    # low 0.1, high 0.3 -> [0.9, 1.3]: A=+1 r=1.25 stays; A=-1 r=0.85 -> max(0.85, 0.9) = 0.9
    inputs, _ = ppo_inputs([1.25, 0.85], [1.0, -1.0])
    loss, metrics = compute_policy_loss("ppo", inputs, clip_range_low=0.1, clip_range_high=0.3)
    assert loss.item() == pytest.approx((-1.25 + 0.9) / 2)
    assert metrics["clip_frac"] == pytest.approx(0.5)


def test_ppo_dual_clip_is_on_by_default_and_bounds_negative_advantages() -> None:
    # c = 3 (the default), clip 0.2:
    #   A=-1 r=5: max(5, 1.2) = 5 -> min(5, 3) = 3 (dual-clipped)
    #   A=-1 r=2: max(2, 1.2) = 2 < 3, unchanged
    #   A=+1 r=5: max(-5, -1.2) = -1.2; the dual clip never touches A > 0
    inputs, logprobs = ppo_inputs([5.0, 2.0, 5.0], [-1.0, -1.0, 1.0])
    loss, metrics = compute_policy_loss("ppo", inputs, clip_range=0.2)
    assert loss.item() == pytest.approx((3.0 + 2.0 - 1.2) / 3)
    assert metrics["dual_clip_frac"] == pytest.approx(1 / 3)
    assert metrics["clip_frac"] == pytest.approx(1 / 3)  # the A > 0 token
    # the dual-clipped loss is a constant: no gradient; the middle token keeps -A r / 3
    assert_values(grad_of(loss, logprobs), [[0.0, 2.0 / 3, 0.0]], atol=1e-12)


def test_ppo_without_dual_clip_keeps_the_large_loss() -> None:
    inputs, _ = ppo_inputs([5.0, 2.0, 5.0], [-1.0, -1.0, 1.0])
    loss, metrics = compute_policy_loss("ppo", inputs, clip_range=0.2, clip_ratio_c=None)
    assert loss.item() == pytest.approx((5.0 + 2.0 - 1.2) / 3)
    assert "dual_clip_frac" not in metrics
    wider, _ = compute_policy_loss("ppo", inputs, clip_range=0.2, clip_ratio_c=4.0)
    assert wider.item() == pytest.approx((4.0 + 2.0 - 1.2) / 3)


def test_ppo_sequence_masking_drops_negative_tokens_of_drifted_rows() -> None:
    # row 0: both ratios e^-0.5 (mean old_logp - logp = 0.5 > 0.1), A = +1, -1; row 1: ratios 1, A = -1, +2
    logprobs = torch.tensor([[-0.5, -0.5], [0.0, 0.0]], dtype=F64, requires_grad=True)
    inputs = PolicyLossInputs(
        logprobs=logprobs,
        response_mask=torch.ones(2, 2),
        old_logprobs=torch.zeros(2, 2, dtype=F64),
        advantages=torch.tensor([[1.0, -1.0], [-1.0, 2.0]], dtype=F64),
    )
    # token losses: -e^-0.5 (A > 0, unclipped), 0.8 (A < 0, clipped at 0.8) or 0 when masked, 1, -2
    plain, _ = compute_policy_loss("ppo", inputs)
    assert plain.item() == pytest.approx((-math.exp(-0.5) + 0.8 + 1 - 2) / 4)
    masked, metrics = compute_policy_loss("ppo", inputs, enable_sequence_masking=True)
    assert masked.item() == pytest.approx(-0.40163266492815836)  # (-e^-0.5 + 0 + 1 - 2) / 4
    assert metrics["seq_mask/masked_tokens"] == pytest.approx(0.25)
    assert metrics["seq_mask/mean_sequence_kl"] == pytest.approx(0.25)  # rows: 0.5 and 0
    loose, _ = compute_policy_loss("ppo", inputs, enable_sequence_masking=True, delta_sequence_masking=0.6)
    assert loose.item() == pytest.approx(plain.item())


def test_ppo_fallback_to_policy_gradient_ignores_old_logprobs() -> None:
    logprobs = torch.tensor([[-1.0, -2.0]], dtype=F64, requires_grad=True)
    inputs = PolicyLossInputs(
        logprobs=logprobs, response_mask=torch.ones(1, 2), advantages=torch.tensor([[1.0, -1.0]], dtype=F64)
    )
    loss, metrics = compute_policy_loss("ppo", inputs, fallback_to_policy_gradient=True)
    # ratio exp(logp - sg(logp)) = 1: loss (-1 + 1) / 2, gradient -A / 2
    assert loss.item() == pytest.approx(0.0)
    assert metrics["ratio_mean"] == pytest.approx(1.0)
    assert_values(grad_of(loss, logprobs), [[-0.5, 0.5]], atol=1e-12)


def test_ppo_aggregation_option() -> None:
    logprobs = torch.zeros(2, 3, dtype=F64, requires_grad=True)
    inputs = PolicyLossInputs(
        logprobs=logprobs,
        response_mask=torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]),
        old_logprobs=torch.zeros(2, 3, dtype=F64),
        advantages=torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]], dtype=F64),
    )
    # ratio 1: token losses -A; row sums -6 and -4
    loss, _ = compute_policy_loss("ppo", inputs, loss_agg_mode="seq-mean-token-sum")
    assert loss.item() == pytest.approx(-5.0)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"clip_ratio_c": 1.0}, "clip_ratio_c"),
        ({"clip_range": 1.0}, "lower clip"),
        ({"clip_range_high": -0.1}, "upper clip"),
    ],
)
def test_ppo_rejects_bad_options(options: dict[str, float], match: str) -> None:
    inputs, _ = ppo_inputs([1.0], [1.0])
    with pytest.raises(ValueError, match=match):
        compute_policy_loss("ppo", inputs, **options)


def test_ppo_needs_old_logprobs_and_advantages() -> None:
    inputs = PolicyLossInputs(logprobs=torch.zeros(1, 2), response_mask=torch.ones(1, 2), advantages=torch.ones(1, 2))
    with pytest.raises(ValueError, match="needs old_logprobs"):
        compute_policy_loss("ppo", inputs)


def test_ppo_from_a_real_batch() -> None:
    exp = Experience(
        tokens=torch.tensor([1, 2, 3]),
        prompt_length=1,
        logprobs=torch.tensor([-1.0, -2.0]),
        advantages=torch.tensor([1.0, 1.0]),
    )
    batch = make_batch([exp], pad_token_id=0)
    logprobs = batch.old_logprobs.clone().requires_grad_(True)  # on-policy: ratio 1
    loss, metrics = compute_policy_loss("ppo", PolicyLossInputs.from_batch(batch, logprobs))
    assert loss.item() == pytest.approx(-1.0)
    assert metrics["ratio_mean"] == pytest.approx(1.0)


# ---------------------------------------------------------------- GSPO


def gspo_inputs(advantages: tuple[float, float]) -> tuple[PolicyLossInputs, torch.Tensor]:
    # row 0 keeps 2 tokens with log-ratios 0.1, 0.3 -> s0 = exp(0.2) (geometric mean of e^0.1, e^0.3)
    # row 1 keeps 3 tokens with log-ratios 0, 0, -0.0003 -> s1 = exp(-0.0001)
    logprobs = torch.tensor([[0.1, 0.3, NAN], [0.0, 0.0, -0.0003]], dtype=F64, requires_grad=True)
    inputs = PolicyLossInputs(
        logprobs=logprobs,
        response_mask=torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]),
        old_logprobs=torch.zeros(2, 3, dtype=F64),
        advantages=torch.tensor([[advantages[0]] * 3, [advantages[1]] * 3], dtype=F64),
    )
    return inputs, logprobs


S0, S1 = math.exp(0.2), math.exp(-0.0001)


def test_gspo_sequence_ratio_value_and_gradient_unclipped() -> None:
    inputs, logprobs = gspo_inputs((1.0, -1.0))
    loss, metrics = compute_policy_loss("gspo", inputs, clip_range=0.25)
    # sequence losses -A s: -s0 and +s1, averaged over the two sequences
    assert loss.item() == pytest.approx((-S0 + S1) / 2)
    assert metrics["seq_ratio_mean"] == pytest.approx((S0 + S1) / 2)
    assert metrics["approx_kl"] == pytest.approx((-0.2 + 0.0001) / 2)
    assert metrics["ppo_kl_seq"] == metrics["approx_kl"]
    # upstream's token-level ppo_kl: mean of old - new over the 5 response tokens (0.1, 0.3 | 0, 0, -0.0003)
    assert metrics["ppo_kl"] == pytest.approx(-(0.1 + 0.3 - 0.0003) / 5)
    assert metrics["clip_frac"] == 0.0
    # sequence-level GSPO: d(-A s_i)/d logp_t = -A s_i / |y_i|, times 1/2 for the mean over sequences
    assert_values(grad_of(loss, logprobs), [[-S0 / 4, -S0 / 4, 0.0], [S1 / 6, S1 / 6, S1 / 6]], atol=1e-12)


def test_gspo_default_clip_is_tight() -> None:
    inputs, logprobs = gspo_inputs((1.0, -1.0))
    loss, metrics = compute_policy_loss("gspo", inputs)
    # defaults [1 - 3e-4, 1 + 4e-4]: s0 = 1.22 with A > 0 is clipped to 1.0004; s1 = 0.9999 is inside
    assert loss.item() == pytest.approx((-1.0004 + S1) / 2)
    assert metrics["clip_frac"] == pytest.approx(2 / 5)  # row 0's two tokens
    assert_values(grad_of(loss, logprobs), [[0.0, 0.0, 0.0], [S1 / 6, S1 / 6, S1 / 6]], atol=1e-12)


# ---------------------------------------------------------------- SFT


def test_sft_is_the_negative_log_likelihood_of_response_tokens() -> None:
    logprobs = torch.tensor([[-1.0, -2.0, NAN], [-3.0, NAN, NAN]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    loss, metrics = compute_policy_loss("sft", PolicyLossInputs(logprobs=logprobs, response_mask=mask))
    assert loss.item() == pytest.approx(2.0)  # (1 + 2 + 3) / 3
    assert metrics["sft_loss"] == pytest.approx(2.0)
    assert_values(grad_of(loss, logprobs), [[-1 / 3, -1 / 3, 0.0], [-1 / 3, 0.0, 0.0]])
    seq, _ = compute_policy_loss(
        "sft", PolicyLossInputs(logprobs=logprobs, response_mask=mask), loss_agg_mode="seq-mean-token-mean"
    )
    assert seq.item() == pytest.approx((1.5 + 3.0) / 2)
    # seq-mean-token-sum-norm: the sum 6 over a fixed length (the inputs' agg_normalizer) 4, not over rows
    fixed = PolicyLossInputs(logprobs=logprobs, response_mask=mask, agg_normalizer=4.0)
    norm, _ = compute_policy_loss("sft", fixed, loss_agg_mode="seq-mean-token-sum-norm")
    assert norm.item() == pytest.approx(6.0 / 4.0)


# ---------------------------------------------------------------- DPO


def dpo_inputs() -> tuple[PolicyLossInputs, torch.Tensor]:
    # pair 0: chosen sums logp -3, ref -3.5 -> c = 0.5; rejected logp -3, ref -2.5 -> r = -0.5
    # pair 1: chosen logp -1, ref 0 -> c = -1; rejected logp -2, ref -2 -> r = 0 (padding holds NaN)
    logprobs = torch.tensor([[-1.0, -2.0], [-2.0, -1.0], [-1.0, NAN], [-1.0, -1.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -2.0], [-1.5, -1.0], [0.0, NAN], [-1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    return PolicyLossInputs(logprobs=logprobs, response_mask=mask, ref_logprobs=ref), logprobs


def test_dpo_hand_values_and_metrics() -> None:
    inputs, logprobs = dpo_inputs()
    loss, metrics = compute_policy_loss("dpo", inputs, beta=0.1)
    # margins beta (c - r): 0.1 and -0.1; -log sigmoid(x) = log(1 + e^-x)
    expected = (math.log1p(math.exp(-0.1)) + math.log1p(math.exp(0.1))) / 2
    assert loss.item() == pytest.approx(expected)
    assert metrics["chosen_reward"] == pytest.approx(0.1 * (0.5 - 1.0) / 2)
    assert metrics["rejected_reward"] == pytest.approx(0.1 * (-0.5 + 0.0) / 2)
    assert metrics["reward_accuracy"] == pytest.approx(0.5)
    assert metrics["reward_margin"] == pytest.approx(0.0)
    # d loss / d logp of a chosen token of pair 0: -beta sigmoid(-0.1) / 2 pairs; rejected: the opposite
    g = 0.1 / (1 + math.exp(0.1)) / 2
    grad = grad_of(loss, logprobs)
    assert grad[0].tolist() == pytest.approx([-g, -g])
    assert grad[1].tolist() == pytest.approx([g, g])
    assert grad[2, 1].item() == 0.0


def test_dpo_label_smoothing() -> None:
    both, _ = dpo_inputs()
    assert both.ref_logprobs is not None
    inputs = PolicyLossInputs(
        logprobs=both.logprobs[:2], response_mask=both.response_mask[:2], ref_logprobs=both.ref_logprobs[:2]
    )  # pair 0 only: margin 0.1
    loss, _ = compute_policy_loss("dpo", inputs, beta=0.1, label_smoothing=0.1)
    a, b = math.log1p(math.exp(-0.1)), math.log1p(math.exp(0.1))  # -log sig(0.1), -log sig(-0.1)
    assert loss.item() == pytest.approx(0.9 * a + 0.1 * b)
    assert loss.item() != pytest.approx(a)  # smoothing changed the value


def test_dpo_rejects_odd_rows_and_missing_reference() -> None:
    odd = PolicyLossInputs(logprobs=torch.zeros(3, 2), response_mask=torch.ones(3, 2), ref_logprobs=torch.zeros(3, 2))
    with pytest.raises(ValueError, match="even"):
        compute_policy_loss("dpo", odd)
    no_ref = PolicyLossInputs(logprobs=torch.zeros(2, 2), response_mask=torch.ones(2, 2))
    with pytest.raises(ValueError, match="needs ref_logprobs"):
        compute_policy_loss("dpo", no_ref)


def test_interleave_pairs_alternates_rows() -> None:
    result = interleave_pairs(torch.tensor([[1], [2]]), torch.tensor([[3], [4]]))
    assert result.tolist() == [[1], [3], [2], [4]]


# ---------------------------------------------------------------- conventions and errors


def test_inputs_validate_shapes() -> None:
    with pytest.raises(ValueError, match="advantages must have the shape"):
        PolicyLossInputs(logprobs=torch.zeros(2, 3), response_mask=torch.ones(2, 3), advantages=torch.zeros(2, 2))


def test_unknown_loss_and_option_are_one_line_with_suggestions() -> None:
    inputs, _ = ppo_inputs([1.0], [1.0])
    with pytest.raises(UnknownNameError) as err:
        compute_policy_loss("pp0", inputs)
    assert "\n" not in str(err.value)
    assert "did you mean 'ppo'" in str(err.value)
    with pytest.raises(UnknownOptionError) as opt:
        compute_policy_loss("ppo", inputs, clip_rnage=0.2)
    assert "\n" not in str(opt.value)
    assert "did you mean 'clip_range'" in str(opt.value)
    with pytest.raises(UnknownOptionError, match="aggregation"):
        compute_policy_loss("ppo", inputs, aggregation="token-mean")  # upstream's name is loss_agg_mode
