"""End to end: steady-state steps/s of ``trinity run`` as a user runs it, against TRL's ``GRPOTrainer``.

Both sides run as fresh subprocesses, one after the other, interleaved
(each round: every trinity arm, then TRL, for ``--rounds`` rounds), each
process with one torch thread (``OMP_NUM_THREADS=1``; Ray gives every actor
one CPU, so one thread too). The trinity arms (``--arms``):

* ``colocate``: one device (``gpu_per_node: 1``): the engine and the trainer
  rank share it, the weights handed over through the shared-memory file;
* ``serial``: two devices, ``sync_offset: 0`` (the quickstart's loop): online
  weight sync (gloo) after every step, each batch explored with the newest weights;
* ``async``: two devices, ``sync_offset: 1``: the explorer one step ahead.

The two sides:

* trinity: ``python -m trinity.cli.main run --config <yaml>``: the real
  launcher in mode ``both``, Ray actors (one ``hf`` engine, one FSDP2 trainer
  rank), the queue experience buffer, a weight sync after every step. The
  config is the CPU quickstart's (``examples/quickstart/cpu.yaml``:
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
steps over the sum of their times. Memory: every process of a run's tree (the
driver, the Ray actors and Ray's own processes under the local cluster the
driver starts) is sampled every 0.25 s; reported are each role's peak RSS
(driver, trainer, engine, Ray's processes) and the peak of their sum, and for
TRL its one process's peak. Reported per model: each round's steps/s
of both sides and their ratio (trinity / TRL), the median ratio per arm, and
each arm's mean split of a step (explore / train / sync / save / eval / driver
as % of ``time/step_s``). Three models: the quickstart's (``quickstart``: its
tiny model and knobs), ``5m`` (~5M parameters) and ``40m`` (~38M) of the same
architecture (``trinity.common.models.tiny``, scaled up).

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
#: The goal of each arm: trinity's steps/s over TRL's.
TARGETS = {"colocate": 1.2, "serial": 1.0, "async": 1.5}
#: Arms: (devices, synchronizer.sync_offset).
ARMS = {"colocate": (1, 0), "serial": (2, 0), "async": (2, 1)}
#: Seconds between memory samples.
SAMPLE_S = 0.25
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
    "40m": Setup("40m", hidden=512, layers=10, heads=8, intermediate=1792, prompts=8, group=8, max_new_tokens=32,
                 lr=1e-4),
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


def _trinity_config(setup: Setup, model: Path, workdir: Path, name: str, *, steps: int, offset: int,
                    devices: int = 2) -> Path:
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
    raw["cluster"]["gpu_per_node"] = devices
    trainer = raw["trainer"]
    trainer.update(save_interval=0, grad_clip=1.0)
    rows = setup.prompts * setup.group
    trainer["trainer_config"]["actor_rollout_ref"]["actor"].update(ppo_micro_batch_size_per_gpu=rows, ppo_epochs=1)
    raw["monitor"] = {"monitor_type": "none", "progress": False, "plot": False}
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _role(cmdline: list[str], root: int, pid: int) -> str:
    """Name a process of a run's tree: driver, trainer, engine, or ray (Ray's own processes, idle workers)."""
    if pid == root:
        return "driver"
    text = " ".join(cmdline)
    if "FSDPWorker" in text:
        return "trainer"
    if "Engine" in text:
        return "engine"
    return "ray"


def _measured(command: list[str]) -> tuple[subprocess.CompletedProcess[str], float, dict[str, float]]:
    """Run ``command``; return its result, wall seconds and peak RSS in MB per role and in total."""
    import threading

    import psutil

    peaks: dict[str, float] = {}
    total_peak = 0.0
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    done_sampling = threading.Event()

    def sample() -> None:
        nonlocal total_peak
        root = psutil.Process(process.pid)
        while not done_sampling.wait(SAMPLE_S):
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                continue
            by_role: dict[str, float] = {}
            for member in tree:
                try:
                    role = _role(member.cmdline(), process.pid, member.pid)
                    rss = member.memory_info().rss / 2**20
                except psutil.Error:
                    continue
                by_role[role] = by_role.get(role, 0.0) + rss
                peaks[role] = max(peaks.get(role, 0.0), rss)
            total_peak = max(total_peak, sum(by_role.values()))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = process.communicate()
    done_sampling.set()
    sampler.join()
    wall = time.monotonic() - started
    result = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    return result, wall, {**{role: round(mb, 1) for role, mb in sorted(peaks.items())}, "total": round(total_peak, 1)}


def _run_trinity(setup: Setup, model: Path, workdir: Path, name: str, args: argparse.Namespace, *,
                 arm: str = "serial") -> dict[str, Any]:
    devices, offset = ARMS[arm]
    config = _trinity_config(setup, model, workdir, name, steps=args.warmup + args.steps, offset=offset,
                             devices=devices)
    done, wall, memory = _measured([sys.executable, "-m", "trinity.cli.main", "run", "--config", str(config)])
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
        "sync_ms": 1e3 * statistics.median(float(m["sync/seconds"]) for m in timed),
        "wall_s": wall,
        "peak_rss_mb": memory,
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
    done, wall, memory = _measured(command)
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
        "peak_rss_mb": memory,
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
    """Run ``args.rounds`` interleaved rounds (every arm, then TRL) on one setup and return its results."""
    model, params = _build_model(setup, workdir)
    rounds = []
    for index in range(args.rounds):
        load = os.getloadavg()[0]
        print(f"{setup.name} round {index + 1}/{args.rounds} (load {load:.2f})", file=sys.stderr, flush=True)
        arms = {}
        for arm in args.arms:
            arms[arm] = _run_trinity(setup, model, workdir, f"{setup.name}-{arm}-r{index}", args, arm=arm)
            print(f"  trinity {arm} {arms[arm]['steps_per_s']:.2f} steps/s", file=sys.stderr, flush=True)
        theirs = _run_trl(setup, model, workdir, f"{setup.name}-trl-r{index}", args)
        print(f"  TRL {theirs['steps_per_s']:.2f} steps/s", file=sys.stderr, flush=True)
        for result in arms.values():
            result["ratio"] = result["steps_per_s"] / theirs["steps_per_s"]
            result["memory_ratio"] = result["peak_rss_mb"]["total"] / theirs["peak_rss_mb"]["total"]
        rounds.append({"arms": arms, "trl": theirs, "load_avg_1min_before": load,
                       "load_avg_1min_after": os.getloadavg()[0]})
    summary = {}
    for arm in args.arms:
        runs = [r["arms"][arm] for r in rounds]
        summary[arm] = {
            "ratio_median": statistics.median(r["ratio"] for r in runs),
            "memory_ratio_median": statistics.median(r["memory_ratio"] for r in runs),
            "sync_ms_median": statistics.median(r["sync_ms"] for r in runs),
            "split_pct": {part: statistics.mean(r["split_pct"][part] for r in runs) for part in SPLIT_KEYS},
            "peak_rss_mb": runs[-1]["peak_rss_mb"],
            "target": f">= {TARGETS[arm]}x",
        }
    return {
        "setup": dataclasses.asdict(setup),
        "params": params,
        "rows_per_step": setup.prompts * setup.group,
        "rounds": rounds,
        "arms": summary,
        "trl_peak_rss_mb": rounds[-1]["trl"]["peak_rss_mb"],
    }


def _table(results: dict[str, Any]) -> str:
    lines = [f"{'model':<11} {'arm':<9} {'round':>5} {'trinity steps/s':>16} {'TRL steps/s':>12} {'ratio':>7} "
             f"{'peak MB':>8} {'TRL MB':>7}  load"]
    for name, entry in results["models"].items():
        for index, r in enumerate(entry["rounds"], start=1):
            for arm, ours in r["arms"].items():
                trl_mb = r["trl"]["peak_rss_mb"]["total"]
                lines.append(
                    f"{name:<11} {arm:<9} {index:>5} {ours['steps_per_s']:>16.2f} {r['trl']['steps_per_s']:>12.2f} "
                    f"{ours['ratio']:>6.2f}x {ours['peak_rss_mb']['total']:>8.0f} {trl_mb:>7.0f}"
                    f"  {r['load_avg_1min_before']:.2f}"
                )
        for arm, summary in entry["arms"].items():
            split = " ".join(f"{part} {pct:.0f}%" for part, pct in summary["split_pct"].items() if pct >= 0.5)
            lines.append(
                f"{name:<11} {arm:<9} {'median':>5} {'':>16} {'':>12} {summary['ratio_median']:>6.2f}x "
                f"{'':>8} {'':>7}  (memory {summary['memory_ratio_median']:.2f}x TRL's, sync "
                f"{summary['sync_ms_median']:.2f} ms; step: {split})"
            )
        lines.append(f"{name:<11} ({entry['params'] / 1e6:.2f}M params, {entry['setup']['prompts']}x"
                     f"{entry['setup']['group']}x{entry['setup']['max_new_tokens']} tokens)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, as ``trl-worker``, one TRL run), print the table and write the JSON."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _require_trl()
    if argv[:1] == ["trl-worker"]:
        trl_worker(argv[1:])
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(SETUPS), default=["quickstart", "5m", "40m"])
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS),
                        help="trinity arms, each run every round before TRL (default: all)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating trinity / TRL rounds (default 3)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per run (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="steps left out at the start of each run (default 3)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    for name in ("rounds", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must not be negative")
    results: dict[str, Any] = {
        "how": {
            "steps": args.steps,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "arms": {arm: {"devices": ARMS[arm][0], "sync_offset": ARMS[arm][1]} for arm in args.arms},
            "threads_per_process": 1,
            "order": "each trinity arm, then TRL, each round",
            "memory": f"RSS of every process of a run's tree, sampled every {SAMPLE_S} s",
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
