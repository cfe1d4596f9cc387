#!/usr/bin/env python3
"""Prove trinity's CUDA paths on a machine with an NVIDIA GPU, and print a short report.

**Status: this script has NOT been run on a GPU yet.** No device was available
when it was written. What was verified, on a CPU-only machine: ``--dry-run``,
the no-CUDA exit (status 2, one line, before anything is installed), the
install fallback (a Python without pip), the NVML stand-in's no-driver
answer, and a smoke run of every check on the CPU backend with
``--allow-cpu`` (``vllm-engine`` against the repository's vLLM double). That
proves the plumbing, not CUDA: every line that only runs with a GPU (NCCL
process groups, tensors on ``cuda:0``, the stand-in talking to a real driver,
a real vLLM) is unproven. Expect the first GPU run to find problems; the
details log says where.

Normally started by ``scripts/gpu_check.sh``, which installs the repository's
packages without network and then runs this file. Run directly::

    python3 scripts/gpu_check.py              # all checks (exit 0 pass, 1 some FAIL, 2 no CUDA device)
    python3 scripts/gpu_check.py --dry-run    # list the checks; imports nothing heavy
    python3 scripts/gpu_check.py --preflight  # only: is there a CUDA torch and a GPU? (exit 0 or 2)
    python3 scripts/gpu_check.py --only hf-engine,weight-sync

The checks (each in a subprocess of its own, with a time limit, so one crash
or hang does not stop the rest):

1. ``backends``: ``trinity backends list --json`` shows cuda available and
   selected; ``trinity backends check cuda --json`` (the doctor) summarised.
2. ``conformance``: the core's conformance kit (``BackendConformance``) against
   the real CUDA backend, no doubles (``scripts/gpu_conformance_test.py``).
3. ``fsdp-trainer``: the FSDP2 trainer, in-process (one rank, ``mode: train``), two
   GRPO steps on a tiny model built offline; loss, step time, parameter device.
4. ``hf-engine``: ``HFEngine`` on the GPU: a batch of 16 prompts, tokens/s,
   model device, finite log-probs.
5. ``weight-sync``: a ``WeightSyncGroup`` round trip of 100 MiB between two
   processes (CUDA tensors in and out, over gloo and, with two GPUs or more,
   over NCCL: NCCL needs one device per rank), each group built by the CUDA
   backend's ``trinity_stateless_process_group``; checksums compared, MB/s.
6. ``vllm-engine``: ``trinity.common.models.vllm_engine.VLLMEngine`` generates a
   batch, when vllm and that module exist (SKIP otherwise).

Set-up rows and notes: ``install`` (``gpu_check.sh`` tries ``pip install --no-index
--no-deps --no-build-isolation -e . -e trinity_backend_cuda``; both pyprojects
build with hatchling, so without hatchling, pip, or a writable environment the
checks run from ``PYTHONPATH`` plus generated ``.dist-info`` folders holding the
entry points: backend discovery reads only ``importlib.metadata``, so that is
all it needs); one ``MISSING`` line per absent dependency; and, where
nvidia-ml-py is absent (the cuda probe needs it), a ctypes stand-in for the
few NVML calls the backend makes, announced in a ``NOTE`` line.

The report is printed and written to ``$OUT/gpu_check_report.txt`` (or
``./gpu_check_report.txt``), with every check's captured output in
``gpu_check_details.log`` beside it. The report is rewritten after every
check, so a run killed half-way still leaves what it found.

``--allow-cpu`` runs everything on whatever backend is selected (the CPU one
on a machine without GPU): a development aid for this script, not a GPU check.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()
REPO = SCRIPT.parents[1]
CONFORMANCE_MODULE = SCRIPT.with_name("gpu_conformance_test.py")
REPORT_NAME = "gpu_check_report.txt"
DETAILS_NAME = "gpu_check_details.log"
#: Exit status when there is no usable CUDA device (or no torch).
EXIT_NO_CUDA = 2
#: Whole run: the checks stop being started once this many seconds have passed (``--budget-s``).
DEFAULT_BUDGET_S = 390.0
#: Size of the weight-sync round trip.
SYNC_MIB = 100
SYNC_BUCKET_BYTES = 32 << 20
#: The tiny model every model check uses: head_dim 64, which every attention kernel (vLLM's included) supports.
TINY_SPEC = {"hidden_size": 256, "num_layers": 2, "num_heads": 4, "intermediate_size": 512, "vocab_size": 400}

#: Importable module -> (pip requirement, what needs it). One line each is reported when missing.
DEPENDENCIES: dict[str, tuple[str, str]] = {
    "torch": ("a CUDA build of torch>=2.6", "everything"),
    "pluggy": ("pluggy>=1.5", "backend discovery (every check)"),
    "yaml": ("pyyaml>=6", "the config schema (trainer)"),
    "numpy": ("numpy>=1.24", "torch interop"),
    "pynvml": ("nvidia-ml-py>=12", "the CUDA backend's probe (without it cuda probes unavailable)"),
    "pytest": ("pytest>=8", "the conformance check"),
    "transformers": ("transformers>=4.50", "the tiny model, trainer and hf engine checks"),
    "tokenizers": ("tokenizers>=0.19", "the tiny model's tokenizer"),
    "safetensors": ("safetensors>=0.4", "saving/loading the tiny model"),
    "ray": ("ray>=2.40", "trinity runs (not these checks: the trainer runs in-process)"),
    "sqlalchemy": ("sqlalchemy>=2.0", "trinity's sqlite buffer (not these checks)"),
    "pyarrow": ("pyarrow>=14", "trinity's parquet task sets (not these checks)"),
    "rich": ("rich>=13", "the human table of `trinity backends list` (not these checks: --json)"),
}
#: Optional modules: reported as present/absent, never as a problem.
OPTIONAL = {"vllm": "the vllm-engine check", "triton": "torch.compile on CUDA", "pytest_timeout": "pytest's timeout"}


# --- results ------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the report: ``STATUS name: detail (seconds)``."""

    status: str  # PASS, FAIL or SKIP
    name: str
    detail: str
    seconds: float | None = None

    def line(self) -> str:
        """Return the report line."""
        timing = f" ({self.seconds:.1f} s)" if self.seconds is not None else ""
        return f"{self.status} {self.name}: {self.detail}{timing}"


@dataclass
class Context:
    """What a check needs to know: where to work and which device it must prove."""

    workdir: Path
    #: ``cuda`` normally; the selected backend's device type with ``--allow-cpu``.
    expected_device: str
    #: Environment for the subprocesses a check starts itself (the CLI, pytest, sync peers).
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))


class CheckFailed(Exception):
    """A check found something wrong; the message is the report's detail (one line)."""


