"""In-process micro-benchmarks of the RFT loop's parts, each a ratio against a baseline measured in the same run.

Not the user-facing figure: part 2 below runs trinity's explore, train and
sync in this one Python process (an in-process engine, memory sync, no Ray
actors, no experience queue), so it leaves out what ``trinity run`` pays
around them. The end-to-end comparison with TRL is
``benchmarks/bench_vs_trl.py``; quote that one.

Absolute timings depend on the machine and its load, so no absolute figure is
a target: every figure is set against a baseline taken in the same run,
interleaved with it.

1. Online weight sync. Two Ray actors join one
   :class:`~trinity.weight_transport.group.WeightSyncGroup` on the CPU
   backend's collective (gloo), with the actor class and the model-like state
   dict of :mod:`trinity.synchronizer.benchmark` (about 100 MiB of float32
   tensors of 4 MiB, 1 MiB and 64 KiB). Each round times, in a rotating order,
   a raw ``pg.broadcast`` of the same bytes as one flat tensor (the baseline;
   the sender concatenates before the clock starts, the receiver allocates
   before it) and the bucketed ``broadcast_state_dict`` / ``receive_state_dict``
   (packing and unpacking included) with the default bucket
   (``synchronizer.bucket_size_mb``, 64 MiB) and with 16 MiB. A round's time is
   the slower of the two actors, from a one-element synchronising broadcast to
   the last byte in place. Reported: the median over rounds of the per-round
   ratio bucketed / raw. Target <= 1.3x.

2. GRPO step throughput, trinity-rft against TRL's ``GRPOTrainer``, on the CPU,
   one trainer process, in this one Python process, with the same torch thread
   count. Same model (``build_tiny_model``, one folder loaded by both), same
   ``toy_repeat`` prompts (chat template with the generation prompt), same
   prompts per step, group size (``repeat_times`` / ``num_generations``), max
   new tokens, sampling (temperature 1, no top-k / top-p), learning rate
   (constant, no warm-up), AdamW (betas 0.9/0.999, no weight decay), gradient
   clipping at norm 1, float32, no gradient checkpointing, no KL term
   (trinity ``kl_loss_fn: none`` and ``kl_penalty_fn: none``, so no reference
   model; TRL ``beta=0``, its default, so none either), no entropy bonus
   (``entropy_loss_fn: none``), one optimizer step per batch (trinity
   ``ppo_epochs: 1`` and one micro-batch holding the whole batch, set through
   ``trainer.trainer_config.actor_rollout_ref.actor``; TRL
   ``num_iterations=1``, ``gradient_accumulation_steps=1``,
   ``per_device_train_batch_size`` = prompts x generations). Both losses are
   the PPO-clipped surrogate (epsilon 0.2) averaged over all response tokens of
   the batch (trinity ``token-mean``; TRL's default ``loss_type="dapo"``), with
   group advantages normalised by the group's standard deviation (trinity
   ``grpo``; TRL ``scale_rewards="group"``).

   One step does, per side:

   * trinity: build the tasks; the explorer's real
     :class:`~trinity.explorer.scheduler.Scheduler` runs one ``toy_repeat``
     workflow per prompt in runner threads (``explorer.runner_per_model`` =
     prompts per step) on an in-process :class:`~trinity.common.models.hf_engine.HFEngine`
     (a separate copy of the model; it batches concurrent requests and records
     each sampled token's log-prob while generating; the first runner's request
     is served as soon as it arrives, so a step usually takes two generate
     calls, counted in the table), the ``toy_repeat`` reward;
     then the group advantages (the buffer's experience pipeline, as in a run)
     and :meth:`FSDPTrainer.train_step` (``in_process=True``, FSDP2 over a
     process group of one): padding, one forward/backward,
     clipping, AdamW; then the weight sync into the engine:
     ``engine.load_state_dict(trainer.full_state_dict(), version)`` (the memory
     sync method without the Ray object store in between).
   * TRL: one iteration of ``Trainer.train``'s loop: fetch the prompts, generate
     with the training model itself (no second copy, so no weight sync), decode,
     the reward function (the same ``toy_repeat`` reward of
     :mod:`trinity.common.rewards`), group advantages, one forward/backward
     (TRL scores only the completion positions), clipping, AdamW, scheduler
     and callbacks; logging, evaluation and saving are off.

   The two run interleaved: TRL drives the loop, and a ``TrainerCallback`` runs
   trinity's steps between TRL's steps: after the warm-up steps of both,
   rounds of ``--round-steps`` TRL steps then as many trinity steps. A TRL
   step is timed from the end of the previous callback to the end of the step.
   Reported: steps/s and generated tokens/s (EOS counted, padding not) of each
   side, and the median over rounds of the per-round ratio trinity / TRL.
   Target >= 1.0x. Left unaligned: the random streams (both sample, so
   completions differ; with EOS rare under the untrained tiny model almost all
   rows run to the token limit; mean lengths are reported), trinity's extra
   pieces (log-probs recorded at sampling, the weight copy into the engine,
   the explorer's threads), and TRL's (the dataloader and Trainer machinery).

Both sides run with ``--threads`` torch threads (default 1: with more threads
than free cores, per-round ratios scatter widely).

Needs TRL (``pip install -e ".[bench]"``). Run ``.venv/bin/python benchmarks/bench_rft.py``;
it prints a table and writes JSON to ``benchmarks/results/rft.json`` (``--out`` to change). A run with
the defaults takes a few minutes on two CPU cores.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DEFAULT_OUT = REPO / "benchmarks" / "results" / "rft.json"
TARGET_SYNC_RATIO = 1.3
TARGET_GRPO_RATIO = 1.0


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("torch", "transformers", "ray", "trl", "accelerate", "trinity-rft"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


# --- 1. online weight sync ----------------------------------------------------------------


def bench_weight_sync(total_mb: int, bucket_mbs: Sequence[int], rounds: int) -> dict[str, Any]:
    """Bucketed broadcast against a raw broadcast of the same bytes between two Ray actors, rounds interleaved."""
    import ray

    import trinity.device
    from trinity.synchronizer.benchmark import peer_pair

    trinity.device.select_backend("cpu")
    backend = trinity.device.get_collective_backend()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        sender, receiver, total, metas = peer_pair(total_mb, backend, "bench-rft")
        variants: list[tuple[str, str, tuple[Any, ...]]] = [("raw", "raw", (total // 4,))]
        variants += [(f"bucketed_{mb}MiB", "bucketed", (metas, mb << 20)) for mb in bucket_mbs]

        def once(method: str, args: tuple[Any, ...]) -> float:
            sent, got = ray.get([getattr(sender, method).remote(*args), getattr(receiver, method).remote(*args)])
            return float(max(sent, got))

        for _, method, args in variants:  # warm-up: buffers, gloo pairs, page faults
            once(method, args)
        samples: dict[str, list[float]] = {name: [] for name, _, _ in variants}
        for index in range(rounds):
            shift = index % len(variants)
            for name, method, args in variants[shift:] + variants[:shift]:
                samples[name].append(once(method, args))
        ray.get([sender.close.remote(), receiver.close.remote()])
    finally:
        ray.shutdown()

    medians = {name: statistics.median(values) for name, values in samples.items()}
    per_bucket = {}
    for mb in bucket_mbs:
        name = f"bucketed_{mb}MiB"
        paired = [b / r for b, r in zip(samples[name], samples["raw"], strict=True)]
        per_bucket[f"{mb}"] = {
            "median_s": medians[name],
            "GBps": total / medians[name] / 1e9,
            "ratio_vs_raw": statistics.median(paired),
            "ratio_of_medians": medians[name] / medians["raw"],
            "ratio_of_best": min(samples[name]) / min(samples["raw"]),
            "per_round_ratios": paired,
        }
    default_mb = _default_bucket_mb()
    headline = per_bucket.get(str(default_mb), next(iter(per_bucket.values())))["ratio_vs_raw"]
    return {
        "backend": backend,
        "bytes": total,
        "tensors": len(metas),
        "rounds": rounds,
        "raw_median_s": medians["raw"],
        "raw_GBps": total / medians["raw"] / 1e9,
        "samples_s": samples,
        "bucket_MiB": per_bucket,
        "default_bucket_MiB": default_mb,
        "target": f"<= {TARGET_SYNC_RATIO}x (median per-round ratio, default bucket)",
        "met": all(entry["ratio_vs_raw"] <= TARGET_SYNC_RATIO for entry in per_bucket.values()),
        "met_default_bucket": headline <= TARGET_SYNC_RATIO,
    }


def _default_bucket_mb() -> int:
    from trinity.common.config import SynchronizerConfig

    return SynchronizerConfig().bucket_size_mb


# --- 2. GRPO step throughput ---------------------------------------------------------------


class _TrinityLoop:
    """trinity's explore -> train -> sync loop in this process, one step per :meth:`step`."""

    def __init__(self, model_path: Path, records: list[dict[str, str]], workdir: Path, args: argparse.Namespace):
        from trinity.buffer import pipeline_for_plan
        from trinity.common.config import parse_config
        from trinity.common.models.hf_engine import HFEngine
        from trinity.explorer.scheduler import Scheduler
        from trinity.planner.run import resolve_run
        from trinity.trainer.trainer import FSDPTrainer

        rows = args.batch * args.group
        # upstream Trinity-RFT's schema: the settings the module docstring lists, nothing left to defaults that matter
        self.plan = resolve_run(
            parse_config(
                {
                    "mode": "both",
                    "project": "bench",
                    "name": "rft",
                    "checkpoint_root_dir": str(workdir / "checkpoints"),
                    "model": {
                        "model_path": str(model_path),
                        "max_prompt_tokens": 256,
                        "max_response_tokens": args.max_new_tokens,
                        "temperature": 1.0,
                        "top_p": 1.0,
                        "top_k": -1,
                    },
                    "cluster": {"device": "cpu", "node_num": 1, "gpu_per_node": 2},
                    "buffer": {
                        "batch_size": args.batch,
                        "explorer_input": {
                            "taskset": {
                                "name": "toy",
                                "path": str(workdir / "tasks.jsonl"),
                                "format": {"prompt_key": "question", "response_key": "answer"},
                                "default_workflow_type": "toy_repeat",
                                "default_reward_fn_type": "toy_repeat",
                            }
                        },
                    },
                    "explorer": {
                        "runner_per_model": args.runners or args.batch,
                        "max_retry_times": 0,
                        "rollout_model": {
                            "engine_type": "hf",
                            "engine_num": 1,
                            "dtype": "float32",
                            "seed": args.seed,
                            "max_batch_size": rows,
                        },
                    },
                    "synchronizer": {"sync_method": "memory"},
                    "trainer": {
                        "save_interval": 0,
                        "grad_clip": 1.0,
                        "use_torch_compile": False,
                        "use_dynamic_bsz": False,
                        "trainer_config": {
                            "actor_rollout_ref": {
                                "model": {"enable_gradient_checkpointing": False},
                                "actor": {"ppo_micro_batch_size_per_gpu": rows, "ppo_epochs": 1},
                            }
                        },
                    },
                    "algorithm": {
                        "algorithm_type": "grpo",
                        "repeat_times": args.group,
                        "kl_loss_fn": "none",
                        "kl_penalty_fn": "none",
                        "entropy_loss_fn": "none",
                        "loss_agg_mode": "token-mean",
                        "optimizer": {
                            "lr": args.lr,
                            "weight_decay": 0.0,
                            "lr_warmup_steps": 0,
                            "lr_scheduler_type": "constant",
                            "optimizer_type": "adamw",
                            "betas": [0.9, 0.999],
                        },
                    },
                    "data_processor": {"experience_pipeline": {"save_input": False}},
                    "monitor": {"monitor_type": "none", "jsonl": False, "plot": False, "progress": False},
                }
            )
        )
        training = self.plan.algorithm
        if training.use_reference or training.kl_penalty is not None or training.kl_loss is not None:
            raise RuntimeError("the benchmark expects GRPO without a KL term (no reference model)")
        self.taskset = self.plan.buffer.train_taskset
        assert self.taskset is not None
        self.records = records
        self.batch = args.batch
        self.trainer = FSDPTrainer(self.plan, in_process=True, use_torch_compile=False)
        # GRPO's group advantages: the buffer's pipeline computes them, as in a run (no storage: returned)
        self.pipeline = pipeline_for_plan(self.plan, pad_token_id=self.trainer.pad_token_id)
        rollout = self.plan.explorer.rollout
        self.engine = HFEngine(**HFEngine.plan_kwargs(rollout, seed=rollout.seed))
        self.scheduler = Scheduler.from_plan([self.engine], self.plan)
        self.generate_calls: list[int] = []
        sample = self.engine._sample

        def counted(prompts: list[list[int]], params: Any) -> Any:
            self.generate_calls.append(len(prompts))
            return sample(prompts, params)

        self.engine._sample = counted  # type: ignore[method-assign]  # counts generate batches, nothing else
        self.steps = 0

    def step(self) -> dict[str, float]:
        """Explore one batch, train on it, sync the weights into the engine; return the timings."""
        from trinity.common.workflows.base import Task

        calls_before = len(self.generate_calls)
        started = time.perf_counter()
        first = self.steps * self.batch
        chosen = [self.records[(first + i) % len(self.records)] for i in range(self.batch)]
        tasks = [
            Task.from_record(
                {"prompt": r["question"], "answer": r["answer"], "index": (first + i) % len(self.records)},
                self.taskset,
                repeat_times=self.taskset.repeat_times,
                step=self.steps,
            )
            for i, r in enumerate(chosen)
        ]
        result = self.scheduler.run(tasks)
        if result.failures:
            raise RuntimeError(f"trinity step {self.steps}: a task failed: {result.failures[0].error}")
        explored = time.perf_counter()
        metrics = self.trainer.train_step(self.pipeline.process(result.experiences))
        trained = time.perf_counter()
        self.engine.load_state_dict(self.trainer.full_state_dict(), self.trainer.step)
        synced = time.perf_counter()
        self.steps += 1
        experiences = result.experiences
        return {
            "seconds": synced - started,
            "explore_s": explored - started,
            "train_s": trained - explored,
            "sync_s": synced - trained,
            "tokens": float(sum(e.response_length for e in experiences)),
            "rows": float(len(experiences)),
            "reward_mean": float(metrics["reward_mean"]),
            "generate_calls": float(len(self.generate_calls) - calls_before),
        }

    def close(self) -> None:
        self.trainer.shutdown()


