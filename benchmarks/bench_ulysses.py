"""Ulysses sequence parallelism on CPU ranks: SP=2 against SP=1 on the same batch, exactness and memory per rank.

FSDP2 trainers (Ray actor ranks, gloo) on the same GRPO batch of long
rollouts: one rank running every sequence whole, packed (SP=1, as
``use_remove_padding`` runs it: one sequence, block-diagonal attention mask)
and padded (``sp1_padded``: rows side by side, causal attention per row), and
two ranks sharing each packed sequence (SP=2, one Ulysses group, which runs
attention row by row). Reported:

- the loss and gradient norm of one step, and the largest difference of any
  weight's change (SGD at lr 1, so the change is the gradient), SP=2 vs SP=1;
- per rank, the bytes the actor's forward keeps for its backward on the
  step's micro-batch (activation memory; the gathered weights left aside,
  ``FSDPTrainer.activation_bytes``);
- the step's wall time (the SP=2 ranks share the machine's cores).

    python benchmarks/bench_ulysses.py [--rows 4] [--length 1024]

Writes ``benchmarks/results/ulysses.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHAPE = (256, 6, 4, 768)  # hidden, layers, heads, intermediate: the 5.2M model of the other benchmarks


def experiences(rows: int, length: int, vocab: int) -> list[Any]:
    """GRPO groups of ``rows`` rollouts of ``length`` tokens (a quarter of them prompt)."""
    import torch

    from trinity.common.experience import Experience

    generator = torch.Generator().manual_seed(0)
    prompt = length // 4
    return [Experience(tokens=torch.randint(3, vocab, (length - i,), generator=generator), prompt_length=prompt,
                       reward=float(i % 2), group_id=f"g{i // 2}", run_id=i % 2) for i in range(rows)]


def main() -> None:
    """Run the benchmark and write its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "ulysses.json")
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")

    import ray
    from transformers import AutoModelForCausalLM

    from trinity.common.config import TinyModelConfig, parse_config
    from trinity.common.models.tiny import build_tiny_model
    from trinity.planner.run import resolve_run
    from trinity.trainer.trainer import FSDPTrainer

    results: dict[str, Any] = {"rows": args.rows, "length": args.length, "settings": {}}
    with tempfile.TemporaryDirectory(prefix="bench-ulysses-") as tmp:
        hidden, layers, heads, intermediate = SHAPE
        model = build_tiny_model(Path(tmp) / "model", TinyModelConfig(
            hidden_size=hidden, num_layers=layers, num_heads=heads, intermediate_size=intermediate))
        results["parameters"] = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model).parameters())
        vocab = int(AutoModelForCausalLM.from_pretrained(model).config.vocab_size)
        batch = experiences(args.rows, args.length, vocab)
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}})
        deltas = {}
        try:
            for name, ranks, packed in (("sp1_padded", 1, False), ("sp1", 1, True), ("sp2", 2, True)):
                raw = {
                    "mode": "train", "project": "bench", "name": name, "checkpoint_root_dir": str(Path(tmp) / name),
                    "model": {"model_path": str(model), "max_prompt_tokens": args.length // 4,
                              "max_response_tokens": args.length},
                    "cluster": {"gpu_per_node": ranks},
                    "algorithm": {"algorithm_type": "grpo", "repeat_times": 2,
                                  "optimizer": {"optimizer_type": "sgd", "lr": 1.0}},
                    "buffer": {"batch_size": args.rows // 2,
                               "trainer_input": {"experience_buffer": {"name": "e", "storage_type": "sql"}}},
                    "trainer": {"ulysses_sequence_parallel_size": ranks, "use_dynamic_bsz": False,
                                "trainer_config": {"actor_rollout_ref": {
                                    "model": {"use_remove_padding": packed, "enable_gradient_checkpointing": False},
                                    "actor": {"ppo_micro_batch_size_per_gpu": args.rows}}}},
                }
                trainer = FSDPTrainer(resolve_run(parse_config(raw)), world_size=ranks)
                try:
                    activation = trainer.activation_bytes(batch)
                    before = trainer.full_state_dict()
                    started = time.perf_counter()
                    metrics = trainer.train_step(batch)
                    seconds = time.perf_counter() - started
                    deltas[name] = {k: v - before[k] for k, v in trainer.full_state_dict().items()}
                finally:
                    trainer.shutdown()
                results["settings"][name] = {"ranks": ranks, "activation_bytes_per_rank": activation,
                                             "loss": metrics["loss"], "grad_norm": metrics["grad_norm"],
                                             "step_s": seconds}
        finally:
            ray.shutdown()
    sp1, sp2 = results["settings"]["sp1"], results["settings"]["sp2"]
    results["max_gradient_difference"] = max(float((deltas["sp2"][k] - v).abs().max())
                                             for k, v in deltas["sp1"].items())
    results["largest_gradient"] = max(float(v.abs().max()) for v in deltas["sp1"].values())
    results["loss_difference"] = abs(sp2["loss"] - sp1["loss"])
    results["grad_norm_relative_difference"] = abs(sp2["grad_norm"] - sp1["grad_norm"]) / sp1["grad_norm"]
    results["activation_ratio"] = max(sp2["activation_bytes_per_rank"]) / sp1["activation_bytes_per_rank"][0]
    padded = results["settings"]["sp1_padded"]
    results["activation_ratio_to_padded"] = (max(sp2["activation_bytes_per_rank"])
                                             / padded["activation_bytes_per_rank"][0])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