@dataclass(frozen=True)
class Check:
    """A named check, its function and its time limit."""

    name: str
    function: Callable[[Context], list[Row]]
    timeout_s: float
    #: Modules it cannot run without (from DEPENDENCIES).
    needs: tuple[str, ...]

    @property
    def summary(self) -> str:
        """First line of the check function's docstring."""
        return (self.function.__doc__ or "").strip().splitlines()[0]


def one_line(text: object, limit: int = 300) -> str:
    """Return ``text`` on one line, shortened to ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def missing_dependency(name: str) -> str:
    """Return the one-line report of a missing module."""
    requirement, needed_by = DEPENDENCIES.get(name, (name, ""))
    return f"missing Python dependency: {name} (pip install '{requirement}'; needed by {needed_by or 'this check'})"


# --- helpers used inside checks -------------------------------------------------------------


def _selected_backend(ctx: Context) -> str:
    """Return the selected backend's name; raise CheckFailed unless its device type is the expected one."""
    import trinity.device

    selection = trinity.device.current_selection()
    device_type = trinity.device.get_device_type()
    if device_type != ctx.expected_device:
        raise CheckFailed(
            f"the selected backend is {selection.name!r} (device type {device_type}), not {ctx.expected_device}: "
            f"{selection.reason}"
        )
    return selection.name


def _tiny_model(ctx: Context) -> Path:
    """Build (once; atomically) the tiny model of TINY_SPEC under the work folder and return its path."""
    from trinity.common.config import TinyModelConfig
    from trinity.common.models.tiny import build_tiny_model

    return build_tiny_model(ctx.workdir / "tiny-model", TinyModelConfig(**TINY_SPEC))


def _sync_devices(ctx: Context) -> None:
    """Wait for queued device work (timings must include it)."""
    import trinity.device

    trinity.device.synchronize()


def _run(command: Sequence[str], ctx: Context, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in the repository with the checks' environment; output captured as text."""
    return subprocess.run(
        list(command), cwd=REPO, env=ctx.env, capture_output=True, text=True, timeout=timeout_s, check=False
    )


def _trinity_command() -> list[str]:
    """Return the ``trinity`` console script beside this Python when installed, else ``python -m trinity.cli.main``."""
    script = Path(sys.executable).with_name("trinity")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "trinity.cli.main"]


