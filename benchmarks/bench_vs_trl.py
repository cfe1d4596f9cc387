"""End to end: steady-state steps/s of ``trinity run`` as a user runs it, against TRL's ``GRPOTrainer``.

Both sides run as fresh subprocesses, one after the other, alternating
(trinity, TRL, trinity, TRL, ... for ``--rounds`` rounds), each process with one
torch thread (``OMP_NUM_THREADS=1``; Ray gives every actor one CPU, so one
thread too):

* trinity: ``python -m trinity.cli.main run --config <yaml>``: the real
  launcher in mode ``both``, Ray actors (one ``hf`` engine, one FSDP2 trainer
  rank), the queue experience buffer, online weight sync (gloo) after every
  step. The config is the CPU quickstart's (``examples/quickstart/cpu.yaml``:
  its explorer runners, engine batch and buffer) with the knobs below set and
  no evaluation and no checkpoint during the run. Step times are the
  ``time/step_s`` of the train records in ``metrics.jsonl``, with its split
  (``time/explore_s``, ``time/train_s``, ``time/sync_s``, ``time/driver_s``,
  ``time/save_s``, ``time/eval_s``).
* TRL: this script's ``trl-worker`` sub-command: ``GRPOTrainer`` on the CPU
  with the same model folder, prompts (the quickstart's task file, chat
  template with the generation prompt), prompts per step, group size
  (``num_generations``), max new tokens, sampling (temperature 1, no top-k /
  top-p), learning rate (constant, no warm-up), AdamW (betas 0.9/0.999, no
  weight decay), gradient clipping at norm 1, no KL term (``beta=0``), one
  optimizer step per batch, and the same ``toy_repeat`` reward. A callback
  times each step from the end of the previous one.

The first ``--warmup`` steps of every run are left out; steps/s is the timed
steps over the sum of their times. Reported per model: each round's steps/s
of both sides and their ratio (trinity / TRL), the median ratio, and
trinity's mean split of a step (explore / train / sync / save / eval / driver
as % of ``time/step_s``). Two models: (a) the quickstart's (``--models
quickstart``: its tiny model and knobs) and (b) ``5m``: a ~5M-parameter model
of the same architecture (``trinity.common.models.tiny``, scaled up).

Needs TRL (``pip install -e ".[bench]"``). Run
``python benchmarks/bench_vs_trl.py --rounds 3``; it prints a table and writes
JSON to ``benchmarks/results/vs_trl.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
QUICKSTART = REPO / "examples" / "quickstart" / "cpu.yaml"
TASKS = REPO / "examples" / "quickstart" / "tasks" / "train.jsonl"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "vs_trl.json"
TARGET_RATIO = 1.2
#: Parts of a trinity step, as logged in metrics.jsonl.
SPLIT_KEYS = ("explore", "train", "sync", "save", "eval", "driver")


@dataclasses.dataclass(frozen=True)
class Setup:
    """One model and the knobs both sides run it with."""

    name: str
    #: Tiny model shape: hidden size, layers, attention heads, MLP width.
    hidden: int
    layers: int
    heads: int
    intermediate: int
    prompts: int
    group: int
    max_new_tokens: int
    lr: float


SETUPS = {
    "quickstart": Setup(
        "quickstart", hidden=64, layers=2, heads=4, intermediate=128, prompts=8, group=16, max_new_tokens=8, lr=2e-3
    ),
    "5m": Setup("5m", hidden=256, layers=6, heads=4, intermediate=768, prompts=8, group=8, max_new_tokens=32, lr=1e-4),
}


def _require_trl() -> None:
    if importlib.util.find_spec("trl") is None:
        sys.exit(
            "bench_vs_trl: TRL is not installed in this environment; install the benchmark extra "
            'with `pip install -e ".[bench]"` and run again'
        )


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "RAY_AUTH_MODE": "disabled",
        "TOKENIZERS_PARALLELISM": "false",
    }


def _build_model(setup: Setup, workdir: Path) -> tuple[Path, int]:
    """Build the setup's tiny model (once) and return its folder and parameter count."""
    from trinity.common.config import TinyModelConfig
    from trinity.common.models.tiny import build_tiny_model

    path = build_tiny_model(
        workdir / f"model-{setup.name}",
        TinyModelConfig(
            hidden_size=setup.hidden,
            num_layers=setup.layers,
            num_heads=setup.heads,
            intermediate_size=setup.intermediate,
        ),
    )
    from transformers import AutoModelForCausalLM

    params = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(path).parameters())
    return path, int(params)


# --- trinity ----------------------------------------------------------------------------------


