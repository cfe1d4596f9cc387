"""The ``hf`` engine's sampling: its decode loop against transformers' ``generate``, on bench_vs_trl's models.

Both sides are the same :class:`~trinity.common.models.hf_engine.HFEngine`
(one torch thread) sampling the same rows: a GRPO step's layout, ``prompts``
distinct prompts (the quickstart's task file, chat-formatted) each asked for
``group`` samples, ``max_tokens`` new tokens, temperature 1, the same seed on
both sides. ``decode`` is the engine's own loop (one prefill per distinct
prompt, a preallocated key/value cache); ``generate`` is the engine's
fallback for models the loop cannot run (transformers' ``generate`` on every
row). The two are interleaved call by call; the figure is the median time of
one sampling call and the ratio of the medians. The tokens drawn are checked
to be the same on both sides.

This isolates the engine; ``bench_vs_trl.py`` measures what it does to a
whole ``trinity run``.

Run ``python benchmarks/bench_decode.py``; it prints a table and writes JSON
to ``benchmarks/results/decode.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
DEFAULT_OUT = REPO / "benchmarks" / "results" / "decode.json"
TASKS = REPO / "examples" / "quickstart" / "tasks" / "train.jsonl"


def _bench_vs_trl() -> Any:
    """bench_vs_trl.py, loaded by its path (a ``benchmarks`` package elsewhere on the path may shadow this folder)."""
    import importlib.util

    module = sys.modules.get("bench_vs_trl")
    if module is None:
        spec = importlib.util.spec_from_file_location("bench_vs_trl", REPO / "benchmarks" / "bench_vs_trl.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
        spec.loader.exec_module(module)
    return module


def _prompts(engine: Any, count: int) -> list[list[int]]:
    """The first ``count`` quickstart tasks as chat-formatted prompt ids."""
    rows = [json.loads(line) for line in TASKS.read_text().splitlines() if line.strip()][:count]
    key = next(k for k in ("question", "prompt", "problem") if k in rows[0])
    return [engine.chat_prompt_tokens([{"role": "user", "content": str(r[key])}]) for r in rows]


def bench_model(name: str, workdir: Path, rounds: int) -> dict[str, Any]:
    """Time both loops on one of bench_vs_trl's models; return the figures."""
    import torch

    from trinity.common.models.engine import SamplingParams
    from trinity.common.models.hf_engine import HFEngine
    from trinity.common.models.sampling import LogprobRecorder

    bench_vs_trl = _bench_vs_trl()
    setup = bench_vs_trl.SETUPS[name]
    path, params = bench_vs_trl._build_model(setup, workdir)
    engine = HFEngine(str(path), torch_threads=1, max_batch_size=setup.prompts * setup.group)
    prompts = [p for p in _prompts(engine, setup.prompts) for _ in range(setup.group)]
    sampling = SamplingParams(temperature=1.0, max_tokens=setup.max_new_tokens)
    assert engine._decode_unsupported() is None

    def run(loop: str) -> tuple[float, list[list[int]]]:
        torch.manual_seed(0)
        started = time.perf_counter()
        if loop == "decode":
            out = engine._sample(prompts, sampling)
            tokens = [c.response_tokens.tolist() for c in out]
        else:
            generated = engine._generate(prompts, sampling, LogprobRecorder(1.0))
            tokens = [engine._finish(row, ())[0] for row in generated]
            tokens = [generated[i, :n].tolist() for i, n in enumerate(tokens)]
        return time.perf_counter() - started, tokens

    times: dict[str, list[float]] = {"decode": [], "generate": []}
    same = True
    for _ in range(rounds + 1):  # the first round warms up and is left out
        seconds_d, tokens_d = run("decode")
        seconds_g, tokens_g = run("generate")
        same = same and tokens_d == tokens_g
        times["decode"].append(seconds_d)
        times["generate"].append(seconds_g)
    medians = {loop: statistics.median(values[1:]) for loop, values in times.items()}
    return {
        "params": params,
        "rows": len(prompts),
        "distinct_prompts": setup.prompts,
        "max_tokens": setup.max_new_tokens,
        "prompt_tokens": sorted({len(p) for p in prompts}),
        "median_s": medians,
        "generate_over_decode": medians["generate"] / medians["decode"],
        "same_tokens": same,
        "rounds_s": {loop: values[1:] for loop, values in times.items()},
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table and write the JSON."""
    setups = _bench_vs_trl().SETUPS
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(setups), default=["quickstart", "5m", "40m"])
    parser.add_argument("--rounds", type=int, default=5, help="timed calls per loop and model (default 5)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    results: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_avg_at_start": os.getloadavg(),
                    "when": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
        "models": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench-decode-") as tmp:
        for name in args.models:
            results["models"][name] = bench_model(name, Path(tmp), args.rounds)
    results["machine"]["load_avg_at_end"] = os.getloadavg()
    print("| model | rows (distinct prompts) x new tokens | decode | generate | generate / decode | same tokens |")
    print("|---|---|---|---|---|---|")
    for name, r in results["models"].items():
        print(f"| {name} ({r['params'] / 1e6:.2f}M) | {r['rows']} ({r['distinct_prompts']}) x {r['max_tokens']} "
              f"| {r['median_s']['decode'] * 1000:.0f} ms | {r['median_s']['generate'] * 1000:.0f} ms "
              f"| {r['generate_over_decode']:.2f}x | {r['same_tokens']} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