def _trl_trainer(
    model_path: Path,
    records: list[dict[str, str]],
    workdir: Path,
    args: argparse.Namespace,
    *,
    tokens: list[int],
    generate_s: list[float],
    callback: Any,
) -> Any:
    from datasets import Dataset
    from transformers import PrinterCallback, ProgressCallback
    from trl import GRPOConfig, GRPOTrainer

    from trinity.common.rewards import compute_reward

    def toy_repeat(completions: list[Any], answer: list[str], completion_ids: list[list[int]], **_: Any) -> list[float]:
        tokens.append(sum(len(ids) for ids in completion_ids))
        return [compute_reward("toy_repeat", c[0]["content"], a)[0] for c, a in zip(completions, answer, strict=True)]

    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": r["question"]}], "answer": r["answer"]} for r in records]
    )
    total_steps = args.warmup + args.rounds * args.round_steps
    config = GRPOConfig(
        output_dir=str(workdir / "trl"),
        use_cpu=True,
        seed=args.seed,
        max_steps=total_steps,
        per_device_train_batch_size=args.batch * args.group,
        gradient_accumulation_steps=1,
        num_generations=args.group,
        max_completion_length=args.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        max_grad_norm=1.0,
        optim="adamw_torch",
        beta=0.0,
        num_iterations=1,
        epsilon=0.2,
        loss_type="dapo",
        scale_rewards="group",
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        shuffle_dataset=False,
        report_to=[],
        logging_strategy="no",
        save_strategy="no",
        eval_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        log_completions=False,
    )
    trainer = GRPOTrainer(
        model=str(model_path), reward_funcs=toy_repeat, args=config, train_dataset=dataset, callbacks=[callback]
    )
    for quiet in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(quiet)
    score = trainer._generate_and_score_completions

    def timed(*a: Any, **kw: Any) -> Any:  # times generation + reward + advantages, nothing else
        started = time.perf_counter()
        try:
            return score(*a, **kw)
        finally:
            generate_s.append(time.perf_counter() - started)

    trainer._generate_and_score_completions = timed
    return trainer


