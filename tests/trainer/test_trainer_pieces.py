"""The trainer's pure pieces: the algorithm plan, batch sharding, checkpoint folders, torch.compile policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.device import plugins
from tests.trainer.support import make_experiences, make_trainer_plan
from trinity import device
from trinity.algorithm import UnknownOptionError
from trinity.common.config import ConfigError
from trinity.common.config.schema import AlgorithmConfig
from trinity.common.config.validator import resolve_layout
from trinity.common.experience import make_batch
from trinity.device import CompileSupport, hookimpl
from trinity.device import facade as device_facade
from trinity.device.loader import BackendRecord, builtin_records, load_plugin
from trinity.trainer.batching import (
    batch_rows,
    count_units,
    expand_pairs,
    micro_batches,
    rows_from_wire,
    rows_to_wire,
    shard_indices,
    slice_rows,
    take_rows,
)
from trinity.trainer.checkpoint import CheckpointDir, CheckpointError, resolve_checkpoint
from trinity.trainer.fsdp_worker import FSDPWorker
from trinity.trainer.models import TorchCompileUnsupportedError, resolve_torch_compile
from trinity.trainer.plan import PlanError, resolve_plan
from trinity.utils.registry import UnknownNameError

# --- the plan ---------------------------------------------------------------------------


def test_plans_follow_the_algorithm_types() -> None:
    grpo = resolve_plan(AlgorithmConfig(algorithm_type="grpo"))
    assert (grpo.policy_loss_fn, grpo.advantage_fn, grpo.advantage_in, grpo.use_critic) == ("ppo", "grpo", "buffer",
                                                                                          False)
    assert grpo.kl_loss is not None and (grpo.kl_loss.fn, grpo.kl_loss.coef) == ("k2", 0.001)  # upstream's default
    assert grpo.use_reference and grpo.kl_penalty is None
    no_kl = resolve_plan(AlgorithmConfig(algorithm_type="grpo", kl_loss_fn_args={"kl_coef": 0.0}))
    assert no_kl.kl_loss is None and not no_kl.use_reference  # kl_coef 0: no reference model to run
    ppo = resolve_plan(AlgorithmConfig(algorithm_type="ppo", kl_penalty_fn="k1", kl_penalty_fn_args={"kl_coef": 0.1}))
    assert (ppo.advantage_fn, ppo.advantage_in, ppo.use_critic) == ("ppo", "trainer", True)
    assert ppo.kl_penalty is not None and (ppo.kl_penalty.fn, ppo.kl_penalty.coef) == ("k1", 0.1)
    assert ppo.kl_loss is not None  # a penalty and a loss at once, as upstream allows
    sft = resolve_plan(AlgorithmConfig(algorithm_type="sft"))
    assert (sft.advantage_fn, sft.needs_old_logprobs, sft.use_reference, sft.policy_units) == (None, False, False,
                                                                                             "token")
    dpo = resolve_plan(AlgorithmConfig(algorithm_type="dpo"))
    assert dpo.paired and dpo.use_reference and dpo.policy_units == "row" and dpo.kl_loss is not None
    gspo = resolve_plan(AlgorithmConfig(policy_loss_fn="gspo", loss_agg_mode="seq-mean-token-mean"))
    assert gspo.policy_loss_options["loss_agg_mode"] == "seq-mean-token-mean" and gspo.policy_units == "seq"


def test_plan_errors_are_named() -> None:
    with pytest.raises(UnknownNameError, match="algorithm"):
        resolve_plan(AlgorithmConfig(algorithm_type="grpoo"))
    with pytest.raises(UnknownOptionError, match="clip_rnage"):
        resolve_plan(AlgorithmConfig(policy_loss_fn_args={"clip_rnage": 0.1}))
    with pytest.raises(PlanError, match="upstream ignores"):
        resolve_plan(AlgorithmConfig(algorithm_type="grpo", kl_penalty_fn="k1"))
    with pytest.raises(PlanError, match="computes no advantages"):
        resolve_plan(AlgorithmConfig(algorithm_type="sft", advantage_fn="grpo"))
    with pytest.raises(UnknownNameError):
        resolve_plan(AlgorithmConfig(kl_loss_fn="k9"))


# --- batching ---------------------------------------------------------------------------


def test_shards_are_even_with_dummies_at_the_end() -> None:
    assert shard_indices(6, 2) == [[0, 1, 2], [3, 4, 5]]
    assert shard_indices(5, 2) == [[0, 1, 2], [3, 4, -1]]
    assert shard_indices(1, 2) == [[0], [-1]]
    assert shard_indices(6, 4, unit=2) == [[0, 1], [2, 3], [4, 5], [-1, -1]]
    with pytest.raises(ValueError):
        shard_indices(3, 2, unit=2)
    assert micro_batches(5, 2) == [slice(0, 2), slice(2, 4), slice(4, 5)]
    assert micro_batches(6, 3, unit=2) == [slice(0, 4), slice(4, 6)]


def test_dummy_rows_train_nothing_and_micro_batches_are_trimmed() -> None:
    experiences = make_experiences(groups=1, group_size=3, seed=3)
    batch = make_batch(experiences, pad_token_id=0)
    rows = batch_rows(batch)
    rows["advantages"] = torch.ones_like(rows["response_mask"])
    shard = take_rows(rows, [2, -1])
    assert torch.equal(shard["input_ids"][1], rows["input_ids"][0])  # a real row's tokens: a valid forward
    assert float(shard["response_mask"][1].sum()) == 0 and float(shard["advantages"][1].abs().sum()) == 0
    assert torch.equal(shard["response_mask"][0], rows["response_mask"][2])
    longest = int(batch.attention_mask.sum(dim=1).max())
    short = slice_rows(rows, slice(0, 1))
    length = int(batch.attention_mask[0].sum())
    assert short["input_ids"].shape[1] == length <= longest
    assert short["response_mask"].shape[1] == length - 1 and short["rewards"].shape == (1,)
    assert count_units(rows["response_mask"], "token") == sum(e.response_length for e in experiences)
    assert count_units(rows["response_mask"], "seq") == 3 == count_units(rows["response_mask"], "row")


def test_rows_cross_to_a_rank_as_numpy_and_come_back_as_writable_tensors() -> None:
    """Ray sends numpy arrays as raw buffers (read-only on the receiving side); bfloat16 has no numpy dtype."""
    import pickle

    rows = {"input_ids": torch.arange(6).view(2, 3), "response_mask": torch.ones(2, 3, dtype=torch.bool),
            "advantages": torch.rand(2, 3), "bf": torch.rand(2, 3).bfloat16()}
    wire = rows_to_wire(rows)
    assert {name: type(value).__name__ for name, value in wire.items()} == {
        "input_ids": "ndarray", "response_mask": "ndarray", "advantages": "ndarray", "bf": "Tensor"}
    arrived = pickle.loads(pickle.dumps(wire, protocol=5))
    for value in arrived.values():
        if not isinstance(value, torch.Tensor):
            value.setflags(write=False)  # as Ray hands it over
    back = rows_from_wire(arrived)
    for name, tensor in rows.items():
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor)
    back["advantages"].add_(1.0)  # a copy: writable, and the sender's rows are untouched
    assert not torch.equal(back["advantages"], rows["advantages"])


def test_preference_pairs_interleave() -> None:
    experiences = make_experiences(groups=1, group_size=2, rejected=True)
    rows = expand_pairs(experiences)
    rejected = experiences[0].rejected_tokens
    assert len(rows) == 4 and rejected is not None and torch.equal(rows[1].tokens, rejected)
    with pytest.raises(ValueError, match="rejected_tokens"):
        expand_pairs(make_experiences(groups=1, group_size=1))


# --- checkpoint folders -----------------------------------------------------------------


def test_commit_is_atomic_and_latest_moves_last(tmp_path: Path) -> None:
    checkpoints = CheckpointDir(tmp_path)
    assert checkpoints.latest() is None
    for step in (1, 2, 3):
        staging = checkpoints.begin(step)
        (staging / "payload").write_text(str(step))
        checkpoints.commit(step, {"step": step}, max_checkpoints=2)
    assert checkpoints.complete_steps() == [2, 3]
    assert checkpoints.latest() == tmp_path / "step-3"
    staging = checkpoints.begin(4)  # a crash while writing step 4: no trainer_state.json, not committed
    (staging / "payload").write_text("half")
    assert checkpoints.latest() == tmp_path / "step-3"
    (tmp_path / "latest").write_text("step-9\n")  # a pointer to something gone: the newest complete one wins
    assert checkpoints.latest() == tmp_path / "step-3"
    assert resolve_checkpoint(tmp_path) == tmp_path / "step-3" == resolve_checkpoint(tmp_path / "step-3")
    checkpoints.begin(3)
    checkpoints.commit(3, {"step": 3, "again": True})  # re-saving a step replaces it
    assert json.loads((tmp_path / "step-3" / "trainer_state.json").read_text())["again"] is True
    with pytest.raises(CheckpointError, match="no complete trainer checkpoint"):
        resolve_checkpoint(tmp_path / "empty")


# --- torch.compile ----------------------------------------------------------------------


class NoCompile(plugins.FakeAccel):
    """A backend whose device has no torch.compile support."""

    @hookimpl
    def trinity_torch_compile_support(self) -> CompileSupport:
        return CompileSupport(False, "inductor has no driver for this device")


def _select_no_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = load_plugin(NoCompile("nocompile"), expected_name="nocompile")
    found = {r.name: r for r in builtin_records()}
    found["nocompile"] = BackendRecord("nocompile", "trinity-backend-nocompile", "1.0", "x", "ok", backend)
    monkeypatch.setattr(device_facade, "discover", lambda: found)
    device.reset()
    device.select_backend("nocompile")


def test_compile_follows_the_backend_and_an_explicit_true_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert resolve_torch_compile(None) is True  # the CPU backend compiles
    _select_no_compile(monkeypatch)
    assert device.current_selection().name == "nocompile"
    assert resolve_torch_compile(None) is False and resolve_torch_compile(False) is False
    with pytest.raises(TorchCompileUnsupportedError) as caught:
        resolve_torch_compile(True)
    message = str(caught.value)
    assert "'nocompile'" in message and "inductor has no driver for this device" in message
    assert "trainer.use_torch_compile" in message and "\n" not in message
    # the layout decides, before any rank starts; the ranks take its decision
    backend = device.current_backend()
    plan = make_trainer_plan(tmp_path / "model", tmp_path, "grpo", **{"trainer.use_torch_compile": True})
    with pytest.raises(ConfigError, match=r"use_torch_compile: true is not supported .* inductor has no driver"):
        resolve_layout(plan, backend, {}, [])
    plan = make_trainer_plan(tmp_path / "model", tmp_path, "grpo", **{"trainer.use_torch_compile": None})
    layout = resolve_layout(plan, backend, {}, [])
    assert layout.use_torch_compile is False
    assert FSDPWorker(plan, 0, 1, use_torch_compile=layout.use_torch_compile).use_torch_compile is False
