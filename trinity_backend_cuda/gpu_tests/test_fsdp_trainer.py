"""The FSDP2 trainer, in-process (one rank, mode train), takes two GRPO steps on the device: loss, step time."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_support import EXPECTED_DEVICE


def _experiences(groups: int, group_size: int, vocab: int, seed: int) -> list[Any]:
    """Return GRPO groups of synthetic rollouts (token ids below ``vocab``), rewards varying within each group."""
    import torch

    from trinity.common.experience import Experience

    generator = torch.Generator().manual_seed(seed)
    out = []
    for group in range(groups):
        prompt = torch.randint(3, vocab, (8 + group % 5,), generator=generator)
        for run in range(group_size):
            response = torch.randint(3, vocab, (16 + (run * 5 + group) % 24,), generator=generator)
            out.append(Experience(tokens=torch.cat([prompt, response]), prompt_length=len(prompt),
                                  reward=float((run * 7 + group) % 3), group_id=f"task-{group}", run_id=run))
    return out


def test_fsdp_trainer(selected_backend: str, tiny_model: Path, workdir: Path, detail: Callable[[str], None]) -> None:
    """FSDPTrainer (FSDP2, in-process, one rank) runs two GRPO steps; loss, step time, parameter devices."""
    import torch

    from trinity.buffer import pipeline_for_plan
    from trinity.common.config import parse_config
    from trinity.common.models.checksum import state_dict_checksum
    from trinity.planner.run import resolve_run
    from trinity.trainer.trainer import FSDPTrainer

    plan = resolve_run(parse_config({
        "mode": "train", "project": "gpu-check", "name": "fsdp-trainer",
        "checkpoint_root_dir": str(workdir / "checkpoints"),
        "model": {"model_path": str(tiny_model), "max_prompt_tokens": 256, "max_response_tokens": 64},
        "cluster": {"node_num": 1, "gpu_per_node": 1},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "optimizer": {"lr": 1e-3},
                      # a KL loss exercises the reference model too
                      "kl_loss_fn": "k2", "kl_loss_fn_args": {"kl_coef": 0.01}},
        "explorer": {"rollout_model": {"dtype": "float32"}},
        "trainer": {"save_interval": 0, "use_dynamic_bsz": False,
                    "use_torch_compile": False,  # inductor costs ~20 s per start; test_backends reports support
                    "trainer_config": {"actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": 8}}}},
        "monitor": {"monitor_type": "none"},
    }))
    assert plan.algorithm.use_reference, "the test's config no longer uses a reference model; fix the KL settings"
    on_gpu = EXPECTED_DEVICE != "cpu"
    started = time.monotonic()
    trainer = FSDPTrainer(plan, in_process=True, use_torch_compile=False)
    setup_s = time.monotonic() - started
    try:
        info = trainer.rank_info[0]
        devices = set()
        for parameter in trainer.workers[0].actor.parameters():
            local = parameter.to_local() if hasattr(parameter, "to_local") else parameter
            devices.add(str(local.device))
        if on_gpu:
            torch.cuda.reset_peak_memory_stats()
        before = state_dict_checksum(trainer.full_state_dict())
        pipeline = pipeline_for_plan(plan, pad_token_id=trainer.pad_token_id)  # GRPO's advantages, as in a run
        first = trainer.train_step(pipeline.process(_experiences(groups=4, group_size=4, vocab=300, seed=0)))
        second = trainer.train_step(pipeline.process(_experiences(groups=4, group_size=4, vocab=300, seed=1)))
        after = state_dict_checksum(trainer.full_state_dict())
        peak = torch.cuda.max_memory_allocated() / 2**20 if on_gpu else 0.0
    finally:
        trainer.shutdown()
    text = (f"loss {first['loss']:.4f} -> {second['loss']:.4f}, grad_norm {first['grad_norm']:.3f}, step time "
            f"{first['step_time_s']:.2f} s (first) / {second['step_time_s']:.2f} s, setup {setup_s:.1f} s, "
            f"{int(first['tokens'])} tokens/step, params on {','.join(sorted(devices))}, pg {info['backend']}"
            + (f", peak {peak:.0f} MiB" if peak else ""))
    detail(text)
    problems = []
    if not all(d.startswith(EXPECTED_DEVICE) for d in devices):
        problems.append(f"parameters on {sorted(devices)}, expected {EXPECTED_DEVICE}")
    for step in (first, second):
        if not math.isfinite(step["loss"]) or not math.isfinite(step["grad_norm"]):
            problems.append(f"non-finite loss/grad_norm at step {int(step['step'])}")
        elif step["grad_norm"] <= 0:
            problems.append(f"no gradient at step {int(step['step'])} (grad_norm 0): the advantages are all zero")
    if before == after:
        problems.append("the weights did not change after two optimizer steps")
    expected_pg = "cpu:gloo" if not on_gpu else f"cpu:gloo,{EXPECTED_DEVICE}:nccl"
    if info["backend"] != expected_pg:
        problems.append(f"process group backend {info['backend']!r}, expected {expected_pg!r}")
    assert not problems, "; ".join(problems) + " | " + text