def _free_port() -> int:
    """Return a TCP port free on this machine now."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- check 1 --------------------------------------------------------------------------------


def check_backends(ctx: Context) -> list[Row]:
    """`trinity backends list --json` selects cuda; `trinity backends check cuda --json` (doctor) summarised."""
    rows: list[Row] = []
    trinity = _trinity_command()
    started = time.monotonic()
    done = _run([*trinity, "backends", "list", "--json"], ctx, 120)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise CheckFailed(f"`trinity backends list --json` exited {done.returncode}: {one_line(done.stderr)}")
    listing = json.loads(done.stdout)
    expected = "cpu" if ctx.expected_device == "cpu" else "cuda"
    row = next((r for r in listing["backends"] if r["name"] == expected), None)
    selected = listing.get("selected") or {}
    if row is None:
        names = ", ".join(r["name"] for r in listing["backends"])
        rows.append(Row("FAIL", "backends", f"no {expected!r} backend discovered (found: {names}); is "
                        "trinity-backend-cuda installed (entry point trinity.backends:cuda)?", seconds))
    elif row["status"] != "ok":
        rows.append(Row("FAIL", "backends", f"{expected} is broken: {row['error']}", seconds))
    elif not row["available"]:
        rows.append(Row("FAIL", "backends", f"{expected} is not available: {row['reason']}", seconds))
    elif not row["selected"]:
        why = selected.get("reason") or listing.get("selection_error")
        rows.append(Row("FAIL", "backends", f"{expected} is available but {selected.get('name')!r} is selected "
                        f"({why})", seconds))
    else:
        probe = "NVML" if expected == "cuda" else "probe"
        count = row["device_count"]
        note = f"; compile: {'yes' if row['compile_supported'] else 'no (' + str(row['compile_reason']) + ')'}"
        rows.append(Row("PASS", "backends", f"{expected} selected ({selected.get('source')}, {probe}: {count} "
                        f"device{'s' if count != 1 else ''}){one_line(note, 160)}", seconds))

    started = time.monotonic()
    done = _run([*trinity, "backends", "check", expected, "--json"], ctx, 120)
    seconds = time.monotonic() - started
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        rows.append(Row("FAIL", "doctor", f"`trinity backends check {expected} --json` exited {done.returncode} "
                        f"without JSON: {one_line(done.stderr)}", seconds))
        return rows
    counts = {status: 0 for status in ("ok", "warn", "fail")}
    for finding in report["checks"]:
        counts[finding["status"]] = counts.get(finding["status"], 0) + 1
    notes = [f"{c['name']}: {c['detail']}" for c in report["checks"] if c["status"] != "ok"]
    detail = f"{counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail"
    facts = {k: v for c in report["checks"] for k, v in c.get("facts", {}).items()
             if k in ("driver_version", "cuda_driver_version", "torch", "torch_cuda", "nccl")}
    if facts:
        detail += " [" + ", ".join(f"{k}={v}" for k, v in sorted(facts.items())) + "]"
    if notes:
        detail += "; " + "; ".join(notes)
    rows.append(Row("PASS" if report["ok"] else "FAIL", "doctor", one_line(detail, 600), seconds))
    return rows


# --- check 2 --------------------------------------------------------------------------------


def check_conformance(ctx: Context) -> list[Row]:
    """The conformance kit (BackendConformance) against the real CUDA backend, no test doubles."""
    import xml.etree.ElementTree as ET

    backend = "cpu" if ctx.expected_device == "cpu" else "cuda"
    junit = ctx.workdir / "conformance.xml"
    env = {**ctx.env, "GPU_CHECK_REAL": "1", "GPU_CHECK_BACKEND": backend}
    command = [sys.executable, "-m", "pytest", str(CONFORMANCE_MODULE), "-q", "-p", "no:cacheprovider",
               f"--junitxml={junit}", "-o", "junit_family=xunit1"]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    print(done.stdout[-20000:])
    print(done.stderr[-5000:], file=sys.stderr)
    if not junit.is_file():
        raise CheckFailed(f"pytest exited {done.returncode} without results: "
                          f"{one_line((done.stdout + done.stderr).strip().splitlines()[-1:] or '')}")
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = sum(int(s.get("tests", 0)) for s in suites)
    failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    skipped = sum(int(s.get("skipped", 0)) for s in suites)
    passed = total - failed - skipped
    bad = []
    for case in root.iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            bad.append(f"{case.get('name')}: {one_line(problem.get('message', ''), 160)}")
    detail = f"{passed} passed, {failed} failed, {skipped} skipped of {total} (real {backend} backend, no doubles)"
    if bad:
        detail += "; " + "; ".join(bad[:4]) + ("; ..." if len(bad) > 4 else "")
    status = "PASS" if failed == 0 and done.returncode == 0 and passed > 0 else "FAIL"
    if status == "FAIL" and failed == 0:
        detail += f"; pytest exited {done.returncode}"
    return [Row(status, "conformance", one_line(detail, 900))]


# --- check 3 --------------------------------------------------------------------------------


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


def check_fsdp_trainer(ctx: Context) -> list[Row]:
    """FSDPTrainer (FSDP2, in-process, one rank) runs two GRPO steps on the GPU; loss, step time, devices."""
    import torch

    from trinity.buffer import pipeline_for_plan
    from trinity.common.config import parse_config
    from trinity.common.config.plan.run import resolve_run
    from trinity.common.models.checksum import state_dict_checksum
    from trinity.trainer.trainer import FSDPTrainer

    _selected_backend(ctx)
    model = _tiny_model(ctx)
    # upstream Trinity-RFT's schema; mode train: the trainer alone, one rank on one device
    plan = resolve_run(parse_config({
        "mode": "train",
        "project": "gpu-check",
        "name": "fsdp-trainer",
        "checkpoint_root_dir": str(ctx.workdir / "checkpoints"),
        "model": {"model_path": str(model), "max_prompt_tokens": 256, "max_response_tokens": 64},
        "cluster": {"node_num": 1, "gpu_per_node": 1},
        "algorithm": {"algorithm_type": "grpo", "repeat_times": 4, "optimizer": {"lr": 1e-3},
                      # a KL loss exercises the reference model too
                      "kl_loss_fn": "k2", "kl_loss_fn_args": {"kl_coef": 0.01}},
        "explorer": {"rollout_model": {"dtype": "float32"}},
        "trainer": {"save_interval": 0, "use_dynamic_bsz": False,
                    # inductor costs ~20 s per start; compile support is in `backends`
                    "use_torch_compile": False,
                    "trainer_config": {"actor_rollout_ref": {"actor": {"ppo_micro_batch_size_per_gpu": 8}}}},
        "monitor": {"monitor_type": "none"},
    }))
    if not plan.algorithm.use_reference:
        raise CheckFailed("the check's config no longer uses a reference model; fix the KL settings")

    started = time.monotonic()
    trainer = FSDPTrainer(plan, in_process=True, use_torch_compile=False)
    setup_s = time.monotonic() - started
    try:
        info = trainer.rank_info[0]
        worker = trainer.workers[0]
        devices = set()
        for parameter in worker.actor.parameters():
            local = parameter.to_local() if hasattr(parameter, "to_local") else parameter
            devices.add(str(local.device))
        if ctx.expected_device != "cpu":
            torch.cuda.reset_peak_memory_stats()
        before = state_dict_checksum(trainer.full_state_dict())
        # GRPO's group advantages are computed in the buffer's pipeline, as in a run
        pipeline = pipeline_for_plan(plan, pad_token_id=trainer.pad_token_id)
        first = trainer.train_step(pipeline.process(_experiences(groups=4, group_size=4, vocab=300, seed=0)))
        second = trainer.train_step(pipeline.process(_experiences(groups=4, group_size=4, vocab=300, seed=1)))
        after = state_dict_checksum(trainer.full_state_dict())
        peak = torch.cuda.max_memory_allocated() / 2**20 if ctx.expected_device != "cpu" else 0.0
    finally:
        trainer.shutdown()
    problems = []
    if not all(d.startswith(ctx.expected_device) for d in devices):
        problems.append(f"parameters on {sorted(devices)}, expected {ctx.expected_device}")
    for step in (first, second):
        if not math.isfinite(step["loss"]) or not math.isfinite(step["grad_norm"]):
            problems.append(f"non-finite loss/grad_norm at step {int(step['step'])}: {step['loss']}, "
                            f"{step['grad_norm']}")
        elif step["grad_norm"] <= 0:
            problems.append(f"no gradient at step {int(step['step'])} (grad_norm 0): the advantages are all zero")
    if before == after:
        problems.append("the weights did not change after two optimizer steps")
    expected_pg = "cpu:gloo" if ctx.expected_device == "cpu" else f"cpu:gloo,{ctx.expected_device}:nccl"
    if info["backend"] != expected_pg:
        problems.append(f"process group backend {info['backend']!r}, expected {expected_pg!r}")
    detail = (f"loss {first['loss']:.4f} -> {second['loss']:.4f}, grad_norm {first['grad_norm']:.3f}, "
              f"step time {first['step_time_s']:.2f} s (first) / {second['step_time_s']:.2f} s, setup {setup_s:.1f} s, "
              f"{int(first['tokens'])} tokens/step, params on {','.join(sorted(devices))}, pg {info['backend']}"
              + (f", peak {peak:.0f} MiB" if peak else ""))
    if problems:
        raise CheckFailed("; ".join(problems) + " | " + detail)
    return [Row("PASS", "fsdp-trainer", detail)]


# --- check 4 --------------------------------------------------------------------------------


def _completion_stats(results: Sequence[Sequence[Any]]) -> tuple[int, bool]:
    """Return (generated tokens, whether every log-prob is finite and <= 0) over ``results``."""
    import torch

    tokens = 0
    finite = True
    for completions in results:
        for completion in completions:
            tokens += len(completion.response_tokens)
            logprobs = torch.as_tensor(completion.logprobs, dtype=torch.float32)
            if len(logprobs) != len(completion.response_tokens):
                finite = False
            if logprobs.numel() and not (bool(torch.isfinite(logprobs).all()) and float(logprobs.max()) <= 1e-4):
                finite = False
    return tokens, finite


#: Sixteen short prompts in the tiny tokenizer's vocabulary.
PROMPTS = [f"What is {3 + 6 * i} plus {90 - 5 * i}? The answer is" for i in range(16)]


def check_hf_engine(ctx: Context) -> list[Row]:
    """HFEngine generates a batch on the GPU: tokens/s, model device, finite log-probs."""
    from trinity.common.models.engine import SamplingParams
    from trinity.common.models.hf_engine import HFEngine

    _selected_backend(ctx)
    model = _tiny_model(ctx)
    started = time.monotonic()
    engine = HFEngine(str(model), max_batch_size=32, batch_wait_ms=0)
    load_s = time.monotonic() - started
    try:
        device = str(next(engine.model.parameters()).device)
        params = SamplingParams(temperature=1.0, max_tokens=64, n=1)
        engine.generate(PROMPTS[:2], SamplingParams(max_tokens=8))  # warm-up: kernels, allocator
        _sync_devices(ctx)
        started = time.monotonic()
        results = engine.generate(PROMPTS[:16], params)
        _sync_devices(ctx)
        elapsed = time.monotonic() - started
        checksum = engine.state_dict_checksum()
    finally:
        engine.shutdown()
    tokens, finite = _completion_stats(results)
    problems = []
    expected = "cpu" if ctx.expected_device == "cpu" else f"{ctx.expected_device}:0"
    if device != expected:
        problems.append(f"model on {device}, expected {expected}")
    if not finite:
        problems.append("some log-probs are not finite (or > 0, or not one per token)")
    if len(results) != 16 or tokens == 0:
        problems.append(f"{len(results)} results with {tokens} tokens for 16 prompts")
    detail = (f"16 prompts x 64 new tokens max: {tokens} tokens in {elapsed:.2f} s = {tokens / elapsed:.0f} tokens/s, "
              f"model on {device}, log-probs finite: {'yes' if finite else 'NO'}, load {load_s:.1f} s, "
              f"checksum {checksum[:12]}")
    if problems:
        raise CheckFailed("; ".join(problems) + " | " + detail)
    return [Row("PASS", "hf-engine", detail)]


# --- check 5 --------------------------------------------------------------------------------


def _sync_specs(mib: int) -> list[tuple[str, str, tuple[int, ...]]]:
    """Return (name, dtype, shape) of a model-like state dict of about ``mib`` MiB (float32 plus one bfloat16)."""
    specs: list[tuple[str, str, tuple[int, ...]]] = [("embed.bf16", "bfloat16", (512, 1024))]  # 1 MiB
    used = 1 << 20
    sizes = [(1024, 1024), (256, 1024), (4096, 256), (1000,)]  # 4 MiB, 1 MiB, 4 MiB, ~4 KiB in float32
    index = 0
    while used < mib << 20:
        shape = sizes[index % len(sizes)]
        numel = math.prod(shape)
        if used + numel * 4 > mib << 20:
            shape = (((mib << 20) - used) // 4,)
            numel = shape[0]
            if numel == 0:
                break
        specs.append((f"layer{index}.weight", "float32", shape))
        used += numel * 4
        index += 1
    return specs


def sync_peer(args: argparse.Namespace) -> int:
    """One side of the weight-sync round trip (a process of its own); writes its findings as JSON to ``--result``."""
    import torch

    import trinity.device
    from trinity.common.models.checksum import state_dict_checksum
    from trinity.weight_transport import TensorMeta, WeightSyncGroup, WeightSyncGroupInfo

    out: dict[str, Any] = {"rank": args.rank}
    try:
        if trinity.device.get_device_type() != "cpu":
            trinity.device.set_device(args.device_index)
        device = trinity.device.torch_device()
        info = WeightSyncGroupInfo("127.0.0.1", args.port, 2, 1, f"gpu-check-{args.backend}", args.backend, 120.0)
        started = time.monotonic()
        group = WeightSyncGroup.create(info) if args.rank == 0 else WeightSyncGroup.join(info, args.rank)
        out["join_s"] = time.monotonic() - started
        out["group_device"] = str(group.device)
        specs = _sync_specs(args.mib)
        metas = [TensorMeta(name, dtype, shape) for name, dtype, shape in specs]
        state: dict[str, torch.Tensor] = {}
        if args.rank == 0:
            generator = torch.Generator().manual_seed(0)
            state = {name: torch.randn(shape, generator=generator).to(getattr(torch, dtype)).to(device)
                     for name, dtype, shape in specs}
            trinity.device.synchronize()
        rounds = []
        for _ in range(2):  # the first round includes allocations and connection set-up
            group.broadcast_tensor(torch.zeros(1, device=group.device))  # both sides start together
            started = time.monotonic()
            if args.rank == 0:
                group.broadcast_state_dict(state, SYNC_BUCKET_BYTES)
            else:
                state = group.receive_state_dict(metas, SYNC_BUCKET_BYTES, device)
            trinity.device.synchronize()
            rounds.append(time.monotonic() - started)
        out["rounds_s"] = rounds
        out["bytes"] = sum(t.numel() * t.element_size() for t in state.values())
        out["tensors"] = len(state)
        out["devices"] = sorted({str(t.device) for t in state.values()})
        out["dtypes"] = sorted({str(t.dtype).removeprefix("torch.") for t in state.values()})
        out["checksum"] = state_dict_checksum(state)
        group.close()
        out["ok"] = True
    except Exception as exc:  # noqa: BLE001 - reported through the result file
        out["ok"] = False
        out["error"] = one_line(f"{type(exc).__name__}: {exc}")
        traceback.print_exc()
    Path(args.result).write_text(json.dumps(out), encoding="utf-8")
    return 0 if out["ok"] else 1


def _round_trip(ctx: Context, backend: str, device_indices: tuple[int, int]) -> Row:
    """Run the two sync peers for ``backend`` and return the row comparing what they sent and received."""
    name = f"weight-sync-{backend}"
    port = _free_port()
    results = [ctx.workdir / f"sync-{backend}-{rank}.json" for rank in (0, 1)]
    logs = [ctx.workdir / f"sync-{backend}-{rank}.log" for rank in (0, 1)]
    processes = []
    started = time.monotonic()
    for rank in (0, 1):
        results[rank].unlink(missing_ok=True)
        command = [sys.executable, str(SCRIPT), "--sync-peer", "--rank", str(rank), "--port", str(port),
                   "--backend", backend, "--device-index", str(device_indices[rank]), "--mib", str(SYNC_MIB),
                   "--result", str(results[rank])]
        with logs[rank].open("w") as log:
            processes.append(subprocess.Popen(command, cwd=REPO, env=ctx.env, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + 150
    for process in processes:
        try:
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for rank in (0, 1):
        print(f"--- {name} rank {rank} output ---\n{logs[rank].read_text(errors='replace')[-6000:]}")
    found = [json.loads(p.read_text()) if p.is_file() else None for p in results]
    seconds = time.monotonic() - started
    missing = [rank for rank in (0, 1) if found[rank] is None]
    if missing:
        codes = ", ".join(f"rank {r} exit {processes[r].returncode}" for r in (0, 1))
        return Row("FAIL", name, f"peer(s) {missing} wrote no result (killed, crashed or hung: {codes}); "
                   "see the details log", seconds)
    sent, received = found[0], found[1]
    assert sent is not None and received is not None
    errors = [f"rank {r['rank']}: {r['error']}" for r in (sent, received) if not r.get("ok")]
    if errors:
        return Row("FAIL", name, "; ".join(errors), seconds)
    problems = []
    if sent["checksum"] != received["checksum"]:
        problems.append(f"checksum differs: sent {sent['checksum'][:12]}, received {received['checksum'][:12]}")
    if sent["bytes"] != received["bytes"]:
        problems.append(f"{received['bytes']} bytes received of {sent['bytes']}")
    wanted = ctx.expected_device
    for side, peer in (("sent", sent), ("received", received)):
        if not all(d.startswith(wanted) for d in peer["devices"]):
            problems.append(f"{side} tensors on {peer['devices']}, expected {wanted}")
    warm = max(received["rounds_s"][1], 1e-9)
    mb = received["bytes"] / 1e6
    detail = (f"{received['bytes'] / 2**20:.0f} MiB, {received['tensors']} tensors "
              f"({'+'.join(received['dtypes'])}), {','.join(sent['devices'])} -> {backend} (buffers on "
              f"{sent['group_device']}) -> {','.join(received['devices'])}, checksums "
              f"{'equal' if sent['checksum'] == received['checksum'] else 'DIFFER'}: {mb / warm:.0f} MB/s "
              f"({warm:.3f} s warm; first round {received['rounds_s'][0]:.3f} s, join {received['join_s']:.2f} s)")
    if problems:
        return Row("FAIL", name, "; ".join(problems) + " | " + detail, seconds)
    return Row("PASS", name, detail, seconds)


def _device_count(ctx: Context) -> int:
    """Return how many devices of the expected type torch sees (1 for the CPU)."""
    if ctx.expected_device == "cpu":
        return 1
    import torch

    return int(torch.cuda.device_count())


def check_weight_sync(ctx: Context) -> list[Row]:
    """WeightSyncGroup round trip of 100 MiB between two processes: checksums equal, MB/s (nccl needs 2 GPUs)."""
    rows = [_round_trip(ctx, "gloo", device_indices=(0, 0))]
    if ctx.expected_device == "cpu":
        rows.append(Row("SKIP", "weight-sync-nccl", "not a CUDA run (--allow-cpu)"))
    elif _device_count(ctx) >= 2:
        rows.append(_round_trip(ctx, "nccl", device_indices=(0, 1)))
    else:
        rows.append(Row("SKIP", "weight-sync-nccl", "one GPU: NCCL needs one device per rank"))
    return rows


# --- check 6 --------------------------------------------------------------------------------


def check_vllm_engine(ctx: Context) -> list[Row]:
    """VLLMEngine (trinity/common/models/vllm_engine.py) generates a batch, when vllm and that module exist."""
    if importlib.util.find_spec("vllm") is None:
        return [Row("SKIP", "vllm-engine", "vllm not installed")]
    module_file = REPO / "trinity" / "common" / "models" / "vllm_engine.py"
    if not module_file.is_file():
        return [Row("SKIP", "vllm-engine", "trinity/common/models/vllm_engine.py does not exist yet")]
    import vllm

    from trinity.common.models.engine import SamplingParams
    from trinity.common.models.vllm_engine import VLLMEngine  # type: ignore[import-not-found]

    _selected_backend(ctx)
    model = _tiny_model(ctx)
    started = time.monotonic()
    engine = VLLMEngine(model_path=str(model), tensor_parallel_size=1, memory_utilization=0.3)
    load_s = time.monotonic() - started
    try:
        engine.generate(PROMPTS[:2], SamplingParams(max_tokens=8))
        started = time.monotonic()
        results = engine.generate(PROMPTS[:16], SamplingParams(temperature=1.0, max_tokens=64))
        elapsed = time.monotonic() - started
        try:
            checksum = str(engine.state_dict_checksum())[:12]
        except Exception as exc:  # noqa: BLE001 - reported, not fatal: generation is what this check proves
            checksum = f"n/a ({one_line(exc, 120)})"
    finally:
        engine.shutdown()
    tokens, finite = _completion_stats(results)
    detail = (f"vllm {getattr(vllm, '__version__', '?')}: 16 prompts, {tokens} tokens in {elapsed:.2f} s = "
              f"{tokens / max(elapsed, 1e-9):.0f} tokens/s, log-probs finite: {'yes' if finite else 'NO'}, "
              f"start {load_s:.1f} s, checksum {checksum}")
    if len(results) != 16 or tokens == 0 or not finite:
        raise CheckFailed(detail)
    return [Row("PASS", "vllm-engine", detail)]


CHECKS: tuple[Check, ...] = (
    Check("backends", check_backends, 120, ("pluggy",)),
    Check("conformance", check_conformance, 300, ("pluggy", "pytest", "torch")),
    Check("fsdp-trainer", check_fsdp_trainer, 240, ("torch", "pluggy", "yaml", "transformers", "tokenizers",
                                                     "safetensors")),
    Check("hf-engine", check_hf_engine, 180, ("torch", "pluggy", "yaml", "transformers", "tokenizers",
                                               "safetensors")),
    Check("weight-sync", check_weight_sync, 200, ("torch", "pluggy", "yaml")),
    Check("vllm-engine", check_vllm_engine, 300, ("torch", "pluggy", "yaml", "transformers", "tokenizers",
                                                   "safetensors")),
)


# --- the child side: one check in its own process --------------------------------------------


def run_one_check(args: argparse.Namespace) -> int:
    """Run the check ``args.run_check`` in this process and write its rows as JSON to ``args.result``."""
    check = next(c for c in CHECKS if c.name == args.run_check)
    ctx = Context(workdir=Path(args.workdir), expected_device=args.expected_device)
    started = time.monotonic()
    try:
        rows = check.function(ctx)
    except ModuleNotFoundError as exc:
        traceback.print_exc()
        rows = [Row("FAIL", check.name, missing_dependency(exc.name or str(exc)))]
    except CheckFailed as exc:
        rows = [Row("FAIL", check.name, one_line(exc, 900))]
    except Exception as exc:  # noqa: BLE001 - one line in the report, the traceback in the details log
        traceback.print_exc()
        rows = [Row("FAIL", check.name, one_line(f"{type(exc).__name__}: {exc}", 600))]
    elapsed = time.monotonic() - started
    for row in rows:
        if row.seconds is None:
            row.seconds = elapsed if len(rows) == 1 else None
    Path(args.result).write_text(json.dumps([asdict(r) for r in rows]), encoding="utf-8")
    return 0


# --- the orchestrator -------------------------------------------------------------------------

PROBE_CODE = textwrap.dedent(
    """
    import json, sys
    out = {"ok": False}
    try:
        import torch
    except BaseException as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(out)); sys.exit(0)
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    try:
        out["available"] = bool(torch.cuda.is_available())
        if out["available"]:
            out["count"] = torch.cuda.device_count()
            out["names"] = [torch.cuda.get_device_name(i) for i in range(out["count"])]
            out["ok"] = True
    except BaseException as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    try:
        import pynvml
        pynvml.nvmlInit()
        out["driver"] = str(pynvml.nvmlSystemGetDriverVersion())
        pynvml.nvmlShutdown()
    except BaseException:
        pass
    print(json.dumps(out))
    """
)


def probe_torch(env: dict[str, str]) -> dict[str, Any]:
    """Ask a fresh interpreter whether torch imports and sees a CUDA device (and the driver version)."""
    try:
        done = subprocess.run([sys.executable, "-c", PROBE_CODE], env=env, capture_output=True, text=True,
                              timeout=180, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": "`import torch; torch.cuda.is_available()` did not finish in 180 s"}
    lines = done.stdout.strip().splitlines()
    try:
        found: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"ok": False, "error": f"the torch probe exited {_exit_text(done.returncode)}: {one_line(last)}"}
    if "driver" not in found and shutil.which("nvidia-smi"):
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30, check=False)
            if smi.returncode == 0 and smi.stdout.strip():
                found["driver"] = smi.stdout.strip().splitlines()[0]
    return found


def no_cuda_reason(probe: dict[str, Any]) -> str:
    """Return why ``probe`` found no usable CUDA device, in one line."""
    if "torch" not in probe:
        return f"torch cannot be imported ({probe.get('error', 'unknown error')}); install a CUDA build of torch"
    version = probe["torch"]
    if not probe.get("cuda"):
        return f"torch {version} is a CPU-only build (torch.version.cuda is None); install a CUDA build of torch"
    if probe.get("error"):
        return f"torch {version} (CUDA {probe['cuda']}) failed to query CUDA: {probe['error']}"
    return (f"torch {version} (CUDA {probe['cuda']}) sees no GPU: torch.cuda.is_available() is False; "
            "check `nvidia-smi`, the driver and CUDA_VISIBLE_DEVICES")


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"on signal {signal.Signals(-code).name}"
    return f"with status {code}"


def output_dir() -> Path:
    """Return where the report goes: ``$OUT`` when set, else the current directory."""
    out = os.environ.get("OUT")
    return Path(out) if out else Path.cwd()


class Report:
    """The report: header, notes, rows; rewritten to disk after every change."""

    def __init__(self, header: str) -> None:
        self.header = header
        self.notes: list[str] = []
        self.rows: list[Row] = []
        self.footer: list[str] = []
        self.path = output_dir() / REPORT_NAME

    def add(self, row: Row) -> None:
        """Add ``row``, print it and save the report."""
        self.rows.append(row)
        print(row.line(), flush=True)
        self.save()

    def text(self) -> str:
        """Return the whole report."""
        return "\n".join([self.header, *self.notes, *(row.line() for row in self.rows), *self.footer]) + "\n"

    def save(self) -> None:
        """Write the report file (never fails the run)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(self.text(), encoding="utf-8")
        except OSError as exc:
            print(f"gpu_check: cannot write {self.path}: {exc}", file=sys.stderr)


