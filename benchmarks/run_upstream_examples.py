"""Which of Trinity-RFT's example configs that ``--dry-run`` accepts also train 2 steps on this CPU.

Point it at a checkout of upstream Trinity-RFT's ``examples/``::

    python benchmarks/run_upstream_examples.py ~/Trinity-RFT/examples

Each accepted config runs as a user runs it (``trinity run --config F``, one
subprocess each, a fresh local Ray cluster) with only the model and the data
swapped for tiny ones and the sizes cut to fit two CPU cores: the tiny model
(``TRINITY_MODEL_PATH``, every auxiliary model too; the tiny vision-language
model for a config whose task sets read images), a small task set holding
every key upstream's examples read (``question``/``answer``,
``problem``/``solution``/``response``, ``prompt``/``chosen``/``rejected``, ``messages``,
``images``),
2 steps of 2 tasks with 2 rollouts, one engine and one trainer rank (one
Ulysses group for a sequence-parallel config), no evaluation. A config whose mode needs a second process (``explore`` /
``train`` halves of an asynchronous pair) is reported as such, not run.

Reported per config: ran (2 training steps in its metrics) or the last line of
its error output, and the seconds it took.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_dry_run import PLACEHOLDERS, _trinity, dry_run  # noqa: E402

#: Overrides every run gets: tiny sizes, one engine, one trainer rank, no evaluation.
COMMON = {
    "buffer.total_steps": 2, "buffer.total_epochs": 1, "buffer.batch_size": 2, "algorithm.repeat_times": 2,
    "buffer.explorer_input.eval_tasksets": [], "explorer.eval_interval": 1000, "explorer.eval_on_startup": False,
    "explorer.rollout_model.engine_num": 1, "explorer.rollout_model.tensor_parallel_size": 1,
    "explorer.rollout_model.dtype": "float32", "model.max_prompt_tokens": 256, "model.max_response_tokens": 16,
    "model.max_model_len": 272, "cluster.node_num": 1, "cluster.cpus_per_bundle": 0.5,
    "trainer.save_interval": 1000, "monitor.monitor_type": "none", "monitor.progress": False,
}


def task_records(count: int = 8) -> list[dict[str, object]]:
    """Return task records with every key upstream's examples read."""
    rows = []
    for i in range(count):
        question = f"What is {i} plus {i}?"
        answer = f"{i} + {i} = {2 * i}\n#### {2 * i}"
        rows.append({
            "question": question, "answer": answer, "problem": question, "solution": f"\\boxed{{{2 * i}}}",
            "response": f"It is \\boxed{{{2 * i}}}.",
            "prompt": question, "ground_truth": str(2 * i),
            "chosen": f"It is {2 * i}.", "rejected": f"It is {2 * i + 1}.",
            "messages": [{"role": "user", "content": question}, {"role": "assistant", "content": f"{2 * i}"}],
            "images": [_square_png(i)],
        })
    return rows


def _square_png(seed: int) -> str:
    """A small PNG (a grey square on white) as a ``data:`` URL: the image of a vision-language task."""
    import base64
    import io

    from PIL import Image, ImageDraw

    image = Image.new("RGB", (84, 56), "white")
    ImageDraw.Draw(image).rectangle((8 + seed % 40, 8, 36 + seed % 40, 36), fill=(90, 90, 90))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def uses_images(config: dict) -> bool:
    """Whether a config's task sets read images (``format.image_key``)."""
    explorer_input = (config.get("buffer") or {}).get("explorer_input") or {}
    sets = [explorer_input.get("taskset") or {}, *(explorer_input.get("eval_tasksets") or [])]
    return any((t.get("format") or {}).get("image_key") for t in sets if isinstance(t, dict))


def countdown_data(folder: Path) -> Path:
    """Return the folder of the countdown task set written beside ``folder``."""
    return folder.with_name(folder.name + "-countdown")


