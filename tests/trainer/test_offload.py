"""Parameter and optimizer offload: veRL's keys in the plan, the backend's answer, and a real FSDP2 step.

On this CPU the device memory is host memory, so offload moves nothing; the
code path is the real one (FSDP2's ``CPUOffloadPolicy`` on a gloo mesh, the
optimizer state's moves), and its steps must equal those without offload.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.plans import make_plan
from tests.trainer.support import make_experiences, make_trainer_plan
from trinity.common.config.loader import ConfigError
from trinity.common.config.plan.trainer import OffloadPlan
from trinity.device import OffloadSupport
from trinity.trainer.offload import OffloadUnsupportedError, move_optimizer_state, shard_options
from trinity.trainer.trainer import FSDPTrainer

ARR = "trainer.trainer_config.actor_rollout_ref"


def test_verl_offload_keys_map_onto_each_model() -> None:
    plan = make_plan({
        f"{ARR}.actor.fsdp_config.param_offload": True,
        f"{ARR}.ref.fsdp_config.param_offload": True,
        f"{ARR}.ref.fsdp_config.optimizer_offload": True,  # the reference has no optimizer: inert
    }).trainer
    assert plan.offload == OffloadPlan(params=True, optimizer=True)  # with the parameters, their optimizer state
    assert plan.reference_offload == OffloadPlan(params=True)
    assert plan.offloads
    alone = make_plan({f"{ARR}.actor.fsdp_config.optimizer_offload": True}).trainer
    assert alone.offload == OffloadPlan(params=False, optimizer=True) and not alone.reference_offload.any
    policy = make_plan({f"{ARR}.actor.fsdp_config.offload_policy": True}).trainer  # veRL's FSDP2 spelling
    assert policy.offload.params
    assert not make_plan({}).trainer.offloads
    with pytest.raises(ConfigError, match="activation offloading is not supported"):
        make_plan({f"{ARR}.model.enable_activation_offload": True})


def test_shard_options_follow_the_backends_answer() -> None:
    from torch.distributed.fsdp import CPUOffloadPolicy

    pinned = OffloadSupport(True, pin_memory=True)
    options = shard_options(OffloadPlan(params=True, optimizer=True), pinned, "actor")
    assert isinstance(options["offload_policy"], CPUOffloadPolicy) and options["offload_policy"].pin_memory
    assert shard_options(OffloadPlan(optimizer=True), pinned, "actor") == {}  # state moves between steps instead
    assert shard_options(OffloadPlan(), OffloadSupport(False, reason="x"), "actor") == {}  # nothing asked, no check
    with pytest.raises(OffloadUnsupportedError, match=r"the critic asks for offload .* cannot: no host mapping"):
        shard_options(OffloadPlan(params=True), OffloadSupport(False, reason="no host mapping"), "critic")


def test_optimizer_state_moves_whole_and_counts_its_bytes() -> None:
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    assert move_optimizer_state(optimizer, "cpu") == 0  # already on the host
    # the meta device stands in for an accelerator here: the move is what is checked, not the values
    moved = move_optimizer_state(optimizer, "meta")
    assert moved == 2 * (4 * 3 + 3) * 4 + 2 * 4  # exp_avg and exp_avg_sq of weight and bias, two float32 steps
    assert all(v.device.type == "meta" for s in optimizer.state.values() for v in s.values())


def _trainer(tiny_path: Path, root: Path, offload: dict[str, Any]) -> FSDPTrainer:
    plan = make_trainer_plan(tiny_path, root, "ppo", world_size=1, micro_batch_size=4, **offload)
    return FSDPTrainer(plan, world_size=1, in_process=True)


@pytest.mark.parametrize("keys", ["param_offload", "optimizer_offload"])
def test_a_ppo_step_with_offload_equals_one_without(ray_local: Any, tiny_path: Path, tmp_path: Path,
                                                      keys: str) -> None:
    """PPO: the actor, the reference model and the critic all offload; two steps, then a checkpoint round trip."""
    offload = {f"{ARR}.actor.fsdp_config.{keys}": True, f"{ARR}.ref.fsdp_config.param_offload": True,
               f"trainer.trainer_config.critic.model.fsdp_config.{keys}": True}
    experiences = make_experiences(groups=4, group_size=1, seed=3, logprobs=True)
    results = {}
    for name, settings in (("plain", {}), ("offload", offload)):
        trainer = _trainer(tiny_path, tmp_path / name, settings)
        try:
            worker = trainer.workers[0]
            policy = worker.actor._get_fsdp_state()._fsdp_param_group.offload_policy
            assert (type(policy).__name__ == "CPUOffloadPolicy") == (name == "offload" and keys == "param_offload")
            metrics = [trainer.train_step(experiences) for _ in range(2)]
            if name == "offload":
                assert all(v.device.type == "cpu" for s in worker.optimizer.state.values() for v in s.values()
                           if isinstance(v, torch.Tensor))
            results[name] = (metrics, trainer.full_state_dict())
        finally:
            trainer.shutdown()
    (plain, plain_weights), (offloaded, offloaded_weights) = results["plain"], results["offload"]
    for before, after in zip(plain, offloaded, strict=True):
        for key in ("loss", "grad_norm"):
            assert after[key] == pytest.approx(before[key], rel=1e-5, abs=1e-7), key
    for name, value in plain_weights.items():
        torch.testing.assert_close(offloaded_weights[name], value, rtol=1e-5, atol=1e-6)