def _trinity_config(setup: Setup, model: Path, workdir: Path, name: str, *, steps: int, offset: int) -> Path:
    raw = yaml.safe_load(QUICKSTART.read_text())
    raw["name"] = name
    raw["checkpoint_root_dir"] = str(workdir / "ckpt")
    raw["model"].pop("tiny", None)
    raw["model"].update(
        model_path=str(model), max_response_tokens=setup.max_new_tokens, temperature=1.0, top_p=1.0, top_k=-1
    )
    raw["algorithm"].update(
        repeat_times=setup.group,
        kl_loss_fn="none",
        kl_penalty_fn="none",
        entropy_loss_fn="none",
        loss_agg_mode="token-mean",
    )
    raw["algorithm"]["optimizer"] = {
        "lr": setup.lr,
        "weight_decay": 0.0,
        "lr_warmup_steps": 0,
        "lr_scheduler_type": "constant",
        "optimizer_type": "adamw",
        "betas": [0.9, 0.999],
    }
    buffer = raw["buffer"]
    buffer["batch_size"] = setup.prompts
    buffer["total_steps"] = steps
    buffer["explorer_input"]["taskset"]["path"] = str(TASKS)
    buffer["explorer_input"]["eval_tasksets"] = []
    raw["synchronizer"]["sync_offset"] = offset
    trainer = raw["trainer"]
    trainer.update(save_interval=0, grad_clip=1.0)
    rows = setup.prompts * setup.group
    trainer["trainer_config"]["actor_rollout_ref"]["actor"].update(ppo_micro_batch_size_per_gpu=rows, ppo_epochs=1)
    raw["monitor"] = {"monitor_type": "none", "progress": False, "plot": False}
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _run_trinity(setup: Setup, model: Path, workdir: Path, name: str, args: argparse.Namespace) -> dict[str, Any]:
    config = _trinity_config(setup, model, workdir, name, steps=args.warmup + args.steps, offset=args.sync_offset)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "trinity.cli.main", "run", "--config", str(config)],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"bench_vs_trl: trinity run {config} exited {done.returncode}:\n{done.stderr[-3000:]}")
    metrics = workdir / "ckpt" / "quickstart" / name / "metrics.jsonl"
    train = [r["metrics"] for r in map(json.loads, metrics.read_text().splitlines()) if r.get("phase") == "train"]
    timed = train[args.warmup :]
    if len(timed) != args.steps:
        raise SystemExit(f"bench_vs_trl: {metrics} has {len(train)} train records, expected {args.warmup + args.steps}")
    seconds = [float(m["time/step_s"]) for m in timed]
    total = sum(seconds)
    split = {part: 100.0 * sum(float(m.get(f"time/{part}_s", 0.0)) for m in timed) / total for part in SPLIT_KEYS}
    return {
        "steps_per_s": len(seconds) / total,
        "median_step_s": statistics.median(seconds),
        "step_s": seconds,
        "split_pct": split,
        "rollout_s": statistics.mean(float(m["time/rollout_s"]) for m in timed),
        "wall_s": wall,
    }


# --- TRL -----------------------------------------------------------------------------------------


def _run_trl(setup: Setup, model: Path, workdir: Path, name: str, args: argparse.Namespace) -> dict[str, Any]:
    out = workdir / f"{name}.json"
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "trl-worker",
        "--setup",
        setup.name,
        "--model",
        str(model),
        "--steps",
        str(args.warmup + args.steps),
        "--out",
        str(out),
    ]
    started = time.monotonic()
    done = subprocess.run(command, cwd=REPO, env=_env(), capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"bench_vs_trl: the TRL run exited {done.returncode}:\n{done.stderr[-3000:]}")
    seconds = json.loads(out.read_text())["step_s"][args.warmup :]
    if len(seconds) != args.steps:
        raise SystemExit(
            f"bench_vs_trl: the TRL run timed {len(seconds) + args.warmup} steps, expected {args.warmup + args.steps}"
        )
    return {
        "steps_per_s": len(seconds) / sum(seconds),
        "median_step_s": statistics.median(seconds),
        "step_s": seconds,
        "wall_s": wall,
    }


