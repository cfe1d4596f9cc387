"""Clip_B / Clip_V (upstream's ``clipb`` / ``clipv``): GRPO advantages and the tokens their entropy filter drops."""

from __future__ import annotations

import math

import pytest
import torch

from trinity.algorithm import AdvantageInputs, compute_advantages, compute_filtered_advantages, nec_from_logits
from trinity.algorithm.advantages.grpo import grpo_advantages
from trinity.common.config.schema.algorithm import AlgorithmConfig
from trinity.trainer.plan import PlanError, resolve_plan


def _reference_nec(logits: list[float]) -> float:
    z = max(logits)
    weights = [math.exp(v - z) for v in logits]
    total = sum(weights)
    p = [w / total for w in weights]
    entropy = -sum(q * math.log(q) for q in p)
    return entropy * sum(q * q for q in p) + sum(q * q * math.log(q) for q in p)


def test_nec_is_zero_for_a_uniform_distribution_and_matches_its_formula() -> None:
    assert float(nec_from_logits(torch.zeros(4))) == pytest.approx(0.0, abs=1e-7)
    for logits in ([2.0, 0.5, -1.0], [5.0, 0.0, 0.0, -3.0]):
        assert float(nec_from_logits(torch.tensor(logits))) == pytest.approx(_reference_nec(logits), rel=1e-5)
    masked = nec_from_logits(torch.tensor([1.0, 0.0, float("-inf")]))
    assert float(masked) == pytest.approx(_reference_nec([1.0, 0.0]), rel=1e-5), "a banned token adds nothing"


def _inputs(**extra: torch.Tensor) -> AdvantageInputs:
    """Two groups of two rows, 3 response tokens each: rows 0 and 2 above their group's mean, 1 and 3 below."""
    return AdvantageInputs(
        rewards=torch.tensor([1.0, 0.0, 1.0, 0.0]),
        response_mask=torch.ones(4, 3),
        group_index=torch.tensor([0, 0, 1, 1]),
        **extra,
    )


def test_clipb_drops_only_negative_advantage_tokens_far_below_the_batch_signal() -> None:
    logprobs = torch.full((4, 3), -0.1)
    entropies = torch.full((4, 3), 0.5)
    entropies[1, 2] = 40.0  # S = p (H + log p) far above: kept (only the low side is clipped)
    entropies[3, 0] = -40.0  # far below, on a negative-advantage row: dropped
    entropies[0, 1] = -40.0  # far below, on a positive-advantage row: kept
    inputs = _inputs(old_logprobs=logprobs, entropies=entropies)
    advantages, returns, token_filter = compute_filtered_advantages("clipb", inputs, mu=1.0)
    expected, _ = grpo_advantages(inputs)
    assert torch.equal(advantages, expected) and torch.equal(returns, expected)
    assert token_filter is not None
    dropped = (~token_filter.keep).nonzero().tolist()
    assert dropped == [[3, 0]]
    assert token_filter.metrics["frac_clipped"] == pytest.approx(1 / 12)
    assert token_filter.metrics["frac_clipped_neg"] == pytest.approx(1 / 6)
    assert token_filter.metrics["frac_clipped_pos"] == 0.0


def test_clipb_keeps_every_token_when_the_signal_does_not_vary() -> None:
    inputs = _inputs(old_logprobs=torch.full((4, 3), -0.3), entropies=torch.full((4, 3), 1.0))
    _, _, token_filter = compute_filtered_advantages("clipb", inputs)
    assert token_filter is not None and bool(token_filter.keep.all())
    assert token_filter.metrics["frac_clipped"] == 0.0
    flat = AdvantageInputs(rewards=torch.ones(2), response_mask=torch.ones(2, 3), group_index=torch.tensor([0, 0]),
                           old_logprobs=torch.zeros(2, 3), entropies=torch.rand(2, 3))
    _, _, none_negative = compute_filtered_advantages("clipb", flat)
    assert none_negative is not None and none_negative.metrics["frac_clipped_neg"] == 0.0, "no such tokens: 0"


def test_clipv_caps_the_dropped_negative_tokens_at_max_frac_most_extreme_first() -> None:
    logprobs = torch.full((4, 3), -0.1)
    entropies = torch.full((4, 3), 0.5)
    nec = torch.zeros(4, 3)
    nec[1] = torch.tensor([10.0, 30.0, 20.0])  # the negative rows' gaps N - S stand far out
    nec[3] = torch.tensor([25.0, 0.0, 15.0])
    inputs = _inputs(old_logprobs=logprobs, entropies=entropies, nec=nec)
    _, _, uncapped = compute_filtered_advantages("clipv", inputs, mu=0.5, max_frac=1.0)
    assert uncapped is not None
    assert sorted(map(tuple, (~uncapped.keep).nonzero().tolist())) == [(1, 0), (1, 1), (1, 2), (3, 0), (3, 2)]
    _, _, capped = compute_filtered_advantages("clipv", inputs, mu=0.5, max_frac=0.2)  # budget int(0.2 * 12) = 2
    assert capped is not None
    assert sorted(map(tuple, (~capped.keep).nonzero().tolist())) == [(1, 1), (3, 0)]
    assert capped.metrics["frac_clipped"] == pytest.approx(2 / 12)


def test_the_clip_filters_need_the_trainers_statistics() -> None:
    with pytest.raises(ValueError, match="'clipb' needs entropies"):
        compute_advantages("clipb", _inputs(old_logprobs=torch.zeros(4, 3)))
    with pytest.raises(ValueError, match="'clipv' needs nec"):
        compute_advantages("clipv", _inputs(old_logprobs=torch.zeros(4, 3), entropies=torch.zeros(4, 3)))


def test_a_plan_with_clipb_or_clipv_has_the_trainer_compute_their_statistics() -> None:
    clipb = resolve_plan(AlgorithmConfig(algorithm_type="grpo_verl", advantage_fn="clipb"))
    assert clipb.token_statistics == ("entropies",) and clipb.needs_old_logprobs
    assert clipb.effective_options("advantage") == {"epsilon": 1e-6, "mu": 2.5}
    clipv = resolve_plan(AlgorithmConfig(algorithm_type="grpo_verl", advantage_fn="clipv"))
    assert clipv.token_statistics == ("entropies", "nec")
    assert clipv.effective_options("advantage")["mu"] == 8.5, "upstream's default_args when the args are unset"
    assert any("entropies" in line for line in clipv.describe())
    with pytest.raises(PlanError, match="needs the whole batch in the trainer"):
        resolve_plan(AlgorithmConfig(algorithm_type="grpo", advantage_fn="clipb"))
