"""GRPO with PPO's decoupled objective on the tiny model: the trainer supplies the proximal log-probs."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.support import make_experiences, make_trainer_plan
from trinity.common.experience import Experience, make_batch
from trinity.trainer.models import logprobs_and_entropy
from trinity.trainer.trainer import FSDPTrainer

CAP = 5.0


def stale(experiences: list[Experience]) -> list[Experience]:
    """Return ``experiences`` with the first one's engine log-probs lowered by 4 (its weights then exceed the cap)."""
    first = experiences[0]
    assert first.logprobs is not None
    return [dataclasses.replace(first, logprobs=first.logprobs - 4.0), *experiences[1:]]


def behaviour_weights(model_path: Path, experiences: list[Experience], pad: int, temperature: float
                      ) -> tuple[float, float]:
    """Return the mean of ``exp(proximal - engine log-prob)`` over response tokens and the share above :data:`CAP`,
    with the proximal log-probs taken from the untrained model loaded directly."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    batch = make_batch(experiences, pad)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        proximal, _ = logprobs_and_entropy(logits, batch.input_ids, temperature, False)
    mask = batch.response_mask.bool()
    weights = (proximal - batch.old_logprobs).exp()[mask]
    return float(weights.mean()), float((weights > CAP).float().mean())


def test_decoupled_steps_clip_against_the_trainer_and_weight_by_the_engine(
    ray_local: Any, tiny_path: Path, tmp_path: Path
) -> None:
    plan = make_trainer_plan(tiny_path, tmp_path, "grpo", world_size=1, micro_batch_size=8, **{
        "algorithm.policy_loss_fn_args": {"decoupled": True, "behav_imp_weight_cap": CAP},
        "algorithm.kl_loss_fn": "none", "algorithm.optimizer.lr": 1e-3,
    })
    assert plan.algorithm.needs_proximal_logprobs
    trainer = FSDPTrainer(plan, world_size=1, in_process=True)
    try:
        experiences = stale(make_experiences(groups=2, group_size=3, seed=5, logprobs=True))
        mean_weight, capped = behaviour_weights(tiny_path, experiences, trainer.pad_token_id,
                                                plan.trainer.temperature or 1.0)
        assert 0 < capped < 0.5  # the stale row's tokens, not the others
        before = trainer.full_state_dict()
        first = trainer.train_step(experiences)
        # one micro-batch, one epoch: the loss is taken at the proximal policy itself, so r = 1 everywhere
        assert first["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
        assert first["clip_frac"] == 0.0
        # the weights are the engine's log-probs against the trainer's policy before the update
        assert first["behav_imp_weight_mean"] == pytest.approx(mean_weight, rel=1e-4)
        assert first["behav_imp_weight_capped_frac"] == pytest.approx(capped)
        after = trainer.full_state_dict()
        assert sum(not torch.equal(before[k], after[k]) for k in before) > len(before) // 2
        second = trainer.train_step(experiences)
        assert math.isfinite(second["loss"]) and trainer.step == 2
        # the proximal policy is now the trained one: the weights moved with it
        assert second["behav_imp_weight_mean"] != pytest.approx(first["behav_imp_weight_mean"], rel=1e-6)
        with pytest.raises(ValueError, match=r"6 of 6 experiences carry none; .* set decoupled: false"):
            trainer.train_step(make_experiences(groups=2, group_size=3, seed=5))
    finally:
        trainer.shutdown()
