"""LoRA against full fine-tuning: trainable parameters, optimizer state, sync and checkpoint bytes, step time.

For each model size, two measurements per setting (full model, then a LoRA
adapter of ``--rank`` on ``all-linear``, upstream's default targets):

- ``trinity run`` as a user runs it (the CPU quickstart's config on this
  model: Ray, one trainer rank, one ``hf`` engine, online sync, ``--steps``
  steps): the sync's bytes per version, the median train step time, the
  checkpoint's ``actor/`` bytes, the whole run's wall time.
- The FSDP2 trainer (one Ray actor rank) after one step of made-up rollouts:
  trainable parameters and optimizer-state bytes (AdamW's two moments), read
  from the rank itself (``FSDPTrainer.memory_report``), and with LoRA the
  bytes a sync into ``vllm`` engines' LoRA slots sends (the adapter alone;
  vLLM cannot run on a CPU, so ``trinity run`` above syncs an ``hf`` engine,
  which gets merged weights).

    python benchmarks/bench_lora.py [--sizes 5m 40m] [--rank 32] [--steps 4]

Writes ``benchmarks/results/lora.json`` and prints a table (ratios are LoRA / full, one run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart" / "cpu.yaml"
SIZES = {  # hidden, layers, heads, intermediate
    "5m": (256, 6, 4, 768),
    "40m": (512, 10, 8, 1792),
}


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "RAY_AUTH_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false",
            "RAY_ADDRESS": "local"}


def build_model(size: str, workdir: Path) -> tuple[Path, int]:
    """Build the sized tiny model; return its folder and parameter count."""
    from transformers import AutoModelForCausalLM

    from trinity.common.config import TinyModelConfig
    from trinity.common.models.tiny import build_tiny_model

    hidden, layers, heads, intermediate = SIZES[size]
    path = build_tiny_model(workdir / f"model-{size}", TinyModelConfig(
        hidden_size=hidden, num_layers=layers, num_heads=heads, intermediate_size=intermediate))
    return path, sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(path).parameters())


def _lora_entry(rank: int) -> list[dict[str, Any]]:
    return [{"name": "lora", "lora_rank": rank, "lora_alpha": rank}]


def run_trinity(model: Path, workdir: Path, name: str, steps: int, rank: int | None) -> dict[str, Any]:
    """Run ``trinity run`` on the quickstart's config with ``model``; return its sync, step and checkpoint figures."""
    raw = yaml.safe_load(QUICKSTART.read_text())
    raw["name"] = name
    raw["checkpoint_root_dir"] = str(workdir / "ckpt")
    raw["model"].pop("tiny", None)
    raw["model"]["model_path"] = str(model)
    raw["buffer"]["total_steps"] = steps
    raw["buffer"]["explorer_input"]["eval_tasksets"] = []
    raw.setdefault("explorer", {})["eval_on_startup"] = False
    raw.setdefault("monitor", {})["progress"] = False
    raw["buffer"]["explorer_input"]["taskset"]["path"] = str(REPO / "examples/quickstart/tasks/train.jsonl")
    if rank is not None:
        raw["model"]["lora_configs"] = _lora_entry(rank)
    config = workdir / f"{name}.yaml"
    config.write_text(yaml.safe_dump(raw))
    started = time.monotonic()
    done = subprocess.run(["trinity", "run", "--config", str(config)], check=False, env=_env(), capture_output=True,
                          text=True,
                          timeout=3600, cwd=workdir)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"trinity run {name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    run_dir = workdir / "ckpt" / raw["project"] / name
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = [r["metrics"] for r in records if r["phase"] == "train"]
    checkpoints = sorted((run_dir / "checkpoints").glob("step-*"))
    actor = checkpoints[-1] / "actor"
    return {
        "sync_bytes": int(statistics.median(m["sync/bytes"] for m in train if "sync/bytes" in m)),
        "train_step_s": statistics.median(m["time/train_s"] for m in train[1:] or train),
        "checkpoint_actor_bytes": sum(f.stat().st_size for f in actor.rglob("*") if f.is_file()),
        "wall_s": wall,
        "steps": len(train),
    }


