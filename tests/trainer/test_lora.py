"""LoRA: ``model.lora_configs`` in the plan, PEFT's adapters in the model, and a real FSDP2 trainer training them.

PEFT itself is the oracle where it can be: merged weights must equal
``PeftModel.merge_and_unload``'s, and an exported adapter folder must load
with ``PeftModel.from_pretrained`` and give the trainer's merged model's logits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.plans import make_plan
from tests.trainer.support import make_experiences, make_trainer_plan
from trinity.common.config.loader import ConfigError
from trinity.common.config.plan.trainer import LoraPlan
from trinity.trainer import lora
from trinity.trainer.trainer import FSDPTrainer

IDS = torch.tensor([[5, 17, 42, 7, 99, 3, 250, 11]])


def _base(path: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)


def _randomise_adapters(model: Any, seed: int = 0) -> None:
    """Give B nonzero values (a fresh adapter's B is 0, which would make every merge trivially the base)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if lora.is_adapter(name):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)


def test_lora_configs_become_the_trainers_adapter_plan(tmp_path: Path) -> None:
    plan = make_plan({"model.lora_configs": [{"name": "mine", "lora_rank": 8, "lora_alpha": 16,
                                               "target_modules": ["q_proj", "v_proj"]}]}).trainer
    assert plan.lora == LoraPlan(rank=8, alpha=16.0, target_modules=("q_proj", "v_proj"), name="mine")
    assert plan.lora.scaling == 2.0
    assert make_plan({"model.lora_configs": [{}]}).trainer.lora == LoraPlan(32, 32.0, "all-linear", name="lora")
    assert make_plan({}).trainer.lora is None
    with pytest.raises(ConfigError, match=r"model.lora_configs: 2 adapters given; one is supported"):
        make_plan({"model.lora_configs": [{}, {}]})
    with pytest.raises(ConfigError, match=r"model.lora_configs\[0\].lora_rank: must be at least 1"):
        make_plan({"model.lora_configs": [{"lora_rank": 0}]})
    with pytest.raises(ConfigError, match=r"holds no adapter_config.json"):
        make_plan({"model.lora_configs": [{"path": str(tmp_path)}]})
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 12,
                                                               "target_modules": ["q_proj"], "use_dora": True}))
    with pytest.raises(ConfigError, match=r"uses DoRA \(use_dora: true\), which is not supported"):
        make_plan({"model.lora_configs": [{"path": str(tmp_path)}]})
    (tmp_path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 12,
                                                               "target_modules": ["q_proj"]}))
    from_folder = make_plan({"model.lora_configs": [{"path": str(tmp_path), "lora_rank": 64}]}).trainer.lora
    assert from_folder == LoraPlan(4, 12.0, ("q_proj",), adapter_path=str(tmp_path), name="lora")  # its own shape


