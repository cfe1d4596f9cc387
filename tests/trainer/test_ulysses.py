"""Ulysses sequence parallelism: two CPU ranks sharing each sequence train exactly as one rank running it whole.

Real Ray, real FSDP2 over a gloo process group, the all-to-alls on gloo.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.plans import make_plan
from tests.trainer.support import make_experiences, make_trainer_plan
from trinity.common.config.loader import ConfigError
from trinity.trainer.trainer import FSDPTrainer
from trinity.trainer.ulysses import padded_segments

ARR = "trainer.trainer_config.actor_rollout_ref"


def test_packed_rows_and_their_padding_split_into_equal_slices() -> None:
    assert padded_segments([3, 5, 0, 2], 4) == ((0, 3), (3, 8), (8, 10), (10, 12))
    assert padded_segments([4, 4], 2) == ((0, 4), (4, 8))  # no padding row when it divides


def test_the_plan_takes_upstreams_key_and_refuses_what_it_cannot_split() -> None:
    plan = make_plan({"trainer.ulysses_sequence_parallel_size": 2, "cluster.gpu_per_node": 4}).trainer
    assert plan.ulysses_size == 2 and plan.pack_sequences  # sequences run packed, as veRL requires
    assert make_plan({f"{ARR}.actor.ulysses_sequence_parallel_size": 2}).trainer.ulysses_size == 2
    with pytest.raises(ConfigError, match=r"use_remove_padding is false; set it to true"):
        make_plan({"trainer.ulysses_sequence_parallel_size": 2, f"{ARR}.model.use_remove_padding": False})
    with pytest.raises(ConfigError, match=r"with a critic \(PPO\)"):
        make_plan({"trainer.ulysses_sequence_parallel_size": 2, "algorithm.algorithm_type": "ppo"})
    with pytest.raises(ConfigError, match=r"critic.ulysses_sequence_parallel_size: 2 is not supported: Ulysses "
                                          r"sequence parallelism of the critic"):
        make_plan({"trainer.trainer_config.critic.ulysses_sequence_parallel_size": 2})
    with pytest.raises(ConfigError, match=r"differs from trainer.ulysses_sequence_parallel_size"):
        make_plan({"trainer.ulysses_sequence_parallel_size": 2, f"{ARR}.ref.ulysses_sequence_parallel_size": 1})


@pytest.fixture(scope="module")
def one_kv_head_model(tiny_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model's shape with grouped-query attention down to one key/value head (fewer than the ranks)."""
    import shutil

    from transformers import AutoConfig, AutoModelForCausalLM

    folder = tmp_path_factory.mktemp("gqa") / "model"
    config = AutoConfig.from_pretrained(tiny_path)
    config.num_key_value_heads = 1
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    for file in tiny_path.iterdir():
        if file.is_file() and not file.name.endswith(".safetensors") and file.name != "config.json":
            shutil.copy2(file, folder / file.name)
    return folder


def _trainer(tiny_path: Path, root: Path, world: int, sp: int, checkpointing: bool, **overrides: Any) -> FSDPTrainer:
    plan = make_trainer_plan(tiny_path, root, "grpo", world_size=world, micro_batch_size=3, **{
        "trainer.ulysses_sequence_parallel_size": sp,
        f"{ARR}.model.use_remove_padding": True,
        f"{ARR}.model.enable_gradient_checkpointing": checkpointing,
        # old log-probs recomputed: one more forward to compare
        "trainer.trainer_config.algorithm.rollout_correction.bypass_mode": False,
        "algorithm.kl_loss_fn": "low_var_kl",
        "algorithm.kl_loss_fn_args": {"kl_coef": 0.1},
        "algorithm.entropy_loss_fn": "default",
        "algorithm.optimizer.optimizer_type": "sgd",
        "algorithm.optimizer.lr": 1.0,
        **overrides,
    })
    return FSDPTrainer(plan, world_size=world)


@pytest.mark.parametrize("attention", ["multi-head", "one kv head, gradient checkpointing", "LoRA adapter"])
def test_two_ranks_sharing_each_sequence_equal_one_rank_running_it_whole(
    ray_local: Any, tiny_path: Path, one_kv_head_model: Path, tmp_path: Path, attention: str
) -> None:
    model = tiny_path if attention == "multi-head" else one_kv_head_model
    experiences = make_experiences(groups=3, group_size=3, seed=11, logprobs=True)
    results = {}
    for name, world, sp in (("whole", 1, 1), ("split", 2, 2)):
        # the LoRA case also drops the entropy term: its entropy metric then comes from the gathered slices' logits
        lora = ({"model.lora_configs": [{"lora_rank": 4, "lora_alpha": 8}], "algorithm.entropy_loss_fn": "none"}
                if attention == "LoRA adapter" else {})
        trainer = _trainer(model, tmp_path / name, world, sp, checkpointing="checkpointing" in attention, **lora)
        try:
            first = trainer.train_step(experiences)
            before = trainer.full_state_dict()
            second = trainer.train_step(experiences)  # now the reference and the old policy differ from the actor
            results[name] = ((first, second), {k: v - before[k] for k, v in trainer.full_state_dict().items()})
        finally:
            trainer.shutdown()
    (whole, whole_delta), (split, split_delta) = results["whole"], results["split"]
    for step in (0, 1):
        for key in ("loss", "grad_norm", "pg_loss", "kl/loss_kl", "entropy"):
            assert split[step][key] == pytest.approx(whole[step][key], rel=1e-5, abs=1e-7), (step, key)
    assert whole[1]["kl/loss_kl"] > 1e-4  # the second step's KL term is live
    # SGD at lr 1: each weight's change in the second step is its gradient
    worst = max(float((split_delta[k] - v).abs().max()) for k, v in whole_delta.items())
    assert worst < 1e-5, worst
    assert max(float(v.abs().max()) for v in whole_delta.values()) > 1e-3  # the step moved the weights


def test_a_group_size_that_does_not_divide_the_trainers_ranks_is_refused_before_any_rank_starts(
    tmp_path: Path,
) -> None:
    from trinity.common.config.validator import resolve_layout
    from trinity.device import current_backend

    plan = make_trainer_plan(tmp_path / "model", tmp_path, "grpo", world_size=3,
                             **{"trainer.ulysses_sequence_parallel_size": 2})
    with pytest.raises(ConfigError, match=r"ulysses_sequence_parallel_size: 2 does not divide the trainer's 3 "
                                          r"device\(s\)"):
        resolve_layout(plan, current_backend(), {}, [])
    fits = make_trainer_plan(tmp_path / "model", tmp_path, "grpo", world_size=4,
                             **{"trainer.ulysses_sequence_parallel_size": 2})
    assert resolve_layout(fits, current_backend(), {}, []).trainers == 4


def test_dry_run_shows_the_groups(tiny_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from trinity.cli.main import main

    config = tmp_path / "sp.yaml"
    config.write_text(yaml.safe_dump({
        "mode": "train", "checkpoint_root_dir": str(tmp_path), "cluster": {"gpu_per_node": 4},
        "model": {"model_path": str(tiny_path), "max_prompt_tokens": 16, "max_response_tokens": 8},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
        "trainer": {"ulysses_sequence_parallel_size": 2},
        "buffer": {"batch_size": 2, "trainer_input": {"experience_buffer": {"name": "e", "storage_type": "sql"}}},
    }))
    assert main(["run", "--config", str(config), "--dry-run"]) == 0
    assert "Ulysses sequence parallelism: groups of 2 ranks share each packed sequence" in capsys.readouterr().out