def bench_grpo(args: argparse.Namespace) -> dict[str, Any]:
    """(2) trinity's GRPO loop against TRL's GRPOTrainer, steps interleaved in rounds inside TRL's loop."""
    import torch
    import transformers
    from transformers import TrainerCallback

    import trinity.device
    from trinity.common.config import TinyModelConfig
    from trinity.common.models.tiny import build_tiny_model
    from trinity.common.workflows.toy import toy_tasks, write_toy_tasks

    trinity.device.select_backend("cpu")
    torch.set_num_threads(args.threads)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    with tempfile.TemporaryDirectory(prefix="trinity-bench-rft-") as tmp:
        workdir = Path(tmp)
        model_path = build_tiny_model(workdir / "tiny", TinyModelConfig(seed=args.seed))
        num_tasks = 64
        write_toy_tasks(workdir / "tasks.jsonl", num_tasks, seed=args.seed)
        records = toy_tasks(num_tasks, seed=args.seed)

        trl_tokens: list[int] = []
        trl_generate_s: list[float] = []
        trl_steps: list[float] = []
        trinity_steps: list[dict[str, float]] = []
        loop_holder: list[_TrinityLoop] = []

        class Interleave(TrainerCallback):  # type: ignore[misc]
            """Times TRL's steps and runs trinity's between them (warm-up, then one round per round)."""

            mark = 0.0

            def on_train_begin(self, *_: Any, **__: Any) -> None:
                self.mark = time.perf_counter()

            def on_step_end(self, _args: Any, state: Any, *_: Any, **__: Any) -> None:
                trl_steps.append(time.perf_counter() - self.mark)
                done = state.global_step
                if done == args.warmup:
                    for _ in range(args.warmup):
                        loop_holder[0].step()
                elif done > args.warmup and (done - args.warmup) % args.round_steps == 0:
                    for _ in range(args.round_steps):
                        trinity_steps.append(loop_holder[0].step())
                self.mark = time.perf_counter()

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trl = _trl_trainer(
                model_path, records, workdir, args, tokens=trl_tokens, generate_s=trl_generate_s, callback=Interleave()
            )
            loop = _TrinityLoop(model_path, records, workdir, args)
            loop_holder.append(loop)
            try:
                trl.train()
            finally:
                loop.close()

    trl_timed = trl_steps[args.warmup :]
    trl_tok = trl_tokens[args.warmup :]
    trl_gen = trl_generate_s[args.warmup :]
    if len(trl_timed) != args.rounds * args.round_steps or len(trinity_steps) != len(trl_timed):
        raise RuntimeError(
            f"expected {args.rounds * args.round_steps} timed steps per side, got "
            f"TRL {len(trl_timed)}, trinity {len(trinity_steps)}"
        )
    k = args.round_steps
    rounds = []
    for r in range(args.rounds):
        trl_s = sum(trl_timed[r * k : (r + 1) * k])
        trl_t = sum(trl_tok[r * k : (r + 1) * k])
        ours = trinity_steps[r * k : (r + 1) * k]
        our_s = sum(s["seconds"] for s in ours)
        our_t = sum(s["tokens"] for s in ours)
        rounds.append(
            {
                "trl_steps_per_s": k / trl_s,
                "trinity_steps_per_s": k / our_s,
                "trl_tokens_per_s": trl_t / trl_s,
                "trinity_tokens_per_s": our_t / our_s,
                "steps_ratio": trl_s / our_s,
                "tokens_ratio": (our_t / our_s) / (trl_t / trl_s),
            }
        )
    n = len(trl_timed)
    rows = args.batch * args.group
    trl_total, our_total = sum(trl_timed), sum(s["seconds"] for s in trinity_steps)
    phases = {name: sum(s[name] for s in trinity_steps) / our_total for name in ("explore_s", "train_s", "sync_s")}
    steps_ratio = statistics.median(r["steps_ratio"] for r in rounds)
    return {
        "setup": {
            "prompts_per_step": args.batch,
            "group_size": args.group,
            "rows_per_step": rows,
            "max_new_tokens": args.max_new_tokens,
            "lr": args.lr,
            "torch_threads": args.threads,
            "runners_per_engine": args.runners or args.batch,
            "warmup_steps": args.warmup,
            "rounds": args.rounds,
            "steps_per_round": k,
            "tiny_model": TinyModelConfig(seed=args.seed).__dict__,
        },
        "trl": {
            "steps_per_s": n / trl_total,
            "tokens_per_s": sum(trl_tok) / trl_total,
            "median_step_s": statistics.median(trl_timed),
            "mean_response_tokens": sum(trl_tok) / (n * rows),
            "median_phase_s": {
                "generate_and_score": statistics.median(trl_gen),
                "rest_of_step": statistics.median(t - g for t, g in zip(trl_timed, trl_gen, strict=True)),
            },
        },
        "trinity": {
            "steps_per_s": n / our_total,
            "tokens_per_s": sum(s["tokens"] for s in trinity_steps) / our_total,
            "median_step_s": statistics.median(s["seconds"] for s in trinity_steps),
            "mean_response_tokens": sum(s["tokens"] for s in trinity_steps) / (n * rows),
            "share_of_step": {name.removesuffix("_s"): value for name, value in phases.items()},
            "median_phase_s": {
                name.removesuffix("_s"): statistics.median(s[name] for s in trinity_steps)
                for name in ("explore_s", "train_s", "sync_s")
            },
            "generate_calls_per_step": sum(s["generate_calls"] for s in trinity_steps) / n,
            "reward_mean_last_round": statistics.mean(s["reward_mean"] for s in trinity_steps[-k:]),
        },
        "rounds_detail": rounds,
        "steps_ratio": steps_ratio,
        "tokens_ratio": statistics.median(r["tokens_ratio"] for r in rounds),
        "steps_ratio_overall": (n / our_total) / (n / trl_total),
        "target": f">= {TARGET_GRPO_RATIO}x (trinity / TRL steps/s, median per-round ratio)",
        "met": steps_ratio >= TARGET_GRPO_RATIO,
    }