def test_injected_adapters_are_the_only_trainable_weights_and_merge_as_peft_does(tiny_path: Path) -> None:
    from peft import LoraConfig, get_peft_model

    model = _base(tiny_path)
    total = sum(p.numel() for p in model.parameters())
    plan = LoraPlan(rank=4, alpha=8.0, target_modules="all-linear")
    trainable = lora.inject(model, plan)
    adapters = {n: p for n, p in model.named_parameters() if lora.is_adapter(n)}
    assert trainable == sum(p.numel() for p in adapters.values()) and 0 < trainable < total // 5
    assert {n for n, p in model.named_parameters() if p.requires_grad} == set(adapters)
    assert not any("lm_head" in n for n in adapters)  # all-linear leaves the output head alone
    with torch.no_grad():
        fresh = model(input_ids=IDS).logits
        torch.testing.assert_close(fresh, _base(tiny_path)(input_ids=IDS).logits)  # B = 0: the base, exactly
    _randomise_adapters(model)

    oracle = get_peft_model(_base(tiny_path), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    oracle.load_state_dict({lora.FILE_PREFIX + n: v for n, v in model.state_dict().items()})
    expected = oracle.merge_and_unload().state_dict()
    merged = lora.merged_state(model.state_dict(), plan.scaling)
    assert set(merged) == set(expected)
    for name, value in expected.items():
        torch.testing.assert_close(merged[name], value, rtol=1e-6, atol=1e-6)
    with_merged = _base(tiny_path)
    with_merged.load_state_dict(merged)
    with torch.no_grad():
        torch.testing.assert_close(with_merged(input_ids=IDS).logits, model(input_ids=IDS).logits,
                                   rtol=1e-4, atol=1e-5)


def test_adapters_off_runs_the_base_model(tiny_path: Path) -> None:
    model = _base(tiny_path)
    lora.inject(model, LoraPlan(rank=4, alpha=8.0, target_modules="all-linear"))
    _randomise_adapters(model, seed=1)
    with torch.no_grad():
        adapted = model(input_ids=IDS).logits
        with lora.adapters_off(model):
            off = model(input_ids=IDS).logits
        again = model(input_ids=IDS).logits
        base = _base(tiny_path)(input_ids=IDS).logits
    torch.testing.assert_close(off, base)
    assert not torch.allclose(adapted, base)
    torch.testing.assert_close(again, adapted)
    assert all(p.requires_grad for n, p in model.named_parameters() if lora.is_adapter(n))


def test_targets_that_are_not_linear_layers_are_refused(tiny_path: Path) -> None:
    with pytest.raises(lora.LoraError, match=r"embed_tokens is a Embedding; adapters are supported on linear"):
        lora.inject(_base(tiny_path), LoraPlan(rank=2, alpha=2.0, target_modules=("embed_tokens", "q_proj")))
    with pytest.raises(lora.LoraError, match=r"target_modules: .*not_a_module"):
        lora.inject(_base(tiny_path), LoraPlan(rank=2, alpha=2.0, target_modules=("not_a_module",)))


def _lora_trainer(tiny_path: Path, root: Path, **overrides: Any) -> FSDPTrainer:
    plan = make_trainer_plan(tiny_path, root, "grpo", world_size=1, micro_batch_size=3, **{
        "model.lora_configs": [{"lora_rank": 4, "lora_alpha": 8}],
        "algorithm.kl_loss_fn": "low_var_kl",
        "algorithm.kl_loss_fn_args": {"kl_coef": 0.1},
        "algorithm.optimizer.lr": 5e-2,
        **overrides,
    })
    return FSDPTrainer(plan, world_size=1, in_process=True)


def test_a_grpo_run_trains_the_adapters_only_against_the_base_as_reference(
    ray_local: Any, tiny_path: Path, tmp_path: Path
) -> None:
    experiences = make_experiences(groups=2, group_size=3, seed=4, logprobs=True)
    trainer = _lora_trainer(tiny_path, tmp_path)
    try:
        worker = trainer.workers[0]
        in_optimizer = [p for group in worker.optimizer.param_groups for p in group["params"]]
        adapters = [p for n, p in worker.actor.named_parameters() if lora.is_adapter(n)]
        assert {id(p) for p in in_optimizer} == {id(p) for p in adapters}  # the frozen base is never in it
        assert worker.reference is None and worker.reference_is_base  # no second copy of the model
        bases = {n: p.detach().to_local().clone() for n, p in worker.actor.named_parameters()
                 if not lora.is_adapter(n)}
        start = trainer.full_state_dict()
        metrics = [trainer.train_step(experiences) for _ in range(3)]
        assert metrics[0]["kl/loss_kl"] == pytest.approx(0.0, abs=1e-7)  # B = 0: the policy is still the base
        assert metrics[-1]["kl/loss_kl"] > 0  # the adapter moved; the reference (adapters off) did not
        for name, parameter in worker.actor.named_parameters():
            if not lora.is_adapter(name):
                assert torch.equal(parameter.detach().to_local(), bases[name]), name
        end = trainer.full_state_dict()
        assert set(end) == set(start) == set(_base(tiny_path).state_dict())  # the base model's names
        changed = {n for n in start if not torch.equal(start[n], end[n])}
        assert changed and all(n.endswith("proj.weight") for n in changed)
    finally:
        trainer.shutdown()


def test_a_checkpoint_holds_the_adapters_and_resumes_them(ray_local: Any, tiny_path: Path, tmp_path: Path) -> None:
    from torch.distributed.checkpoint import FileSystemReader

    experiences = make_experiences(groups=2, group_size=3, seed=5, logprobs=True)
    first = _lora_trainer(tiny_path, tmp_path)
    try:
        for _ in range(2):
            first.train_step(experiences)
        folder = Path(first.save_checkpoint())
        saved = FileSystemReader(str(folder / "actor")).read_metadata().state_dict_metadata
        model_keys = [key for key in saved if key.startswith("model.")]
        assert model_keys and all(lora.is_adapter(key) for key in model_keys)
        after_two = first.full_state_dict()
        third = first.train_step(experiences)
        after_three = first.full_state_dict()
    finally:
        first.shutdown()
    resumed = _lora_trainer(tiny_path, tmp_path / "again")
    try:
        resumed.resume(folder)
        for name, value in resumed.full_state_dict().items():
            torch.testing.assert_close(value, after_two[name], rtol=0, atol=0)
        again = resumed.train_step(experiences)  # the optimizer's moments came back too: the same third step
        assert again["loss"] == pytest.approx(third["loss"], rel=1e-5, abs=1e-8)
        for name, value in resumed.full_state_dict().items():
            torch.testing.assert_close(value, after_three[name], rtol=1e-5, atol=1e-7)
    finally:
        resumed.shutdown()
    full = FSDPTrainer(make_trainer_plan(tiny_path, tmp_path / "full", "grpo", world_size=1), world_size=1,
                       in_process=True)
    try:
        with pytest.raises(Exception, match=r"holds a LoRA adapter, but this run trains the full model"):
            full.resume(folder)
    finally:
        full.shutdown()


def test_convert_writes_the_merged_model_or_a_peft_adapter_folder_a_run_can_start_from(
    ray_local: Any, tiny_path: Path, tmp_path: Path
) -> None:
    from peft import PeftModel

    from trinity.manager.checkpoint_converter import ConversionError, convert_checkpoint

    experiences = make_experiences(groups=2, group_size=3, seed=6, logprobs=True)
    trainer = _lora_trainer(tiny_path, tmp_path)
    try:
        for _ in range(2):
            trainer.train_step(experiences)
        folder = Path(trainer.save_checkpoint())
        trained = trainer.full_state_dict()
    finally:
        trainer.shutdown()
    merged = _base(convert_checkpoint(folder, tmp_path / "merged"))
    for name, value in merged.state_dict().items():
        torch.testing.assert_close(value, trained[name], rtol=1e-6, atol=1e-7)
    adapter_dir = convert_checkpoint(folder, tmp_path / "adapter", adapter=True)
    assert sorted(p.name for p in adapter_dir.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    peft_model = PeftModel.from_pretrained(_base(tiny_path), str(adapter_dir))
    with torch.no_grad():
        torch.testing.assert_close(peft_model(input_ids=IDS).logits, merged(input_ids=IDS).logits,
                                   rtol=1e-4, atol=1e-5)
    with pytest.raises(ConversionError, match=r"is not a local folder; pass --model-path"):
        state = json.loads((folder / "trainer_state.json").read_text())
        (folder / "trainer_state.json").write_text(json.dumps({**state, "model_path": "gone/model"}))
        convert_checkpoint(folder, tmp_path / "nowhere", check=False)

    # a new run starting from the exported folder starts where the checkpoint was
    restarted = _lora_trainer(tiny_path, tmp_path / "from-folder",
                              **{"model.lora_configs": [{"path": str(adapter_dir)}]})
    try:
        for name, value in restarted.full_state_dict().items():
            torch.testing.assert_close(value, trained[name], rtol=1e-6, atol=1e-7)
    finally:
        restarted.shutdown()


def test_the_colocate_shared_file_carries_the_merged_weights_of_each_version(
    ray_local: Any, tiny_path: Path, tmp_path: Path
) -> None:
    from trinity.weight_transport.shared_file import SharedWeights

    experiences = make_experiences(groups=2, group_size=3, seed=7, logprobs=True)
    trainer = _lora_trainer(tiny_path, tmp_path)
    try:
        worker = trainer.workers[0]
        for version in (1, 2):
            trainer.train_step(experiences)
            path, metas, _ = worker.publish_shared_weights(str(tmp_path / "weights.bin"), version)
            engine_view = SharedWeights.attach(path, metas)
            expected = trainer.full_state_dict()
            with engine_view.reading() as seen:
                assert seen == version
                for name, tensor in engine_view.tensors.items():
                    torch.testing.assert_close(tensor, expected[name], rtol=0, atol=0)
            assert "model.layers.0.self_attn.q_proj.weight" in engine_view.tensors  # base names, merged
            engine_view.close()
    finally:
        trainer.shutdown()


def test_dry_run_shows_the_adapter_and_a_missing_peft_is_one_line(
    tiny_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    import yaml

    from trinity.cli.main import main

    config = tmp_path / "lora.yaml"
    config.write_text(yaml.safe_dump({
        "mode": "train", "checkpoint_root_dir": str(tmp_path),
        "model": {"model_path": str(tiny_path), "max_prompt_tokens": 16, "max_response_tokens": 8,
                  "lora_configs": [{"lora_rank": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}]},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 2, "kl_loss_fn": "k2"},
        "buffer": {"batch_size": 2, "trainer_input": {"experience_buffer": {"name": "e", "storage_type": "sql"}}},
    }))
    assert main(["run", "--config", str(config), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert ("LoRA: rank 8, alpha 16 on q_proj, v_proj (fresh); the base model frozen; reference: the base "
            "(adapters off); hf engines get merged weights, vllm engines the adapter; checkpoints hold the "
            "adapters") in out

    # peft is a test dependency, so its absence is simulated: the import system reports no such package
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "peft" else real_find_spec(name, *a))
    assert main(["run", "--config", str(config), "--dry-run"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"trinity: error: {config}: model.lora_configs[0]: LoRA needs the peft package, which is not "
                   "installed; run pip install 'trinity-rft[lora]'"]


def test_the_reference_models_offload_keys_have_no_effect_with_lora() -> None:
    plan = make_plan({"model.lora_configs": [{}],
                      "trainer.trainer_config.actor_rollout_ref.ref.fsdp_config.param_offload": True})
    assert plan.trainer.reference_offload.any is False  # no second model: the reference is the actor
    assert any("ref.fsdp_config offload has no effect here: with LoRA" in note for note in plan.notes)


def test_lora_with_parameter_offload_trains_as_without(ray_local: Any, tiny_path: Path, tmp_path: Path) -> None:
    """FSDP2's offload policy with the frozen base and trainable adapters in the same blocks: the same three steps."""
    experiences = make_experiences(groups=2, group_size=3, seed=8, logprobs=True)
    results = {}
    for name, extra in (("plain", {}), ("offload", {
            "trainer.trainer_config.actor_rollout_ref.actor.fsdp_config.param_offload": True})):
        trainer = _lora_trainer(tiny_path, tmp_path / name, **extra)
        try:
            results[name] = ([trainer.train_step(experiences) for _ in range(3)], trainer.full_state_dict())
        finally:
            trainer.shutdown()
    (plain, plain_weights), (offloaded, offloaded_weights) = results["plain"], results["offload"]
    for before, after in zip(plain, offloaded, strict=True):
        assert after["loss"] == pytest.approx(before["loss"], rel=1e-6)
        assert after["grad_norm"] == pytest.approx(before["grad_norm"], rel=1e-6) and before["grad_norm"] > 0
    for name, value in plain_weights.items():
        torch.testing.assert_close(offloaded_weights[name], value, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("world", [1, 2])
def test_a_vllm_engine_gets_the_adapter_alone_and_serves_the_merged_policy(
    ray_local: Any, tiny_path: Path, tmp_path: Path, world: int
) -> None:
    """vLLM (a double here) serves the adapter from a LoRA slot: a sync sends the adapter only, by any method,
    and the engine's replies are those of the merged weights (the hf engine loaded with them is the oracle)."""
    import dataclasses

    from tests.doubles.vllm_path import vllm_double
    from trinity.common.constants import SyncMethod
    from trinity.common.models.engine import SamplingParams
    from trinity.common.models.hf_engine import HFEngine
    from trinity.synchronizer.synchronizer import Synchronizer

    plan = make_trainer_plan(tiny_path, tmp_path, "grpo", world_size=world, micro_batch_size=3, **{
        "model.lora_configs": [{"lora_rank": 4, "lora_alpha": 8}], "algorithm.optimizer.lr": 0.05})
    trainer = FSDPTrainer(plan, world_size=world)
    greedy = SamplingParams(temperature=0.0, max_tokens=8)
    try:
        trainer.train_step(make_experiences(groups=2, group_size=3, seed=1, logprobs=True))
        merged = trainer.full_state_dict()
        full_bytes = sum(v.numel() * v.element_size() for v in merged.values())
        with vllm_double():
            from trinity.common.models.vllm_engine import VLLMEngine

            engine = VLLMEngine(str(tiny_path), dtype="float32", lora={"rank": 4, "path": None})
            try:
                assert engine.takes_adapters()
                base_reply = engine.generate(["What is 3 plus 4?"], greedy)[0][0]
                for offset, method in enumerate(("online", "memory", "checkpoint"), start=1):
                    sync = Synchronizer(SyncMethod.parse(method), trainer, [engine],
                                        dataclasses.replace(plan.sync, bucket_size_mb=1),
                                        checkpoint_path=tmp_path / "sync")
                    try:
                        report = sync.sync(10 * offset)
                    finally:
                        sync.close()
                    assert engine.model_version() == 10 * offset
                    assert engine.state_dict_checksum() == trainer.state_dict_checksums(adapter=True)[0]
                    assert 0 < report.bytes < full_bytes / 4  # the adapter alone
                served = engine.generate(["What is 3 plus 4?"], greedy)[0][0]
                assert len(asyncio_run(engine.engine.list_loras())) == 1  # the previous adapters were removed
            finally:
                engine.shutdown()
    finally:
        trainer.shutdown()
    reference = HFEngine(str(tiny_path), torch_threads=1)
    expected = reference.generate(["What is 3 plus 4?"], greedy)[0][0]
    assert torch.equal(base_reply.response_tokens, expected.response_tokens)  # before any sync: the base
    reference.load_state_dict(merged, version=1)
    expected = reference.generate(["What is 3 plus 4?"], greedy)[0][0]
    assert torch.equal(served.response_tokens, expected.response_tokens)
    torch.testing.assert_close(served.logprobs, expected.logprobs, rtol=1e-4, atol=1e-4)
    assert abs(float(served.logprobs[0]) - float(base_reply.logprobs[0])) > 1e-4  # the adapter is in the replies


def asyncio_run(coroutine: Any) -> Any:
    import asyncio

    return asyncio.run(coroutine)
