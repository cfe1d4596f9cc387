"""PPO's decoupled objective: hand-computed losses, gradients and metrics; its options checked at load time."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from tests.plans import make_plan
from trinity.algorithm.options import UnknownOptionError
from trinity.algorithm.policy_loss import PolicyLossInputs, compute_policy_loss
from trinity.common.config.errors import ConfigError
from trinity.common.config.schema.algorithm import AlgorithmConfig
from trinity.trainer.plan import PlanError, resolve_plan

F64 = torch.float64
LN = math.log

# Four response tokens and one padding position. Per token: the ratio to the proximal policy
# r = exp(logp - prox) and the behaviour weight w = exp(prox - behaviour), both chosen by hand.
RATIOS = [1.1, 1.5, 0.5, 1.0]
WEIGHTS = [2.0, 0.5, 1.0, 4.0]
ADVANTAGES = [1.0, 1.0, -1.0, -1.0, 1e9]


def decoupled_inputs(proximal: bool = True) -> tuple[PolicyLossInputs, torch.Tensor]:
    """One row: behaviour log-probs -1, proximal -1 + ln w, policy -1 + ln w + ln r; NaN on the padding."""
    behaviour = torch.tensor([[-1.0] * 4 + [float("nan")]], dtype=F64)
    prox = behaviour + torch.tensor([[LN(w) for w in WEIGHTS] + [0.0]], dtype=F64)
    logprobs = (prox + torch.tensor([[LN(r) for r in RATIOS] + [0.0]], dtype=F64)).detach().requires_grad_(True)
    inputs = PolicyLossInputs(
        logprobs=logprobs,
        response_mask=torch.tensor([[1, 1, 1, 1, 0]]),
        old_logprobs=behaviour,
        proximal_logprobs=prox if proximal else None,
        advantages=torch.tensor([ADVANTAGES], dtype=F64),
    )
    return inputs, logprobs


def test_decoupled_loss_clips_against_the_proximal_policy_and_weights_by_behaviour() -> None:
    # clip 0.2 -> [0.8, 1.2]; token loss = max(-A r, -A clip(r)) * w:
    #   A=+1 r=1.1 w=2:   -1.1 * 2   = -2.2
    #   A=+1 r=1.5 w=0.5: -1.2 * 0.5 = -0.6   (clipped)
    #   A=-1 r=0.5 w=1:    0.8 * 1   =  0.8   (clipped)
    #   A=-1 r=1.0 w=4:    1.0 * 4   =  4.0   (the dual clip bound 3 does not bind on -A r = 1)
    inputs, _ = decoupled_inputs()
    loss, metrics = compute_policy_loss("ppo", inputs, clip_range=0.2, decoupled=True)
    assert loss.item() == pytest.approx((-2.2 - 0.6 + 0.8 + 4.0) / 4)
    assert metrics["clip_frac"] == pytest.approx(0.5)
    assert metrics["ratio_mean"] == pytest.approx(sum(RATIOS) / 4)
    assert metrics["approx_kl"] == pytest.approx(-sum(LN(r) for r in RATIOS) / 4)
    assert metrics["behav_imp_weight_mean"] == pytest.approx((2.0 + 0.5 + 1.0 + 4.0) / 4)
    assert metrics["behav_approx_kl"] == pytest.approx(-LN(2.0 * 0.5 * 1.0 * 4.0) / 4)
    assert "behav_imp_weight_capped_frac" not in metrics


def test_without_decoupled_the_same_tokens_give_plain_ppo_against_the_behaviour_policy() -> None:
    # ratios to the behaviour policy r * w = 2.2, 0.75, 0.5, 4.0:
    #   -1.2 (clipped), -0.75, 0.8 (clipped), min(4.0, dual clip 3.0) = 3.0
    inputs, _ = decoupled_inputs()
    loss, metrics = compute_policy_loss("ppo", inputs, clip_range=0.2)
    assert loss.item() == pytest.approx((-1.2 - 0.75 + 0.8 + 3.0) / 4)
    assert metrics["clip_frac"] == pytest.approx(0.5)
    assert metrics["dual_clip_frac"] == pytest.approx(0.25)
    assert "behav_imp_weight_mean" not in metrics


def test_the_cap_drops_tokens_whose_weight_exceeds_it() -> None:
    inputs, logprobs = decoupled_inputs()
    loss, metrics = compute_policy_loss("ppo", inputs, clip_range=0.2, decoupled=True, behav_imp_weight_cap=3.0)
    assert loss.item() == pytest.approx((-2.2 - 0.6 + 0.8 + 0.0) / 4)  # the fourth token (w = 4) weighs nothing
    assert metrics["behav_imp_weight_capped_frac"] == pytest.approx(0.25)
    assert metrics["behav_imp_weight_mean"] == pytest.approx(7.5 / 4)  # reported before the cap
    torch.autograd.backward(loss)
    assert logprobs.grad is not None
    # d/d logp of -A r w / 4 is -A r w / 4 where unclipped; clipped and capped tokens get none
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-1.1 * 2.0 / 4, 0.0, 0.0, 0.0, 0.0]], dtype=F64))


def test_the_gradient_is_weighted_and_reaches_the_policy_only() -> None:
    inputs, logprobs = decoupled_inputs()
    loss, _ = compute_policy_loss("ppo", inputs, clip_range=0.2, decoupled=True)
    torch.autograd.backward(loss)
    assert logprobs.grad is not None
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-1.1 * 2.0 / 4, 0.0, 0.0, 1.0 * 4.0 / 4, 0.0]],
                                                           dtype=F64))


def test_with_proximal_equal_to_behaviour_it_is_plain_ppo() -> None:
    inputs, _ = decoupled_inputs()
    same = PolicyLossInputs(logprobs=inputs.logprobs, response_mask=inputs.response_mask,
                            old_logprobs=inputs.proximal_logprobs, proximal_logprobs=inputs.proximal_logprobs,
                            advantages=inputs.advantages)
    decoupled, metrics = compute_policy_loss("ppo", same, decoupled=True, behav_imp_weight_cap=1.5)
    plain, plain_metrics = compute_policy_loss("ppo", same)
    assert decoupled.item() == pytest.approx(plain.item())
    assert metrics["clip_frac"] == plain_metrics["clip_frac"]
    assert metrics["behav_imp_weight_mean"] == 1.0 and metrics["behav_imp_weight_capped_frac"] == 0.0


def test_bad_decoupled_options_are_refused_by_the_loss() -> None:
    inputs, _ = decoupled_inputs(proximal=False)
    with pytest.raises(ValueError, match="needs proximal_logprobs"):
        compute_policy_loss("ppo", inputs, decoupled=True)
    full, _ = decoupled_inputs()
    with pytest.raises(ValueError, match="greater than 1"):
        compute_policy_loss("ppo", full, decoupled=True, behav_imp_weight_cap=1.0)
    with pytest.raises(ValueError, match="set decoupled: true"):
        compute_policy_loss("ppo", full, behav_imp_weight_cap=5.0)
    with pytest.raises(ValueError, match="fallback_to_policy_gradient"):
        compute_policy_loss("ppo", full, decoupled=True, fallback_to_policy_gradient=True)


# ---------------------------------------------------------------- the config


def test_the_plan_reads_proximal_log_probs_only_when_decoupled() -> None:
    on = resolve_plan(AlgorithmConfig(algorithm_type="grpo",
                                      policy_loss_fn_args={"decoupled": True, "behav_imp_weight_cap": 5}))
    assert on.needs_proximal_logprobs and on.needs_old_logprobs
    assert on.policy_loss_options["behav_imp_weight_cap"] == 5
    assert "proximal log-probs" in on.describe()[-1]
    assert "decoupled True" in "\n".join(on.describe())
    off = resolve_plan(AlgorithmConfig(algorithm_type="grpo"))
    assert not off.needs_proximal_logprobs
    assert not resolve_plan(AlgorithmConfig(algorithm_type="grpo", policy_loss_fn_args={"decoupled": False})
                            ).needs_proximal_logprobs


def test_misspelt_or_bad_decoupled_options_are_refused_at_load_time() -> None:
    with pytest.raises(UnknownOptionError, match="did you mean 'behav_imp_weight_cap'"):
        resolve_plan(AlgorithmConfig(algorithm_type="grpo", policy_loss_fn_args={"behave_imp_weight_cap": 5}))
    with pytest.raises(UnknownOptionError, match="did you mean 'decoupled'"):
        resolve_plan(AlgorithmConfig(algorithm_type="grpo", policy_loss_fn_args={"decouple": True}))
    cases: list[tuple[dict[str, Any], str]] = [
        ({"decoupled": "yes"}, "policy_loss_fn_args.decoupled: must be true or false"),
        ({"decoupled": True, "behav_imp_weight_cap": 0.5}, "must be greater than 1"),
        ({"decoupled": True, "behav_imp_weight_cap": "big"}, "behav_imp_weight_cap: must be a number"),
        ({"behav_imp_weight_cap": 5}, "applies to the decoupled objective only"),
        ({"decoupled": True, "fallback_to_policy_gradient": True}, "turn one of them off"),
    ]
    for args, message in cases:
        with pytest.raises(PlanError, match=message):
            resolve_plan(AlgorithmConfig(algorithm_type="grpo", policy_loss_fn_args=args))


def test_a_whole_config_with_a_bad_cap_fails_with_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        make_plan({"algorithm.policy_loss_fn_args": {"decoupled": True, "behav_imp_weight_cap": 1}})
    message = str(caught.value)
    assert "\n" not in message
    assert "algorithm.policy_loss_fn_args.behav_imp_weight_cap: must be greater than 1" in message
    plan = make_plan({"algorithm.policy_loss_fn_args": {"decoupled": True, "behav_imp_weight_cap": 5}})
    assert plan.algorithm.needs_proximal_logprobs