def trl_worker(argv: list[str]) -> None:
    """Train ``--steps`` GRPO steps with TRL in this process and write each step's seconds to ``--out``."""
    parser = argparse.ArgumentParser(prog="bench_vs_trl.py trl-worker")
    parser.add_argument("--setup", choices=sorted(SETUPS), required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    setup = SETUPS[args.setup]

    import warnings

    import torch
    import transformers
    from datasets import Dataset
    from transformers import PrinterCallback, ProgressCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from trinity.common.rewards import compute_reward

    torch.set_num_threads(1)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    records = [json.loads(line) for line in TASKS.read_text().splitlines() if line.strip()]
    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": r["question"]}], "answer": r["answer"]} for r in records]
    )

    def toy_repeat(completions: list[Any], answer: list[str], **_: Any) -> list[float]:
        return [compute_reward("toy_repeat", c[0]["content"], a)[0] for c, a in zip(completions, answer, strict=True)]

    seconds: list[float] = []

    class StepTimes(TrainerCallback):  # type: ignore[misc]
        """Times each training step from the end of the previous one."""

        mark = 0.0

        def on_train_begin(self, *_: Any, **__: Any) -> None:
            self.mark = time.perf_counter()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            now = time.perf_counter()
            seconds.append(now - self.mark)
            self.mark = now

    config = GRPOConfig(
        output_dir=str(args.out.parent / f"{args.out.stem}-trl"),
        use_cpu=True,
        seed=0,
        max_steps=args.steps,
        per_device_train_batch_size=setup.prompts * setup.group,
        gradient_accumulation_steps=1,
        num_generations=setup.group,
        max_completion_length=setup.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=setup.lr,
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
        report_to=[],
        logging_strategy="no",
        save_strategy="no",
        eval_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
        log_completions=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = GRPOTrainer(
            model=str(args.model), reward_funcs=toy_repeat, args=config, train_dataset=dataset, callbacks=[StepTimes()]
        )
        for quiet in (PrinterCallback, ProgressCallback):
            trainer.remove_callback(quiet)
        trainer.train()
    args.out.write_text(json.dumps({"step_s": seconds}))


# --- the benchmark ---------------------------------------------------------------------------------


def bench_setup(setup: Setup, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Run ``args.rounds`` alternating trinity / TRL rounds on one setup and return its results."""
    model, params = _build_model(setup, workdir)
    rounds = []
    for index in range(args.rounds):
        load = os.getloadavg()[0]
        print(
            f"{setup.name} round {index + 1}/{args.rounds} (load {load:.2f}): trinity ...", file=sys.stderr, flush=True
        )
        ours = _run_trinity(setup, model, workdir, f"{setup.name}-r{index}", args)
        print(f"  trinity {ours['steps_per_s']:.2f} steps/s; TRL ...", file=sys.stderr, flush=True)
        theirs = _run_trl(setup, model, workdir, f"{setup.name}-trl-r{index}", args)
        print(f"  TRL {theirs['steps_per_s']:.2f} steps/s", file=sys.stderr, flush=True)
        rounds.append(
            {
                "trinity": ours,
                "trl": theirs,
                "ratio": ours["steps_per_s"] / theirs["steps_per_s"],
                "load_avg_1min_before": load,
                "load_avg_1min_after": os.getloadavg()[0],
            }
        )
    split = {part: statistics.mean(r["trinity"]["split_pct"][part] for r in rounds) for part in SPLIT_KEYS}
    return {
        "setup": dataclasses.asdict(setup),
        "params": params,
        "rows_per_step": setup.prompts * setup.group,
        "rounds": rounds,
        "ratio_median": statistics.median(r["ratio"] for r in rounds),
        "trinity_split_pct": split,
        "target": f">= {TARGET_RATIO}x",
    }


def _table(results: dict[str, Any]) -> str:
    lines = [f"{'model':<11} {'round':>5} {'trinity steps/s':>16} {'TRL steps/s':>12} {'ratio':>7}  load"]
    for name, entry in results["models"].items():
        for index, r in enumerate(entry["rounds"], start=1):
            lines.append(
                f"{name:<11} {index:>5} {r['trinity']['steps_per_s']:>16.2f} {r['trl']['steps_per_s']:>12.2f} "
                f"{r['ratio']:>6.2f}x  {r['load_avg_1min_before']:.2f}"
            )
        split = " ".join(f"{part} {pct:.0f}%" for part, pct in entry["trinity_split_pct"].items() if pct >= 0.5)
        lines.append(
            f"{name:<11} {'median':>5} {'':>16} {'':>12} {entry['ratio_median']:>6.2f}x  "
            f"({entry['params'] / 1e6:.2f}M params, {entry['setup']['prompts']}x{entry['setup']['group']}x"
            f"{entry['setup']['max_new_tokens']} tokens; trinity step: {split})"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, as ``trl-worker``, one TRL run), print the table and write the JSON."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _require_trl()
    if argv[:1] == ["trl-worker"]:
        trl_worker(argv[1:])
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(SETUPS), default=["quickstart", "5m"])
    parser.add_argument("--rounds", type=int, default=3, help="alternating trinity / TRL rounds (default 3)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per run (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="steps left out at the start of each run (default 3)")
    parser.add_argument(
        "--sync-offset",
        type=int,
        default=0,
        help="trinity's synchronizer.sync_offset (0: serial, the quickstart's; 1: asynchronous)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    for name in ("rounds", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.warmup < 0 or args.sync_offset < 0:
        parser.error("--warmup and --sync-offset must not be negative")
    results: dict[str, Any] = {
        "how": {
            "steps": args.steps,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "sync_offset": args.sync_offset,
            "threads_per_process": 1,
            "order": "trinity then TRL, each round",
        },
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_avg_at_start": os.getloadavg(),
            "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
        "models": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench-vs-trl-") as tmp:
        for name in args.models:
            results["models"][name] = bench_setup(SETUPS[name], Path(tmp), args)
    results["machine"]["load_avg_at_end"] = os.getloadavg()
    print(_table(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
