"""PPO with a critic (two Ray actor ranks) and SFT (one rank in this process) on the tiny model."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.support import make_experiences, make_trainer_plan
from trinity.trainer.trainer import FSDPTrainer


def test_ppo_step_trains_actor_and_critic(ray_local: Any, tiny_path: Path, tmp_path: Path) -> None:
    plan = make_trainer_plan(tiny_path, tmp_path, "ppo", **{
        # a KL reward penalty (the reference model is loaded) instead of upstream's default k2 KL loss
        "algorithm.kl_penalty_fn": "k1", "algorithm.kl_penalty_fn_args": {"kl_coef": 0.02},
        "algorithm.kl_loss_fn": "none",
        "trainer.trainer_config.actor_rollout_ref.actor.ppo_epochs": 2,
        "trainer.trainer_config.critic": {"optim": {"lr": 5e-3}, "ppo_epochs": 2, "cliprange_value": 0.5,
                                          "ppo_micro_batch_size_per_gpu": 2},
    })
    trainer = FSDPTrainer(plan, world_size=2, num_cpus_per_worker=0)
    try:
        assert all(info["critic"] and info["reference"] for info in trainer.rank_info)
        actor_before, critic_before = trainer.full_state_dict(), trainer.critic_state_dict()
        assert "value_head.weight" in critic_before and not any(k.startswith("lm_head") for k in critic_before)
        experiences = make_experiences(groups=2, group_size=3, seed=5, logprobs=True)
        metrics = trainer.train_step(experiences)
        for name in ("loss", "value_loss", "kl", "grad_norm", "critic_grad_norm", "entropy", "clip_frac"):
            assert math.isfinite(metrics[name]), name
        assert metrics["critic_grad_norm"] > 0 and metrics["grad_norm"] > 0
        # Behaviour log-probs of -4..-5 against the policy's ~-6: ratios ~0.2, clipped where the advantage is < 0.
        assert 0 < metrics["clip_frac"] < 1
        assert metrics["kl"] != 0.0  # k1 of rollout log-probs against the reference
        actor_after, critic_after = trainer.full_state_dict(), trainer.critic_state_dict()
        assert not torch.equal(critic_before["value_head.weight"], critic_after["value_head.weight"])
        assert not torch.equal(critic_before["backbone.layers.0.mlp.up_proj.weight"],
                               critic_after["backbone.layers.0.mlp.up_proj.weight"])
        assert sum(not torch.equal(actor_before[k], actor_after[k]) for k in actor_before) > len(actor_before) // 2
        checksums = trainer.state_dict_checksums()
        assert checksums[0] == checksums[1]
    finally:
        trainer.shutdown()


def test_sft_steps_lower_the_loss(ray_local: Any, tiny_path: Path, tmp_path: Path) -> None:
    plan = make_trainer_plan(tiny_path, tmp_path, "sft", world_size=1, micro_batch_size=4,
                             **{"algorithm.optimizer.lr": 5e-3})
    trainer = FSDPTrainer(plan, world_size=1, in_process=True)
    try:
        assert trainer.rank_info[0] == {
            "rank": 0, "backend": "cpu:gloo", "device": "cpu", "local_params": trainer.rank_info[0]["local_params"],
            "use_torch_compile": False, "reference": False, "critic": False,
            "assignment": trainer.rank_info[0]["assignment"],
            "trainable_params": trainer.rank_info[0]["local_params"],  # one rank, no LoRA: every parameter
        }
        # a rank in this process, outside any Ray actor: nothing claimed, the one visible device
        assert trainer.rank_info[0]["assignment"]["source"] == "none"
        assert trainer.rank_info[0]["assignment"]["local_index"] == 0
        data = make_experiences(groups=2, group_size=3, seed=6)
        before = trainer.full_state_dict()
        losses = [trainer.train_step(data)["sft_loss"] for _ in range(3)]
        assert all(math.isfinite(x) for x in losses)
        assert losses[0] > losses[1] > losses[2]
        after = trainer.full_state_dict()
        assert all(not torch.equal(before[k], after[k]) for k in before)
        assert trainer.step == 3
    finally:
        trainer.shutdown()


def test_dpo_step_prefers_the_chosen_responses(ray_local: Any, tiny_path: Path, tmp_path: Path) -> None:
    plan = make_trainer_plan(tiny_path, tmp_path, "dpo", world_size=1, micro_batch_size=3,  # whole pairs: 4 rows
                             **{"algorithm.optimizer.lr": 5e-3})
    trainer = FSDPTrainer(plan, world_size=1, in_process=True)
    try:
        assert trainer.rank_info[0]["reference"] and not trainer.rank_info[0]["critic"]
        pairs = make_experiences(groups=1, group_size=3, seed=7, rejected=True)
        first = trainer.train_step(pairs)
        assert first["rows"] == 6.0 and first["dpo_loss"] == pytest.approx(math.log(2), abs=1e-5)  # policy == ref
        later = [trainer.train_step(pairs) for _ in range(2)]
        assert later[-1]["dpo_loss"] < first["dpo_loss"] and later[-1]["reward_margin"] > 0
        assert later[-1]["reward_accuracy"] == 1.0
    finally:
        trainer.shutdown()