def trainer_memory(model: Path, workdir: Path, rank: int | None) -> dict[str, int]:
    """One FSDP2 rank (a Ray actor), one GRPO step of made-up rollouts; return its memory report."""
    import torch

    from trinity.common.config import parse_config
    from trinity.common.experience import Experience
    from trinity.planner.run import resolve_run
    from trinity.trainer.trainer import FSDPTrainer

    raw: dict[str, Any] = {
        "mode": "train", "checkpoint_root_dir": str(workdir / "mem"), "project": "bench", "name": "mem",
        "model": {"model_path": str(model), "max_prompt_tokens": 16, "max_response_tokens": 8},
        "cluster": {"gpu_per_node": 1},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4},
        "buffer": {"batch_size": 2, "trainer_input": {"experience_buffer": {"name": "e", "storage_type": "sql"}}},
    }
    if rank is not None:
        raw["model"]["lora_configs"] = _lora_entry(rank)
    plan = resolve_run(parse_config(raw))
    generator = torch.Generator().manual_seed(0)
    experiences = [
        Experience(tokens=torch.randint(3, 300, (24,), generator=generator), prompt_length=16,
                   reward=float(i % 3), group_id=f"g{i // 4}", run_id=i % 4)
        for i in range(8)
    ]
    trainer = FSDPTrainer(plan, world_size=1)
    try:
        trainer.train_step(experiences)
        report = trainer.memory_report()
        if rank is not None:  # what a sync into vLLM's LoRA slots sends: the adapter alone
            report["adapter_sync_bytes"] = int(trainer._on_all("adapter_for_sync")[0][1])
        return report
    finally:
        trainer.shutdown()


def main() -> None:
    """Run the benchmark and write its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--rank", type=int, default=32, help="LoRA rank (alpha = rank, upstream's default)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "lora.json")
    args = parser.parse_args()

    import ray

    results: dict[str, Any] = {"rank": args.rank, "steps": args.steps, "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="bench-lora-") as tmp:
        workdir = Path(tmp)
        for size in args.sizes:
            model, params = build_model(size, workdir)
            row: dict[str, Any] = {"parameters": params}
            for setting, rank in (("full", None), ("lora", args.rank)):
                figures = run_trinity(model, workdir, f"{size}-{setting}", args.steps, rank)
                ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
                try:
                    figures.update(trainer_memory(model, workdir / f"{size}-{setting}", rank))
                finally:
                    ray.shutdown()
                row[setting] = figures
                print(f"{size} {setting}: {figures}", file=sys.stderr)
            results["sizes"][size] = row
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")

    keys = ("trainable_params", "optimizer_state_bytes", "sync_bytes", "checkpoint_actor_bytes", "train_step_s")
    print(f"| model | setting | {' | '.join(keys)} |")
    print("|---|---|" + "---|" * len(keys))
    for size, row in results["sizes"].items():
        for setting in ("full", "lora"):
            cells = [f"{row[setting][k]:,.3f}" if isinstance(row[setting][k], float) else f"{row[setting][k]:,}"
                     for k in keys]
            print(f"| {size} ({row['parameters'] / 1e6:.1f}M) | {setting} | {' | '.join(cells)} |")
        ratios = [row["lora"][k] / row["full"][k] if row["full"][k] else float("nan") for k in keys]
        print(f"| {size} | LoRA / full | {' | '.join(f'{r:.3f}x' for r in ratios)} |")
        adapter = row["lora"].get("adapter_sync_bytes")
        if adapter:
            print(f"| {size} | vllm LoRA-slot sync | {adapter:,} bytes = {adapter / row['full']['sync_bytes']:.3f}x "
                  "of the full sync |")


if __name__ == "__main__":
    main()
