"""The ratio-weighted, likelihood and importance-sampling policy losses, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from trinity.algorithm.policy_loss import PolicyLossInputs, compute_policy_loss

F64 = torch.float64
LN = math.log


def ratio_inputs(ratios: list[float], advantages: list[float]) -> tuple[PolicyLossInputs, torch.Tensor]:
    """One row whose token ratios are exactly ``ratios`` (old log-probs 0, so log-probs are ln r), float64."""
    logprobs = torch.tensor([[LN(r) for r in ratios]], dtype=F64, requires_grad=True)
    inputs = PolicyLossInputs(
        logprobs=logprobs,
        response_mask=torch.ones(1, len(ratios)),
        old_logprobs=torch.zeros(1, len(ratios), dtype=F64),
        advantages=torch.tensor([advantages], dtype=F64),
    )
    return inputs, logprobs


def grad_of(loss: torch.Tensor, leaf: torch.Tensor) -> list[float]:
    loss.backward()
    assert leaf.grad is not None
    return leaf.grad[0].tolist()


# ---------------------------------------------------------------- importance sampling, TOPR, CISPO, SAPO, sPPO


def test_importance_sampling_is_unclipped() -> None:
    inputs, logprobs = ratio_inputs([2.0, 0.5], [1.0, 1.0])
    loss, metrics = compute_policy_loss("importance_sampling", inputs)
    assert loss.item() == pytest.approx(-(2.0 + 0.5) / 2)
    assert metrics["ratio_mean"] == pytest.approx(1.25)
    assert grad_of(loss, logprobs) == pytest.approx([-1.0, -0.25])  # -A r / 2


def test_topr_tapers_only_non_positive_advantages() -> None:
    # alpha: A = 1 -> 1; A = -1 <= 0 -> clamp(0.5, 0, 1) = 0.5; A = 1 -> 1
    # tokens -alpha A ln r: -ln 2, -0.5 ln 2, +ln 2 -> mean -0.1155245
    inputs, logprobs = ratio_inputs([2.0, 0.5, 0.5], [1.0, -1.0, 1.0])
    loss, metrics = compute_policy_loss("topr", inputs)
    assert loss.item() == pytest.approx(-0.1155245300933242)
    assert metrics["avg_alpha"] == pytest.approx(2.5 / 3)
    assert metrics["avg_ratio"] == pytest.approx(1.0)
    assert grad_of(loss, logprobs) == pytest.approx([-1 / 3, 0.5 / 3, -1 / 3])  # -sg(alpha) A / 3


def test_topr_threshold_moves_the_taper() -> None:
    inputs, _ = ratio_inputs([0.5], [1.0])
    assert compute_policy_loss("topr", inputs)[1]["avg_alpha"] == 1.0
    assert compute_policy_loss("topr", inputs, advantage_threshold=2.0)[1]["avg_alpha"] == pytest.approx(0.5)


def test_cispo_clamps_the_stopped_weight() -> None:
    # defaults: weights clamp(r, 0, 1.28): 2 -> 1.28, 0.5 -> 0.5; tokens -A w ln r: -1.28 ln 2, 0.5 ln 0.5
    inputs, logprobs = ratio_inputs([2.0, 0.5], [1.0, -1.0])
    loss, metrics = compute_policy_loss("cispo", inputs)
    assert loss.item() == pytest.approx(-0.6169009906983514)
    assert metrics["unmasked_frac"] == 1.0
    assert grad_of(loss, logprobs) == pytest.approx([-0.64, 0.25])  # -A w / 2


def test_cispo_mask_clip_drops_runaway_tokens() -> None:
    # ratio 2 > 1.28 with A > 0 is masked out; 0.5 with A < 0 is not below 1 - 1.0 = 0
    inputs, logprobs = ratio_inputs([2.0, 0.5], [1.0, -1.0])
    loss, metrics = compute_policy_loss("cispo", inputs, enable_mask_clip=True)
    assert loss.item() == pytest.approx(0.5 * LN(0.5) / 2)
    assert metrics["unmasked_frac"] == pytest.approx(0.5)
    assert grad_of(loss, logprobs) == pytest.approx([0.0, 0.25])


def test_sapo_soft_gate() -> None:
    # A > 0: tau 1 -> gate sigmoid(0.5) * 4 = 2.4898373; A < 0: tau 1.05 -> sigmoid(-0.525) * 4 / 1.05 = 1.4159383
    # tokens -A gate ln r: -2.4898373 ln 1.5, 1.4159383 ln 0.5 -> mean -0.9954979
    inputs, logprobs = ratio_inputs([1.5, 0.5], [1.0, -1.0])
    loss, metrics = compute_policy_loss("sapo", inputs)
    assert loss.item() == pytest.approx(-0.995497910785659)
    assert metrics["avg_soft_gate"] == pytest.approx((2.4898373248074184 + 1.4159383303033666) / 2)
    assert metrics["pos_adv_frac"] == pytest.approx(0.5)
    assert grad_of(loss, logprobs) == pytest.approx([-1.2449186624037092, 0.7079691651516833])
    with pytest.raises(ValueError, match="tau_pos <= tau_neg"):
        compute_policy_loss("sapo", inputs, tau_pos=2.0, tau_neg=1.0)


def test_sppo_keeps_tokens_inside_the_band() -> None:
    # epsilon 0.3 -> band [1 / 1.3, 1.3]: ratios 1.2 in, 2 out, 0.5 out, 0.8 in
    # tokens -A ln r: -ln 1.2, 0, 0, +ln 0.8 -> mean -0.1013663
    inputs, logprobs = ratio_inputs([1.2, 2.0, 0.5, 0.8], [1.0, 1.0, -1.0, -1.0])
    loss, metrics = compute_policy_loss("sppo", inputs)
    assert loss.item() == pytest.approx(-0.10136627702704107)
    assert metrics["clip_frac"] == pytest.approx(0.5)
    assert grad_of(loss, logprobs) == pytest.approx([-0.25, 0.0, 0.0, 0.25])


# ---------------------------------------------------------------- REC

REC_RATIOS, REC_ADVANTAGES = [1.1, 1.5, 0.7, 1.5], [1.0, 1.0, 1.0, -1.0]
# tokens -A ln r: -ln 1.1, -ln 1.5, -ln 0.7, +ln 1.5; kept by mode (epsilons 0.2, primes 0.4):
#   none: all; two-side (0.8 <= r <= 1.2): token 0; one-side (r <= 1.2 where A >= 0, r >= 0.8 where A <= 0): 0, 2, 3;
#   ring (two-side, or r <= 0.6 where A >= 0, or r >= 1.4 where A <= 0): 0, 3


@pytest.mark.parametrize(
    ("clip_mode", "expected", "clip_frac"),
    [
        ("none", 0.06534119103360186, 0.0),
        ("two-side", -0.023827544951081234, 0.75),
        ("one-side", 0.16670746806064296, 0.25),
        ("ring", 0.07753873207595986, 0.5),
    ],
)
def test_rec_clip_modes(clip_mode: str, expected: float, clip_frac: float) -> None:
    inputs, _ = ratio_inputs(REC_RATIOS, REC_ADVANTAGES)
    loss, metrics = compute_policy_loss(
        "rec", inputs, clip_mode=clip_mode, epsilon_low_prime=0.4, epsilon_high_prime=0.4
    )
    assert loss.item() == pytest.approx(expected)
    assert metrics["clip_frac"] == pytest.approx(clip_frac)


def test_rec_weights() -> None:
    inputs, logprobs = ratio_inputs(REC_RATIOS, REC_ADVANTAGES)
    loss, _ = compute_policy_loss("rec", inputs, weight="importance_sampling")
    # tokens -A r ln r: -1.1 ln 1.1, -1.5 ln 1.5, -0.7 ln 0.7, 1.5 ln 1.5 -> mean 0.0362078; gradient -A sg(r) / 4
    assert loss.item() == pytest.approx(0.03620781574308882)
    assert grad_of(loss, logprobs) == pytest.approx([-1.1 / 4, -1.5 / 4, -0.7 / 4, 1.5 / 4])
    weighted, _ = ratio_inputs(REC_RATIOS, REC_ADVANTAGES)
    loss, _ = compute_policy_loss("rec", weighted, weight="advantage")
    # A' = A exp(A / temp): e, e, e, -1/e -> mean of -A' ln r = -0.0606358
    assert loss.item() == pytest.approx(-0.060635767278302825)


def test_rec_regularizers() -> None:
    inputs, logprobs = ratio_inputs([2.0], [0.0])
    loss, _ = compute_policy_loss("rec", inputs, regularizer="k2", regularizer_coef=0.5)
    # A = 0: only 0.5 (logp - old)^2 = 0.5 (ln 2)^2, gradient (logp - old) = ln 2
    assert loss.item() == pytest.approx(0.5 * LN(2.0) ** 2)
    assert grad_of(loss, logprobs) == pytest.approx([LN(2.0)])
    inputs, logprobs = ratio_inputs([2.0], [0.0])
    loss, _ = compute_policy_loss("rec", inputs, regularizer="forward-kl", regularizer_coef=0.5)
    assert loss.item() == pytest.approx(-0.5 * LN(2.0))
    assert grad_of(loss, logprobs) == pytest.approx([-0.5])


def test_rec_gspo_one_side_uses_the_sequence_ratio_and_sequence_mean() -> None:
    # row 0 (A = 1): sequence ratio sqrt(1.1 * 1.5) = 1.28 > 1.2 -> both tokens out
    # row 1 (A = -1): sqrt(0.7 * 1) = 0.837 >= 0.8 -> in: tokens ln 0.7, 0 -> row mean ln(0.7) / 2
    logprobs = torch.tensor([[LN(1.1), LN(1.5)], [LN(0.7), 0.0]], dtype=F64, requires_grad=True)
    inputs = PolicyLossInputs(
        logprobs=logprobs,
        response_mask=torch.ones(2, 2),
        old_logprobs=torch.zeros(2, 2, dtype=F64),
        advantages=torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=F64),
    )
    loss, metrics = compute_policy_loss("rec", inputs, clip_mode="gspo-one-side")
    assert loss.item() == pytest.approx(LN(0.7) / 2 / 2)
    assert metrics["clip_frac"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("options", "match"),
    [({"clip_mode": "both"}, "clip_mode"), ({"epsilon_low": 0.0}, "epsilon_low"), ({"temp": 0.0}, "temp")],
)
def test_rec_rejects_bad_options(options: dict[str, object], match: str) -> None:
    inputs, _ = ratio_inputs([1.0], [1.0])
    with pytest.raises(ValueError, match=match):
        compute_policy_loss("rec", inputs, **options)


# ---------------------------------------------------------------- OPMD and the CHORD SFT variants


def test_opmd_loss_is_scaled_policy_gradient() -> None:
    logprobs = torch.tensor([[-1.0, -0.5]], dtype=F64, requires_grad=True)
    inputs = PolicyLossInputs(
        logprobs=logprobs, response_mask=torch.ones(1, 2), advantages=torch.tensor([[1.0, 2.0]], dtype=F64)
    )
    # tokens -A logp: 1, 1 -> mean 1, / (1 + tau)
    loss, _ = compute_policy_loss("opmd", inputs)
    assert loss.item() == pytest.approx(0.5)
    assert grad_of(loss, logprobs) == pytest.approx([-0.25, -0.5])
    plain, _ = compute_policy_loss("opmd", inputs, tau=0.0)
    assert plain.item() == pytest.approx(1.0)


def sft_inputs() -> tuple[PolicyLossInputs, torch.Tensor]:
    logprobs = torch.tensor([[LN(0.5), LN(0.25)]], dtype=F64, requires_grad=True)
    return PolicyLossInputs(logprobs=logprobs, response_mask=torch.ones(1, 2)), logprobs


def test_sft_is_weights_by_the_stopped_probability() -> None:
    inputs, logprobs = sft_inputs()
    loss, _ = compute_policy_loss("sft_is", inputs)
    # -p ln p: 0.5 ln 2, 0.25 ln 4 (both 0.3465736); gradient -p / 2
    assert loss.item() == pytest.approx(0.5 * LN(2.0))
    assert grad_of(loss, logprobs) == pytest.approx([-0.25, -0.125])


def test_sft_phi_weights_by_p_one_minus_p_and_cuts_off() -> None:
    inputs, logprobs = sft_inputs()
    loss, _ = compute_policy_loss("sft_phi", inputs)
    # weights 0.5 * 0.5 = 0.25 and 0.25 * 0.75 = 0.1875: (0.25 ln 2 + 0.1875 ln 4) / 2
    assert loss.item() == pytest.approx((0.25 * LN(2.0) + 0.1875 * LN(4.0)) / 2)
    assert grad_of(loss, logprobs) == pytest.approx([-0.125, -0.09375])
    inputs, logprobs = sft_inputs()
    cut, _ = compute_policy_loss("sft_phi", inputs, cutoff_prob=0.4)
    # token 0 (p = 0.5 > 0.4): its log-prob is clamped to ln 0.4, no gradient; the weight keeps p = 0.5
    assert cut.item() == pytest.approx((0.25 * -LN(0.4) + 0.1875 * LN(4.0)) / 2)
    assert grad_of(cut, logprobs) == pytest.approx([0.0, -0.09375])
