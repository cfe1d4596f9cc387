"""The FSDP2 trainer with two Ray actor ranks on the tiny model: GRPO, sync, checkpoints, resume, conversion."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.support import EngineDouble, make_experiences, make_trainer_plan
from trinity.algorithm import (
    AdvantageInputs,
    PolicyLossInputs,
    compute_advantages,
    compute_policy_loss,
    entropy_bonus,
    entropy_from_logits,
    kl_loss,
    token_logprobs,
)
from trinity.common.config.plan.run import RunPlan
from trinity.common.constants import SyncMethod
from trinity.common.experience import Experience, make_batch
from trinity.common.models.checksum import state_dict_checksum
from trinity.manager.checkpoint_converter import ConversionError, convert_checkpoint
from trinity.monitor.keys import RANK_UPDATE_SECONDS, SAVE_SECONDS
from trinity.synchronizer.synchronizer import Synchronizer
from trinity.trainer.checkpoint import CheckpointError
from trinity.trainer.trainer import FSDPTrainer

KL_COEF = 0.05
ENTROPY_COEF = 0.01


@pytest.fixture(scope="module")
def grpo_config(tiny_path: Path, tmp_path_factory: pytest.TempPathFactory) -> RunPlan:
    return make_trainer_plan(
        tiny_path,
        tmp_path_factory.mktemp("grpo"),
        "grpo",
        **{
            "trainer.save_interval": 1,
            "trainer.max_checkpoints_to_keep": 2,
            "algorithm.kl_loss_fn": "low_var_kl",
            "algorithm.kl_loss_fn_args": {"kl_coef": KL_COEF},
            "algorithm.entropy_loss_fn": "default",
            "algorithm.entropy_loss_fn_args": {"entropy_coef": ENTROPY_COEF},
            "algorithm.optimizer.lr_warmup_steps": 2,
        },
    )


@pytest.fixture(scope="module")
def grpo(ray_local: Any, grpo_config: RunPlan) -> Iterator[dict[str, Any]]:
    """A holder, so the resume test can replace the trainer it killed."""
    holder: dict[str, Any] = {"trainer": FSDPTrainer(grpo_config, world_size=2, num_cpus_per_worker=0)}
    yield holder
    holder["trainer"].shutdown()


def reference_step(model_path: Path, experiences: list[Experience], pad: int) -> tuple[float, float]:
    """Return ``(loss, grad norm)`` of the first GRPO step computed on the whole batch in one process."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    batch = make_batch(experiences, pad)
    mask = batch.response_mask
    with torch.no_grad():
        old = token_logprobs(
            model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits, batch.input_ids
        )
    advantages, _ = compute_advantages("grpo", AdvantageInputs.from_batch(batch))
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    logprobs = token_logprobs(logits, batch.input_ids)
    policy, _ = compute_policy_loss(
        "ppo",
        PolicyLossInputs(logprobs=logprobs, response_mask=mask, old_logprobs=old, advantages=advantages),
        loss_agg_mode="token-mean",
    )
    kl, _ = kl_loss(logprobs, old, mask, coef=KL_COEF, kl_fn="low_var_kl")
    bonus, _ = entropy_bonus(entropy_from_logits(logits[:, :-1]), mask, coef=ENTROPY_COEF)
    loss = policy + kl - bonus
    torch.autograd.backward(loss)
    norm = torch.stack([(p.grad**2).sum() for p in model.parameters() if p.grad is not None]).sum().sqrt()
    return float(loss.detach()), float(norm)


