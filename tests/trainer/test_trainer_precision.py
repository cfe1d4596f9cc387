"""The trainer loads its models in the dtype and with the attention kernel the device backend decides."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.device.precision_backend import NO_FLOAT16, select_bf16_eager
from tests.trainer.support import make_trainer_plan, tiny_model
from trinity.common.config import ConfigError
from trinity.common.config.validator import resolve_layout
from trinity.device import UnsupportedDtypeError, current_backend
from trinity.trainer import shared_prefix
from trinity.trainer.fsdp_worker import FSDPWorker


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_model(tmp_path_factory.mktemp("precision") / "model")


def _setup(worker: FSDPWorker) -> Iterator[FSDPWorker]:
    import torch.distributed as dist

    _, port = worker.node_address()
    try:
        worker.setup("127.0.0.1", port)
        yield worker
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _compute_dtypes(module: nn.Module) -> list[torch.dtype]:
    """Run one forward pass and return the dtype each linear layer's weight had while it computed."""
    seen: list[torch.dtype] = []
    hooks = [m.register_forward_pre_hook(lambda mod, _args: seen.append(mod.weight.dtype))
             for m in module.modules() if isinstance(m, nn.Linear)]
    try:
        with torch.no_grad():
            module(input_ids=torch.tensor([[5, 6, 7, 8]]), attention_mask=torch.ones(1, 4, dtype=torch.long))
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def test_on_the_cpu_auto_is_float32_with_sdpa(model: Path, tmp_path: Path) -> None:
    plan = make_trainer_plan(model, tmp_path, "grpo", world_size=1, **{"explorer.rollout_model.dtype": "auto"})
    assert plan.trainer.dtype == "auto"
    for worker in _setup(FSDPWorker(plan, 0, 1)):
        assert (worker.dtype_name, worker.compute_dtype, worker.attention) == ("float32", torch.float32, "sdpa")
        # sdpa, wrapped to run shared prompt prefixes when a micro-batch has them
        assert worker.actor.config._attn_implementation == shared_prefix.ATTENTION_NAME
        assert set(_compute_dtypes(worker.actor)) == {torch.float32}


def test_actor_reference_and_critic_follow_the_backend(model: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    select_bf16_eager(monkeypatch)
    plan = make_trainer_plan(model, tmp_path, "ppo", world_size=1, **{
        "explorer.rollout_model.dtype": "auto", "algorithm.kl_loss_fn": "k2"})
    for worker in _setup(FSDPWorker(plan, 0, 1)):
        assert worker.dtype_name == "bfloat16" and worker.attention == "eager"
        assert worker.reference is not None and worker.critic is not None
        assert worker.actor.config._attn_implementation == "eager"
        assert worker.reference.config._attn_implementation == "eager"
        assert worker.critic.backbone.config._attn_implementation == "eager"
        # mixed precision: float32 master weights, gathered in bfloat16 for compute
        assert {p.dtype for p in worker.actor.parameters()} == {torch.float32}
        assert set(_compute_dtypes(worker.actor)) == {torch.bfloat16}
        assert set(_compute_dtypes(worker.critic)) == {torch.bfloat16}


def test_a_dtype_the_device_cannot_do_is_refused_at_plan_time_and_in_the_rank(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    select_bf16_eager(monkeypatch)
    plan = make_trainer_plan(model, tmp_path, "grpo", world_size=1, **{"explorer.rollout_model.dtype": "fp16"})
    with pytest.raises(ConfigError) as caught:
        resolve_layout(plan, current_backend(), {}, [])
    message = str(caught.value)
    assert "explorer.rollout_model.dtype: dtype float16 is not supported on the bf16eager backend" in message
    assert NO_FLOAT16 in message and "use one of bfloat16, float32 (or auto: bfloat16)" in message
    assert "\n" not in message
    with pytest.raises(UnsupportedDtypeError, match=NO_FLOAT16):
        FSDPWorker(plan, 0, 1)