def write_data(folder: Path) -> Path:
    """Write the tiny task set as ``train`` and ``test`` splits of a folder (and a countdown one in the folder
    ``<folder>-countdown``, whose answers are ``{"target", "numbers"}``); return the folder."""
    countdown = [{**r, "answer": {"target": 2 * i, "numbers": [i, i]}} for i, r in enumerate(task_records())]
    for where, rows in ((folder, task_records()), (countdown_data(folder), countdown)):
        where.mkdir(parents=True, exist_ok=True)
        for split in ("train", "test"):
            (where / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def overrides_for(config: dict, data: Path, model: Path) -> dict[str, object]:
    """Return the overrides of one config: the common ones, its data and auxiliary models swapped for tiny ones."""
    sets: dict[str, object] = dict(COMMON)
    if (config.get("buffer") or {}).get("train_batch_size") is not None:
        sets["buffer.train_batch_size"] = 4  # experiences: 2 tasks x 2 rollouts
    explorer_input = (config.get("buffer") or {}).get("explorer_input") or {}
    if explorer_input.get("taskset") is not None:
        reward = str(explorer_input.get("default_reward_fn_type") or "")
        reward += str(explorer_input["taskset"].get("default_reward_fn_type") or "")
        sets["buffer.explorer_input.taskset.path"] = str(countdown_data(data) if "countdown" in reward else data)
        sets["buffer.explorer_input.taskset.split"] = "train"
        sets["buffer.explorer_input.taskset.subset_name"] = None
    trainer_input = (config.get("buffer") or {}).get("trainer_input") or {}
    experience = trainer_input.get("experience_buffer") or {}
    if experience.get("storage_type") == "file":
        sets["buffer.trainer_input.experience_buffer.path"] = str(data)
        sets["buffer.trainer_input.experience_buffer.split"] = "train"
        sets["buffer.trainer_input.experience_buffer.subset_name"] = None
    for name, dataset in (trainer_input.get("auxiliary_buffers") or {}).items():
        if isinstance(dataset, dict) and dataset.get("path"):
            sets[f"buffer.trainer_input.auxiliary_buffers.{name}.path"] = str(data)
            sets[f"buffer.trainer_input.auxiliary_buffers.{name}.split"] = "train"
    auxiliary = (config.get("explorer") or {}).get("auxiliary_models") or []
    if auxiliary:
        sets["explorer.auxiliary_models"] = [
            {**{k: v for k, v in aux.items() if k not in ("model_path", "engine_num", "tensor_parallel_size")},
             "model_path": str(model), "engine_num": 1, "tensor_parallel_size": 1, "max_prompt_tokens": 1800,
             "max_response_tokens": 16, "max_model_len": 2048}
            for aux in auxiliary]
    if uses_images(config):  # the simple_mm_workflow's system prompt, the question and the image
        sets.update({"model.max_prompt_tokens": 512, "model.max_model_len": 528})
    # one engine, one trainer rank per Ulysses rank (a sequence-parallel group is the smallest trainer)
    sequence_parallel = int((config.get("trainer") or {}).get("ulysses_sequence_parallel_size") or 1)
    sets["cluster.gpu_per_node"] = 1 + sequence_parallel + len(auxiliary)
    return sets


def run_one(path: Path, env: dict[str, str], data: Path, model: Path, root: Path, *,
            vision_model: Path | None = None) -> tuple[str, float]:
    """Run one config for 2 steps; return ``("ran", seconds)`` or ``(why not, seconds)``.

    A config whose task sets read images runs on ``vision_model`` instead of ``model``.
    """
    config = yaml.safe_load(path.read_text()) or {}
    if vision_model is not None and uses_images(config):
        model, env = vision_model, {**env, "TRINITY_MODEL_PATH": str(vision_model)}
    mode = str(config.get("mode", "both"))
    if mode in ("explore", "train") and str((config.get("algorithm") or {}).get("algorithm_type")) not in (
            "sft", "dpo"):
        return f"mode {mode}: half of an asynchronous pair, needs its other half running", 0.0
    sets = overrides_for(config, data, model)
    args = [arg for key, value in sets.items() for arg in ("--set", f"{key}={json.dumps(value)}")]
    start = time.perf_counter()
    proc = subprocess.run([*_trinity(), "run", "--config", str(path), *args], capture_output=True, text=True,
                          env=env, cwd=root, check=False, timeout=900)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        return (lines[-1] if lines else f"exit {proc.returncode}"), seconds
    metrics = list(Path(env["TRINITY_CHECKPOINT_ROOT_DIR"]).rglob("metrics.jsonl"))
    steps = [json.loads(line) for m in metrics for line in m.read_text().splitlines()]
    trained = {r["step"] for r in steps if r.get("phase") == "train"}
    return ("ran" if {1, 2} <= trained else f"exit 0 but trained steps {sorted(trained)}"), seconds


def main(argv: list[str] | None = None) -> int:
    """Dry-run every config under the folders, run the accepted ones for 2 steps, print the outcome of each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args(argv)
    files = sorted(p.resolve() for folder in args.folders for p in folder.rglob("*.yaml"))
    from trinity.common.models.tiny import build_tiny_model

    with tempfile.TemporaryDirectory(prefix="upstream-examples-") as scratch:
        work = Path(scratch)
        model = build_tiny_model(work / "tiny-model")
        from trinity.common.config.schema import TinyModelConfig

        vision_model = build_tiny_model(work / "tiny-vlm", TinyModelConfig(vision=True))
        data = write_data(work / "data")
        base = {**os.environ, **PLACEHOLDERS, "TRINITY_MODEL_PATH": str(model), "TRINITY_TASKSET_PATH": str(data),
                "TRINITY_SFT_DATASET_PATH": str(data), "RAY_ADDRESS": "local", "RAY_AUTH_MODE": "disabled"}
        placeholders = {**os.environ, **PLACEHOLDERS}  # what the dry-run figure is measured with
        accepted = [f for f in files if dry_run(f, placeholders, work).ok]
        ran = 0
        root = Path(os.path.commonpath([f.parent for f in files]))
        print(f"{len(accepted)} of {len(files)} configs pass --dry-run; running each for 2 steps")
        for number, path in enumerate(accepted):
            env = {**base, "TRINITY_CHECKPOINT_ROOT_DIR": str(work / f"ckpt{number}"),
                   "TRINITY_BUFFER_PATH": str(work / f"buffer{number}"), "RAY_TMPDIR": tempfile.mkdtemp(dir="/tmp")}
            try:
                outcome, seconds = run_one(path, env, data, model, work, vision_model=vision_model)
            finally:
                shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
            ran += outcome == "ran"
            print(f"  {path.relative_to(root)}: {outcome} ({seconds:.0f} s)", flush=True)
        print(f"{ran} of {len(accepted)} accepted configs trained 2 steps")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