def test_grpo_step_matches_one_process_and_updates_weights(grpo: dict[str, Any], tiny_path: Path) -> None:
    trainer: FSDPTrainer = grpo["trainer"]
    assert [info["backend"] for info in trainer.rank_info] == ["cpu:gloo", "cpu:gloo"]
    assert all(info["reference"] and not info["critic"] for info in trainer.rank_info)
    experiences = make_experiences(groups=2, group_size=3, seed=1)  # 6 rows: 3 per rank, micro-batches of 2
    before = trainer.full_state_dict()
    metrics = trainer.train_step(experiences, checkpoint_extra={"task_position": 6})
    loss, norm = reference_step(tiny_path, experiences, trainer.pad_token_id)

    assert math.isfinite(metrics["loss"]) and metrics["loss"] == pytest.approx(loss, rel=1e-4, abs=1e-6)
    assert metrics["grad_norm"] == pytest.approx(norm, rel=1e-4)
    assert metrics["lr"] == pytest.approx(0.5e-3)  # linear warmup: step 1 of 2
    assert metrics["kl"] == pytest.approx(0.0, abs=1e-6)  # policy == reference before the first update
    assert 0 < metrics["entropy"] < math.log(400) + 1e-3
    assert metrics["clip_frac"] == 0.0
    assert metrics["tokens"] == sum(e.response_length for e in experiences)
    assert metrics["step"] == 1.0 and trainer.step == 1
    assert 0 < metrics[RANK_UPDATE_SECONDS] < metrics["step_time_s"]

    after = trainer.full_state_dict()
    assert before.keys() == after.keys()
    changed = [name for name in before if not torch.equal(before[name], after[name])]
    assert len(changed) == len(before)
    checksums = trainer.state_dict_checksums()
    assert checksums[0] == checksums[1] == state_dict_checksum(after) != state_dict_checksum(before)

    second = trainer.train_step(experiences)
    assert second["lr"] == pytest.approx(1e-3) and second["kl"] > 0 and math.isfinite(second["loss"])


def test_checkpoints_every_step_keep_the_newest_two(grpo: dict[str, Any], grpo_config: RunPlan) -> None:
    trainer: FSDPTrainer = grpo["trainer"]
    third = trainer.train_step(make_experiences(seed=2), checkpoint_extra={"task_position": 18, "buffer_position": 3})
    root = trainer.checkpoint_dir
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == ["latest", "step-2", "step-3"]
    assert (root / "latest").read_text().strip() == "step-3"
    state = json.loads((root / "step-3" / "trainer_state.json").read_text())
    assert state["step"] == 3 and state["world_size"] == 2
    saved = {key: value for key, value in third.items() if key != SAVE_SECONDS}  # the save timed itself after writing
    assert SAVE_SECONDS in third
    assert state["extra"] == {"task_position": 18, "buffer_position": 3, "step_metrics": saved}  # the step's own
    assert (root / "step-3" / "hf" / "tokenizer.json").is_file() and (root / "step-3" / "actor" / ".metadata").is_file()
    assert not list(root.glob(".tmp-*"))


def test_sync_from_the_trainer_into_an_engine(grpo: dict[str, Any], tiny_path: Path, tmp_path: Path) -> None:
    trainer: FSDPTrainer = grpo["trainer"]
    expected = trainer.state_dict_checksums()[0]
    full = trainer.full_state_dict()
    assert torch.equal(full["lm_head.weight"], full["model.embed_tokens.weight"])  # the tiny model ties them
    expected_bytes = sum(t.numel() * t.element_size() for name, t in full.items() if name != "lm_head.weight")
    for method in ("online", "checkpoint"):
        engine = EngineDouble(str(tiny_path))  # the initial weights
        assert engine.state_dict_checksum() != expected
        settings = dataclasses.replace(trainer.run.sync, bucket_size_mb=1)
        sync = Synchronizer(SyncMethod.parse(method), trainer, [engine], settings, checkpoint_path=tmp_path / "sync")
        report = sync.sync(trainer.step)
        sync.close()
        assert engine.state_dict_checksum() == expected and engine.version == trainer.step
        assert report.bytes == expected_bytes


