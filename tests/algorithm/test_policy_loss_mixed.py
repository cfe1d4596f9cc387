"""The mix losses (PPO on rollout rows + SFT on expert rows) and CHORD's schedule, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from tests.algorithm.helpers import assert_values
from trinity.algorithm.losses.common import chord_mu
from trinity.algorithm.policy_loss import PolicyLossInputs, compute_policy_loss

F64 = torch.float64
NAN = float("nan")


def mix_inputs(**extra: object) -> tuple[PolicyLossInputs, torch.Tensor]:
    """Row 0: rollout, ratio 1, A = 2, 2; row 1: expert, log-probs -0.5, -1.5; row 2: rollout, ratio 1, A = -1."""
    logprobs = torch.tensor([[-1.0, -1.0], [-0.5, -1.5], [-1.0, NAN]], dtype=F64, requires_grad=True)
    inputs = PolicyLossInputs(
        logprobs=logprobs,
        response_mask=torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]]),
        old_logprobs=torch.tensor([[-1.0, -1.0], [0.0, 0.0], [-1.0, 0.0]], dtype=F64),
        advantages=torch.tensor([[2.0, 2.0], [0.0, 0.0], [-1.0, 0.0]], dtype=F64),
        expert_mask=torch.tensor([False, True, False]),
        **extra,  # type: ignore[arg-type]
    )
    return inputs, logprobs


def test_mix_combines_ppo_on_rollouts_and_sft_on_experts() -> None:
    inputs, logprobs = mix_inputs()
    loss, metrics = compute_policy_loss("mix", inputs)
    # PPO over the 3 rollout tokens: (-2 - 2 + 1) / 3 = -1; SFT over the 2 expert tokens: (0.5 + 1.5) / 2 = 1
    assert loss.item() == pytest.approx(0.9 * -1.0 + 0.1 * 1.0)
    assert metrics["usual/pg_loss"] == pytest.approx(-1.0)
    assert metrics["expert/sft_loss"] == pytest.approx(1.0)
    assert metrics["expert_row_frac"] == pytest.approx(1 / 3)
    loss.backward()
    assert logprobs.grad is not None
    # rollout tokens: -(1 - mu) A r / 3; expert tokens: -mu / 2
    assert_values(logprobs.grad, [[-0.6, -0.6], [-0.05, -0.05], [0.3, 0.0]], atol=1e-12)


def test_mix_shares_weight_each_part_of_a_split_step() -> None:
    inputs, _ = mix_inputs(usual_share=0.5, expert_share=0.25)
    loss, _ = compute_policy_loss("mix", inputs, mu=0.2)
    assert loss.item() == pytest.approx(0.8 * -1.0 * 0.5 + 0.2 * 1.0 * 0.25)


def test_mix_aggregation_options() -> None:
    inputs, _ = mix_inputs()
    # the expert part by sequence mean of token sums: 0.5 + 1.5 = 2 for its one row
    loss, _ = compute_policy_loss("mix", inputs, sft_loss_agg_mode="seq-mean-token-sum")
    assert loss.item() == pytest.approx(0.9 * -1.0 + 0.1 * 2.0)
    # the PPO part by sequence mean of token means: rows -2 and 1 -> -0.5
    loss, _ = compute_policy_loss("mix", inputs, grpo_loss_agg_mode="seq-mean-token-mean")
    assert loss.item() == pytest.approx(0.9 * -0.5 + 0.1 * 1.0)


def test_mix_accepts_upstream_bookkeeping_options_without_changing_the_loss() -> None:
    inputs, _ = mix_inputs()
    plain, _ = compute_policy_loss("mix", inputs)
    inputs, _ = mix_inputs()
    booked, _ = compute_policy_loss(
        "mix", inputs, use_dynamic_bsz=True, ppo_mini_batch_size=320, ppo_micro_batch_size_per_gpu=4,
        ngpus_trainer=4, train_batch_size_usual=256, train_batch_size_expert=64,
    )
    assert booked.item() == pytest.approx(plain.item())


def test_mix_needs_expert_mask() -> None:
    inputs = PolicyLossInputs(logprobs=torch.zeros(1, 2), response_mask=torch.ones(1, 2))
    with pytest.raises(ValueError, match="needs expert_mask"):
        compute_policy_loss("mix", inputs)


@pytest.mark.parametrize(
    ("step", "expected"),
    [(0, 0.0), (1, 0.25), (2, 0.5), (4, 0.3), (6, 0.1), (10, 0.1)],
)
def test_chord_mu_warmup_then_cosine_decay(step: int, expected: float) -> None:
    # warmup 2 steps to 0.5, then cosine over 4 steps to 0.1: at step 4 (half way) 0.1 + 0.4 * (1 + cos(pi/2)) / 2
    assert chord_mu(step, 2, 4, 0.5, 0.1) == pytest.approx(expected)


def test_chord_mu_defaults_are_the_valley() -> None:
    assert chord_mu(0, 0, 0, 0.1, 0.1) == pytest.approx(0.1)
    assert chord_mu(7, 0, 0, 0.9, 0.05) == pytest.approx(0.05)


def test_mix_chord_follows_the_global_step() -> None:
    schedule = {"mu_warmup_steps": 2, "mu_decay_steps": 4, "mu_peak": 0.5, "mu_valley": 0.1}
    inputs, _ = mix_inputs(global_step=1)
    loss, metrics = compute_policy_loss("mix_chord", inputs, enable_phi_function=False, **schedule)
    assert metrics["mu"] == pytest.approx(0.25)
    assert loss.item() == pytest.approx(0.75 * -1.0 + 0.25 * 1.0)


def test_mix_chord_phi_weights_the_expert_tokens() -> None:
    inputs, _ = mix_inputs(global_step=3)
    loss, metrics = compute_policy_loss("mix_chord", inputs)  # defaults: mu 0.1 throughout, phi on
    # expert tokens p = e^-0.5, e^-1.5; phi = p (1 - p) = 0.2386512, 0.1733431; SFT-phi = (0.5 phi0 + 1.5 phi1) / 2
    phi = (0.5 * 0.2386512185411911 + 1.5 * 0.1733430917805659) / 2
    assert phi == pytest.approx(0.1896701234707222)
    assert metrics["mu"] == pytest.approx(0.1)
    assert loss.item() == pytest.approx(0.9 * -1.0 + 0.1 * phi)
    assert math.isfinite(metrics["expert/sft_phi_loss"])


def test_mix_chord_needs_the_global_step() -> None:
    inputs, _ = mix_inputs()
    with pytest.raises(ValueError, match="needs global_step"):
        compute_policy_loss("mix_chord", inputs)
