"""LoRA in a real mode-both run: two trainer ranks train an adapter, the engine gets merged weights.

Real Ray, two FSDP2 trainer ranks (the sync streams one merged tensor at a
time from the shards), an engine with the tiny model, online sync with
checksums verified (the engine's weights must equal the trainer's merged
ones after every sync), KL against the reference model (the base, adapters off).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.e2e.test_run_both import job_config, records
from trinity.cli.main import main
from trinity.common.config import parse_config
from trinity.launcher import run_plan
from trinity.planner.run import resolve_run

RANK = 4


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trinity.common.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny")


def test_a_lora_run_syncs_merged_weights_and_checkpoints_its_adapters(tmp_path: Path, tiny_model: Path) -> None:
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    raw = job_config(tmp_path, tiny_model, **{
        "model.lora_configs": [{"name": "lora", "lora_rank": RANK, "lora_alpha": 2 * RANK}],
        "algorithm.kl_loss_fn": "low_var_kl",
        "algorithm.kl_loss_fn_args": {"kl_coef": 0.05},
        "algorithm.optimizer.lr": 1e-2,
        "buffer.explorer_input.eval_tasksets": [],
        "explorer.eval_on_startup": False,
    })
    assert run_plan(resolve_run(parse_config(raw))) == 0
    run_dir = tmp_path / "ckpt" / "e2e" / "run"
    train = [r for r in records(run_dir) if r["phase"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert train[0]["metrics"]["kl/loss_kl"] == pytest.approx(0.0, abs=1e-6)  # B = 0: the adapter starts as the base
    assert train[-1]["metrics"]["kl/loss_kl"] > 0  # the reference stays the base while the adapter moves
    # every sync: the engine's weights hash to the trainer's merged weights, which are the full model's size
    assert all(r["metrics"]["sync/checksum_match"] == 1 for r in train)
    full_bytes = sum(p.numel() * 4 for p in AutoModelForCausalLM.from_pretrained(tiny_model).parameters())
    assert all(r["metrics"]["sync/bytes"] == full_bytes for r in train)

    checkpoint = run_dir / "checkpoints" / "step-3"
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert state["lora"]["rank"] == RANK
    from torch.distributed.checkpoint import FileSystemReader

    saved = FileSystemReader(str(checkpoint / "actor")).read_metadata().state_dict_metadata
    weights = [key for key in saved if key.startswith("model.")]
    assert weights and all(".lora_A." in key or ".lora_B." in key for key in weights), weights[:5]

    # the run's Hugging Face export is the merged model; trinity convert --adapter gives the PEFT folder
    merged = AutoModelForCausalLM.from_pretrained(checkpoint / "huggingface", dtype=torch.float32)
    adapter_dir = tmp_path / "adapter"
    assert main(["convert", str(checkpoint), str(adapter_dir), "--adapter"]) == 0
    assert len(load_file(str(adapter_dir / "adapter_model.safetensors"))) == len(weights)
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    with_adapter = PeftModel.from_pretrained(base, str(adapter_dir))
    ids = torch.tensor([[5, 17, 42, 7, 99, 3]])
    with torch.no_grad():
        torch.testing.assert_close(with_adapter(input_ids=ids).logits, merged(input_ids=ids).logits,
                                   rtol=1e-4, atol=1e-5)
        untouched = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
        assert not torch.allclose(untouched(input_ids=ids).logits, merged(input_ids=ids).logits)