def test_two_ranks_stream_the_broadcast_with_the_metas_of_the_full_gather(grpo: dict[str, Any]) -> None:
    """With two ranks an online sync gathers nothing up front: the metas come from the shards' full shapes and
    each tensor is gathered as its bucket is sent (the sync test above checks the weights that arrive)."""
    trainer: FSDPTrainer = grpo["trainer"]
    assert trainer.world_size == 2
    gathered = trainer._on_all("gather_weights")
    streamed = trainer._on_all("gather_weights", True)
    assert streamed[1] is None and gathered[1] is None
    assert streamed[0] == gathered[0] and "lm_head.weight" not in {m.name for m in streamed[0]}
    trainer._on_all("gather_weights")  # leaves no stream pending on any rank


def test_sync_from_the_trainer_into_a_tensor_parallel_vllm_engine(
    grpo: dict[str, Any], tiny_path: Path, tmp_path: Path
) -> None:
    """The real FSDP2 trainer feeds a tp-2 vllm engine (vLLM is a double here) by every sync method."""
    from tests.doubles.vllm_path import vllm_double
    from trinity.common.models.engine import SamplingParams
    from trinity.common.models.hf_engine import HFEngine

    trainer: FSDPTrainer = grpo["trainer"]
    expected = trainer.state_dict_checksums()[0]
    with vllm_double():
        from trinity.common.models.vllm_engine import VLLMEngine

        engine = VLLMEngine(str(tiny_path), dtype="float32", tensor_parallel_size=2, track_checksum=True)
        try:
            assert engine.state_dict_checksum() != expected  # the initial weights
            for offset, method in enumerate(("online", "checkpoint", "memory"), start=1):
                settings = dataclasses.replace(trainer.run.sync, bucket_size_mb=1)
                sync = Synchronizer(
                    SyncMethod.parse(method), trainer, [engine], settings, checkpoint_path=tmp_path / "sync"
                )
                try:
                    sync.sync(100 * offset)
                finally:
                    sync.close()
                assert engine.state_dict_checksum() == expected and engine.model_version() == 100 * offset
            greedy = SamplingParams(temperature=0.0, max_tokens=8)
            served = engine.generate(["What is 3 plus 4?"], greedy)[0][0]
        finally:
            engine.shutdown()
    reference = HFEngine(str(tiny_path), torch_threads=1)
    reference.load_state_dict(trainer.full_state_dict(), version=300)
    assert torch.equal(served.response_tokens, reference.generate(["What is 3 plus 4?"], greedy)[0][0].response_tokens)