def header_line(probe: dict[str, Any], allow_cpu: bool) -> str:
    """Return the report's first line: date, GPU, driver, torch, CUDA."""
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    names = probe.get("names") or []
    gpu = names[0] if names else ("no GPU (--allow-cpu smoke run: not a GPU check)" if allow_cpu else "no GPU")
    if len(names) > 1:
        gpu = f"{len(names)} x {gpu}"
    return (f"trinity gpu check — {date}, {gpu}, driver {probe.get('driver', 'unknown')}, "
            f"torch {probe.get('torch', 'missing')}, CUDA {probe.get('cuda') or 'none'}")


def _toml_value(text: str, key: str) -> str | None:
    match = re.search(rf'^\s*{re.escape(key)}\s*=\s*"([^"]+)"', text, re.MULTILINE)
    return match.group(1) if match else None


def write_shim(site: Path) -> None:
    """Write ``.dist-info`` folders for trinity-rft and trinity-backend-cuda into ``site`` (entry points included).

    With ``site``, the repository and ``trinity_backend_cuda/src`` on
    ``PYTHONPATH``, ``importlib.metadata`` finds both distributions and the
    ``trinity.backends`` entry point ``cuda`` exactly as after an install.
    """
    projects = [(REPO / "pyproject.toml", "trinity"), (REPO / "trinity_backend_cuda" / "pyproject.toml",
                                                       "trinity_backend_cuda")]
    for pyproject, top_level in projects:
        text = pyproject.read_text(encoding="utf-8")
        name = _toml_value(text, "name") or top_level
        version = _toml_value(text, "version") or "0.0.0"
        folder = site / f"{re.sub(r'[-_.]+', '_', name)}-{version}.dist-info"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: gpu_check shim of {pyproject}\n",
            encoding="utf-8",
        )
        (folder / "top_level.txt").write_text(f"{top_level}\n", encoding="utf-8")
        backends = re.search(r'\[project\.entry-points\."trinity\.backends"\]\s*\n((?:[^\[\n].*\n?)*)', text)
        lines = []
        if backends:
            lines = ["[trinity.backends]", *(ln.strip().replace('"', "") for ln in backends.group(1).splitlines()
                                             if "=" in ln)]
        (folder / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


VERIFY_CODE = textwrap.dedent(
    """
    import json
    from importlib.metadata import entry_points
    out = {}
    try:
        import trinity
        out["trinity"] = trinity.__file__
    except BaseException as exc:
        out["error"] = f"import trinity: {type(exc).__name__}: {exc}"
    try:
        import trinity_backend_cuda
        out["cuda_package"] = trinity_backend_cuda.__file__
    except BaseException as exc:
        out["error"] = f"import trinity_backend_cuda: {type(exc).__name__}: {exc}"
    out["entry_points"] = sorted(f"{ep.name}={ep.value}" for ep in entry_points(group="trinity.backends"))
    print(json.dumps(out))
    """
)


def verify_install(env: dict[str, str]) -> tuple[bool, str]:
    """Return (ok, detail): do trinity and trinity_backend_cuda import from this tree, with the cuda entry point?"""
    done = subprocess.run([sys.executable, "-c", VERIFY_CODE], cwd=tempfile.gettempdir(), env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return False, f"verification exited {done.returncode}: {one_line(done.stderr[-500:])}"
    if "error" in found:
        return False, found["error"]
    problems = []
    for key in ("trinity", "cuda_package"):
        if not str(Path(found[key]).resolve()).startswith(str(REPO)):
            problems.append(f"{key} imports from {found[key]}, not from {REPO}")
    if not any(ep.startswith("cuda=") for ep in found["entry_points"]):
        problems.append(f"no trinity.backends entry point 'cuda' (found {found['entry_points']})")
    return not problems, "; ".join(problems)


def install_reason(log_path: str) -> str:
    """Return, in one line, why ``pip install -e`` failed, from its log."""
    text = ""
    with contextlib.suppress(OSError):
        text = Path(log_path).read_text(errors="replace")
    if importlib.util.find_spec("hatchling") is None:
        return "hatchling (the build backend of both pyprojects) is not installed and cannot be downloaded"
    if "externally-managed-environment" in text:
        return "this Python is externally managed (PEP 668); pip refuses to install into it"
    if "No module named pip" in text or not text:
        return "pip is not available for this Python"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith(" ")]
    errors = [ln for ln in lines if "error" in ln.lower()]
    return one_line((errors or lines or ["unknown"])[-1], 200)


def prepare_install(workdir: Path, env: dict[str, str]) -> Row:
    """Make trinity and the CUDA backend importable with entry points for the checks; return the install row."""
    mode = os.environ.get("GPU_CHECK_INSTALL", "")
    started = time.monotonic()
    ok, problem = verify_install(env)
    if ok and mode == "editable":
        return Row("PASS", "install", "pip install --no-deps --no-build-isolation -e . -e trinity_backend_cuda "
                   "(offline)", time.monotonic() - started)
    if ok:
        return Row("PASS", "install", "trinity and trinity-backend-cuda already importable from this tree with "
                   "their entry points (no install by this run)", time.monotonic() - started)
    why = install_reason(os.environ.get("GPU_CHECK_INSTALL_LOG", "")) if mode == "failed" else (
        "not installed by gpu_check.sh" if not mode else problem)
    site = workdir / "shim-site"
    write_shim(site)
    paths = [str(site), str(REPO), str(REPO / "trinity_backend_cuda" / "src")]
    env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH", "")])])
    ok, problem = verify_install(env)
    detail = (f"editable install impossible ({why}); using PYTHONPATH (repo, trinity_backend_cuda/src) plus "
              f"generated .dist-info folders carrying the entry points, which importlib.metadata reads like an "
              f"installed package's")
    if not ok:
        return Row("FAIL", "install", f"{detail}; still not importable: {problem}", time.monotonic() - started)
    return Row("PASS", "install", detail, time.monotonic() - started)


NVML_STANDIN = textwrap.dedent(
    '''
    """gpu_check's stand-in for nvidia-ml-py (``pynvml``), used only where that package is missing.

    It makes, through ctypes on the driver's own libnvidia-ml.so.1, the NVML calls
    trinity-backend-cuda makes; errors carry NVML's codes as ``NVMLError.value``.
    """
    import ctypes

    _lib = None


    class NVMLError(Exception):
        def __init__(self, value):
            super().__init__(value)
            self.value = value

        def __str__(self):
            try:
                function = _lib.nvmlErrorString
                function.restype = ctypes.c_char_p
                return function(self.value).decode()
            except Exception:
                return f"NVML error {self.value}"


    def _call(name, *args):
        global _lib
        if _lib is None:
            try:
                _lib = ctypes.CDLL("libnvidia-ml.so.1")
            except OSError:
                raise NVMLError(12) from None  # NVML_ERROR_LIBRARY_NOT_FOUND
        function = getattr(_lib, name, None)
        if function is None:
            raise NVMLError(13)  # NVML_ERROR_FUNCTION_NOT_FOUND
        code = function(*args)
        if code != 0:
            raise NVMLError(code)


    def _text(name, *args, size=96):
        buffer = ctypes.create_string_buffer(size)
        _call(name, *args, buffer, ctypes.c_uint(size))
        return buffer.value.decode()


    def nvmlInit():
        _call("nvmlInit_v2")


    def nvmlShutdown():
        _call("nvmlShutdown")


    def nvmlDeviceGetCount():
        count = ctypes.c_uint()
        _call("nvmlDeviceGetCount_v2", ctypes.byref(count))
        return count.value


    def nvmlDeviceGetHandleByIndex(index):
        handle = ctypes.c_void_p()
        _call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
        return handle


    def nvmlDeviceGetName(handle):
        return _text("nvmlDeviceGetName", handle)


    def nvmlDeviceGetUUID(handle):
        return _text("nvmlDeviceGetUUID", handle)


    def nvmlSystemGetDriverVersion():
        return _text("nvmlSystemGetDriverVersion", size=80)


    def nvmlSystemGetCudaDriverVersion():
        version = ctypes.c_int()
        _call("nvmlSystemGetCudaDriverVersion", ctypes.byref(version))
        return version.value
    '''
)


def write_nvml_standin(folder: Path) -> Path:
    """Write the ``pynvml`` stand-in (NVML_STANDIN) into ``folder`` and return the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pynvml.py").write_text(NVML_STANDIN.lstrip(), encoding="utf-8")
    return folder


def provide_nvml(workdir: Path, env: dict[str, str]) -> str | None:
    """Where ``pynvml`` is missing, put the stand-in last on ``env``'s PYTHONPATH and return a report note."""
    if importlib.util.find_spec("pynvml") is not None:
        return None
    folder = write_nvml_standin(workdir / "nvml-standin")
    env["PYTHONPATH"] = os.pathsep.join([*filter(None, [env.get("PYTHONPATH", "")]), str(folder)])
    return ("NOTE pynvml (nvidia-ml-py) is missing, so the cuda backend would probe unavailable: its NVML calls go "
            "through gpu_check's ctypes stand-in on the driver's libnvidia-ml.so.1 instead (pip install "
            "nvidia-ml-py for a faithful run)")


def dependency_notes() -> list[str]:
    """Return one line per missing dependency, and one line listing the optional modules found or not."""
    notes = []
    for module, (requirement, needed_by) in DEPENDENCIES.items():
        try:
            missing = importlib.util.find_spec(module) is None
        except (ImportError, ValueError):
            missing = True
        if missing:
            notes.append(f"MISSING {module}: pip install '{requirement}' (needed by {needed_by})")
    optional = []
    for module, purpose in OPTIONAL.items():
        try:
            present = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            present = False
        optional.append(f"{module} {'present' if present else 'absent'} ({purpose})")
    notes.append("optional: " + ", ".join(optional))
    return notes


def run_check_process(check: Check, ctx: Context, timeout_s: float, details: Path) -> list[Row]:
    """Run ``check`` in a subprocess with ``timeout_s``; return its rows (a FAIL row on crash or timeout)."""
    result = ctx.workdir / f"result-{check.name}.json"
    log = ctx.workdir / f"log-{check.name}.txt"
    command = [sys.executable, str(SCRIPT), "--run-check", check.name, "--workdir", str(ctx.workdir),
               "--result", str(result), "--expected-device", ctx.expected_device]
    started = time.monotonic()
    timed_out = False
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=REPO, env=ctx.env, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # the check's own session: it and the peers it started
            process.wait()
    elapsed = time.monotonic() - started
    output = log.read_text(errors="replace")
    with details.open("a", encoding="utf-8") as file:
        file.write(f"\n===== {check.name} (exit {process.returncode}, {elapsed:.1f} s) =====\n")
        file.write(output[-40000:])
    last = next((ln for ln in reversed(output.strip().splitlines()) if ln.strip()), "no output")
    if timed_out:
        return [Row("FAIL", check.name, f"timed out after {timeout_s:.0f} s; last output: {one_line(last, 200)}",
                    elapsed)]
    if not result.is_file():
        return [Row("FAIL", check.name, f"crashed (exit {_exit_text(process.returncode)}); last output: "
                    f"{one_line(last, 200)}", elapsed)]
    rows = [Row(**r) for r in json.loads(result.read_text())]
    for row in rows:
        if row.seconds is None:
            row.seconds = elapsed if len(rows) == 1 else None
    return rows


def selected_checks(only: str | None) -> list[Check]:
    """Return the checks named in ``only`` (comma-separated), all when None; exits 64 on an unknown name."""
    if not only:
        return list(CHECKS)
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in {c.name for c in CHECKS}]
    if unknown:
        print(f"gpu_check: unknown check(s) {', '.join(unknown)}; known: {', '.join(c.name for c in CHECKS)}",
              file=sys.stderr)
        sys.exit(64)
    return [c for c in CHECKS if c.name in names]