# --- report ---------------------------------------------------------------------------------


def _table(results: dict[str, Any]) -> str:
    rows: list[tuple[str, str, str, str]] = []
    sync = results.get("weight_sync")
    if sync is not None:
        raw_ms = sync["raw_median_s"] * 1e3
        for mb, entry in sync["bucket_MiB"].items():
            default = " (default)" if int(mb) == sync["default_bucket_MiB"] else ""
            verdict = "ok" if entry["ratio_vs_raw"] <= TARGET_SYNC_RATIO else "MISSED"
            rows.append(
                (
                    f"1. online sync {sync['bytes'] / 2**20:.0f} MiB, bucket {mb} MiB{default}",
                    f"{entry['median_s'] * 1e3:.0f} ms",
                    f"raw pg.broadcast {raw_ms:.0f} ms",
                    f"{entry['ratio_vs_raw']:.2f}x  (target <= {TARGET_SYNC_RATIO}x) {verdict}; "
                    f"best-of {entry['ratio_of_best']:.2f}x, of medians {entry['ratio_of_medians']:.2f}x",
                )
            )
    grpo = results.get("grpo")
    if grpo is not None:
        ours, trl = grpo["trinity"], grpo["trl"]
        setup = grpo["setup"]
        verdict = "ok" if grpo["met"] else "MISSED"
        rows.append(
            (
                f"2. GRPO steps/s ({setup['prompts_per_step']}x{setup['group_size']} rows, "
                f"{setup['max_new_tokens']} tok)",
                f"trinity {ours['steps_per_s']:.2f}",
                f"TRL {trl['steps_per_s']:.2f}",
                f"{grpo['steps_ratio']:.2f}x  (target >= {TARGET_GRPO_RATIO}x) {verdict}; "
                f"overall {grpo['steps_ratio_overall']:.2f}x",
            )
        )
        rows.append(
            (
                "   generated tokens/s",
                f"trinity {ours['tokens_per_s']:.0f}",
                f"TRL {trl['tokens_per_s']:.0f}",
                f"{grpo['tokens_ratio']:.2f}x  (mean length {ours['mean_response_tokens']:.1f} vs "
                f"{trl['mean_response_tokens']:.1f})",
            )
        )
        mine, theirs = ours["median_phase_s"], trl["median_phase_s"]
        rows.append(
            (
                "   median step",
                f"trinity {ours['median_step_s'] * 1e3:.0f} ms",
                f"TRL {trl['median_step_s'] * 1e3:.0f} ms",
                f"trinity explore {mine['explore'] * 1e3:.0f} + train {mine['train'] * 1e3:.0f} + sync "
                f"{mine['sync'] * 1e3:.0f} ms ({ours['generate_calls_per_step']:.1f} generate calls/step); "
                f"TRL generate+score {theirs['generate_and_score'] * 1e3:.0f} + rest "
                f"{theirs['rest_of_step'] * 1e3:.0f} ms",
            )
        )
    if not rows:
        return ""
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:<{widths[2]}}  {d}".rstrip() for a, b, c, d in rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks, print the table, write the JSON; exit 1 if a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON output (default: {DEFAULT_OUT})")
    parser.add_argument("--only", choices=("sync", "grpo"), help="run one of the two benchmarks")
    parser.add_argument("--sync-mb", type=int, default=100, help="MiB of weights for (1) (default 100)")
    parser.add_argument(
        "--bucket-mb",
        type=int,
        nargs="+",
        default=None,
        help="bucket sizes for (1) (default: synchronizer.bucket_size_mb and 16)",
    )
    parser.add_argument("--sync-rounds", type=int, default=25, help="interleaved rounds for (1) (default 25)")
    parser.add_argument("--batch", type=int, default=8, help="prompts per GRPO step (default 8)")
    parser.add_argument("--group", type=int, default=8, help="rollouts per prompt (default 8)")
    parser.add_argument("--max-new-tokens", type=int, default=16, help="new tokens per rollout at most (default 16)")
    parser.add_argument("--lr", type=float, default=1e-5, help="learning rate of both trainers (default 1e-5)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed GRPO steps per side first (default 3)")
    parser.add_argument("--rounds", type=int, default=16, help="interleaved GRPO rounds (default 16)")
    parser.add_argument("--round-steps", type=int, default=3, help="GRPO steps per side per round (default 3)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for both sides (default 1)")
    parser.add_argument("--runners", type=int, default=0, help="trinity workflow runners (default: --batch)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model, tasks and sampling (default 0)")
    args = parser.parse_args(argv)
    if args.bucket_mb is None:
        args.bucket_mb = sorted({_default_bucket_mb(), 16}, reverse=True)
    for name in ("warmup", "rounds", "round_steps", "batch", "group", "max_new_tokens", "threads", "sync_rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")

    logging.basicConfig(level=logging.WARNING)
    steps: list[tuple[str, Callable[[], dict[str, Any]]]] = []
    if args.only in (None, "sync"):
        steps.append(("weight_sync", lambda: bench_weight_sync(args.sync_mb, args.bucket_mb, args.sync_rounds)))
    if args.only in (None, "grpo"):
        steps.append(("grpo", lambda: bench_grpo(args)))
    results: dict[str, Any] = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_avg_at_start": os.getloadavg(),
            "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "versions": _versions(),
        }
    }
    for key, step in steps:
        print(f"running {key} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        results[key] = step()
        results[key]["wall_s"] = time.perf_counter() - started
    print(_table(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"\nwritten: {args.out}")
    return 0 if all(results[key]["met"] for key, _ in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