def test_converter_output_gives_the_trainer_logits(grpo: dict[str, Any], tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    trainer: FSDPTrainer = grpo["trainer"]
    out = convert_checkpoint(trainer.checkpoint_dir, tmp_path / "hf-out")  # the latest: step-3, the current weights
    converted = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    assert tokenizer.pad_token_id == trainer.pad_token_id
    reference = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    reference.load_state_dict(trainer.full_state_dict())
    ids = torch.tensor([tokenizer("What is 3 plus 4? The answer is")["input_ids"]])
    with torch.no_grad():
        assert torch.equal(converted(input_ids=ids).logits, reference(input_ids=ids).logits)
    initial = AutoModelForCausalLM.from_pretrained(trainer.run.model.path, dtype=torch.float32)
    with torch.no_grad():
        assert not torch.allclose(converted(input_ids=ids).logits, initial(input_ids=ids).logits)
    assert Path(trainer.checkpoint_dir).name == "checkpoints"
    from_run = convert_checkpoint(Path(trainer.checkpoint_dir).parent, tmp_path / "hf-run")  # the run folder
    by_run = AutoModelForCausalLM.from_pretrained(str(from_run), dtype=torch.float32)
    with torch.no_grad():
        assert torch.equal(by_run(input_ids=ids).logits, converted(input_ids=ids).logits)
    with pytest.raises(ConversionError, match="exists"):
        convert_checkpoint(trainer.checkpoint_dir, out)
    with pytest.raises(ConversionError, match="no complete trainer checkpoint"):
        convert_checkpoint(tmp_path / "nowhere", tmp_path / "x")


def test_conversion_needs_no_device_nor_process_group(grpo: dict[str, Any], tmp_path: Path) -> None:
    """An NPU job's checkpoint converts on a login node: the NPU backend selected, no NPU, no collective."""
    import os
    import subprocess
    import sys

    trainer: FSDPTrainer = grpo["trainer"]
    code = (
        "import sys, torch.distributed as dist, trinity.device as d\n"
        "from trinity.manager.checkpoint_converter import convert_checkpoint\n"
        "assert d.get_device_type() == 'npu' and d.get_collective_backend() == 'hccl'\n"
        f"convert_checkpoint({str(trainer.checkpoint_dir)!r}, {str(tmp_path / 'out')!r})\n"
        "assert not dist.is_initialized(), 'a process group was created'\n"
        "assert 'torch_npu' not in sys.modules, 'torch_npu was imported'\n"
    )
    env = {**os.environ, "TRINITY_DEVICE": "npu", "TRINITY_DEVICE_RESOLVED": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_the_runs_export_draws_no_progress_bar_on_the_console(
    grpo: dict[str, Any], tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The end-of-run export happens while the run's live line owns the terminal: no transformers bar then."""
    import shutil

    from transformers.utils import logging as hf_logging

    from trinity.trainer.checkpoint import CheckpointDir
    from trinity.trainer.trainer import export_checkpoint

    trainer: FSDPTrainer = grpo["trainer"]
    latest = CheckpointDir(trainer.checkpoint_dir).usable_latest()
    assert latest is not None
    folder = tmp_path / "checkpoints" / latest.name
    shutil.copytree(latest, folder)
    hf_logging.enable_progress_bar()
    capfd.readouterr()
    convert_checkpoint(folder, tmp_path / "by-hand")  # `trinity convert` keeps its bar: the capture sees bars
    assert "Writing model shards" in capfd.readouterr().err
    exported = export_checkpoint(folder)
    assert (exported / "model.safetensors").is_file()
    assert "Writing model shards" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()


def test_save_kill_resume_restores_step_optimizer_and_weights(
    grpo: dict[str, Any], grpo_config: RunPlan, ray_local: Any
) -> None:
    trainer: FSDPTrainer = grpo["trainer"]
    weights = trainer.full_state_dict()
    optimizers = ray_local.get([w.optimizer_state.remote() for w in trainer.workers])
    assert optimizers[0]["step"] == 3 and optimizers[0]["state"]
    trainer.kill()  # as a crash would: no clean-up

    resumed = FSDPTrainer(grpo_config, world_size=2, num_cpus_per_worker=0)
    grpo["trainer"] = resumed
    assert resumed.step == 0
    restored = resumed.resume()
    assert restored is not None and restored["step"] == 3 and resumed.step == 3
    assert {k: v for k, v in restored["extra"].items() if k != "step_metrics"} == {
        "task_position": 18,
        "buffer_position": 3,
    }
    now = resumed.full_state_dict()
    assert all(torch.equal(weights[name], now[name]) for name in weights)
    reloaded = ray_local.get([w.optimizer_state.remote() for w in resumed.workers])
    for old, new in zip(optimizers, reloaded, strict=True):
        assert old["lr"] == new["lr"] and old["step"] == new["step"]
        assert old["state"].keys() == new["state"].keys()
        for name, entry in old["state"].items():
            for key, value in entry.items():
                assert torch.equal(value, new["state"][name][key]), (name, key)
    metrics = resumed.train_step(make_experiences(seed=4))
    assert metrics["step"] == 4.0 and math.isfinite(metrics["loss"])
    with pytest.raises(CheckpointError, match="no complete trainer checkpoint"):
        resumed.resume(str(grpo_config.run_dir / "missing"))