def dry_run(checks: Sequence[Check]) -> int:
    """Print the checks that would run; imports nothing heavy, installs nothing."""
    print("gpu_check: would run these checks (dry run: nothing imported, installed or started):")
    for number, check in enumerate(checks, 1):
        needs = ", ".join(check.needs)
        print(f"  {number}. {check.name}: {check.summary} (limit {check.timeout_s:.0f} s; needs {needs})")
    print(f"report: {output_dir() / REPORT_NAME}")
    return 0


def orchestrate(args: argparse.Namespace) -> int:
    """Probe, prepare the install, run each check in its own process, print and save the report."""
    checks = selected_checks(args.only)
    if args.dry_run:
        return dry_run(checks)
    env = dict(os.environ)
    for name in ("TRINITY_DEVICE", "TRINITY_DEVICE_RESOLVED"):
        env.pop(name, None)  # the checks prove the automatic choice
    env.setdefault("RAY_AUTH_MODE", "disabled")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    probe = probe_torch(env)
    report = Report(header_line(probe, args.allow_cpu))
    if not probe.get("ok") and not args.allow_cpu:
        message = f"gpu_check: no CUDA device: {no_cuda_reason(probe)}"
        print(message, file=sys.stderr)
        report.notes.append(message)
        report.save()
        return EXIT_NO_CUDA
    if args.preflight:
        if probe.get("ok"):
            names = ", ".join(probe.get("names") or [])
            print(f"gpu_check: CUDA ok: {names}; torch {probe.get('torch')}, CUDA {probe.get('cuda')}")
        else:
            print(f"gpu_check: no CUDA device ({no_cuda_reason(probe)}); going on for --allow-cpu")
        return 0

    expected = "cuda" if probe.get("ok") else "cpu"
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="trinity-gpu-check-"))
    workdir.mkdir(parents=True, exist_ok=True)
    details = output_dir() / DETAILS_NAME
    details.parent.mkdir(parents=True, exist_ok=True)
    details.write_text(f"{report.header}\nwork folder: {workdir}\n", encoding="utf-8")
    print(report.header, flush=True)
    report.notes.extend(dependency_notes())
    for note in report.notes:
        print(note, flush=True)
    install = prepare_install(workdir, env)
    report.add(install)
    pip_log = os.environ.get("GPU_CHECK_INSTALL_LOG", "")
    if pip_log and os.environ.get("GPU_CHECK_INSTALL") == "failed":
        with contextlib.suppress(OSError), details.open("a", encoding="utf-8") as file:
            file.write(f"\n===== pip install -e (failed) =====\n{Path(pip_log).read_text(errors='replace')[-8000:]}")
    nvml_note = provide_nvml(workdir, env) if expected == "cuda" else None
    if nvml_note:
        report.notes.append(nvml_note)
        print(nvml_note, flush=True)
    ctx = Context(workdir=workdir, expected_device=expected, env=env)
    started = time.monotonic()
    try:
        for check in checks:
            left = args.budget_s - (time.monotonic() - started)
            missing = [m for m in check.needs if importlib.util.find_spec(m) is None]
            if install.status == "FAIL":
                report.add(Row("FAIL", check.name, "not run: trinity is not importable (see install)"))
            elif missing:
                report.add(Row("FAIL", check.name, "; ".join(missing_dependency(m) for m in missing)))
            elif left < 15:
                report.add(Row("FAIL", check.name, f"not run: the time budget of {args.budget_s:.0f} s was spent"))
            else:
                print(f"... {check.name} (limit {min(check.timeout_s, left):.0f} s)", flush=True)
                for row in run_check_process(check, ctx, min(check.timeout_s, left), details):
                    report.add(row)
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    failed = [r.name for r in report.rows if r.status == "FAIL"]
    summary = (f"{sum(r.status == 'PASS' for r in report.rows)} PASS, {len(failed)} FAIL, "
               f"{sum(r.status == 'SKIP' for r in report.rows)} SKIP in {time.monotonic() - started:.0f} s")
    report.footer.append(summary)
    report.save()
    print("\n" + report.text(), end="", flush=True)
    print(f"(report: {report.path}; details: {details})")
    return 1 if failed else 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="list the checks; import nothing heavy")
    parser.add_argument("--preflight", action="store_true", help="only check for a CUDA torch and a GPU (exit 0/2)")
    parser.add_argument("--only", help="comma-separated check names")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S, help="stop starting checks after this")
    parser.add_argument("--workdir", help="work folder (kept); default: a temporary one, removed at the end")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work folder")
    parser.add_argument("--allow-cpu", action="store_true", help="development: run on the CPU backend if no GPU")
    # internal: one check in a subprocess, or one weight-sync peer
    parser.add_argument("--run-check", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--expected-device", default="cuda", help=argparse.SUPPRESS)
    parser.add_argument("--sync-peer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--backend", default="gloo", help=argparse.SUPPRESS)
    parser.add_argument("--device-index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--mib", type=int, default=SYNC_MIB, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: the orchestrator, or one of its subprocesses."""
    args = parse_args(argv)
    if args.sync_peer:
        return sync_peer(args)
    if args.run_check:
        return run_one_check(args)
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
