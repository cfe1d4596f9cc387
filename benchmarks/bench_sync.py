"""Online weight sync end to end against a raw broadcast of the same bytes, with 1 and 2 trainer ranks.

What is timed is what ``trinity run`` does after a training step with
``sync_method: nccl`` (the selected backend's collective: gloo on the CPU):
:meth:`Synchronizer.sync` between the real FSDP2 trainer ranks (Ray actors)
and one ``hf`` rollout engine (a Ray actor), i.e. the gather of the full
state dict on rank 0, the bucket packing, the broadcast, and the engine
loading the buckets into its parameters, until the engine reports the new
version. The baseline, in the same Ray cluster and interleaved round by
round, is one flat float32 tensor of the same size broadcast between two
fresh actors over the same kind of group (``trinity.synchronizer.benchmark``);
its sender builds the tensor before the clock starts. The raw tensor is a
whole number of MiB; its time is scaled to the sync's exact byte count.

Memory: the resident set (``VmRSS`` from ``/proc``, Linux only) of every
trainer rank and of the engine is sampled every 2 ms while a sync runs;
"added" is the peak minus the value just before the sync, the median over
the timed rounds. The goal is at most one bucket
(``synchronizer.bucket_size_mb``) per process.

The model is the quickstart's architecture scaled up (``--size``: 150m is
~151M parameters, 600 MB in float32; 20m for a quick look; quickstart, the
quickstart's own model, checks that the script runs). The trainer is
set up as a run would, with one torch thread per process; no training step
runs, so the weights synced are the initial ones (the bytes are the same).

Run ``python benchmarks/bench_sync.py --rounds 5``; it prints a table and
writes JSON to ``benchmarks/results/sync.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
QUICKSTART = REPO / "examples" / "quickstart" / "cpu.yaml"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "sync.json"
SIZES = {  # hidden, layers, heads, intermediate
    "quickstart": (64, 2, 4, 128),
    "20m": (512, 6, 8, 1536),
    "150m": (1024, 9, 16, 4096),
}
TARGETS = {1: 1.5, 2: 2.0}  # end to end / raw, by trainer ranks


def rss_bytes(pid: int) -> int:
    """Return the resident set size of process ``pid`` (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class PeakSampler:
    """Samples the RSS of some processes every 2 ms in a thread; reports each one's peak above its start."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.start = {name: rss_bytes(pid) for name, pid in pids.items()}
        self.peak = dict(self.start)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, pid in self.pids.items():
                self.peak[name] = max(self.peak[name], rss_bytes(pid))
            time.sleep(0.002)

    def added(self) -> dict[str, int]:
        """Stop sampling; return each process's peak minus its RSS at the start."""
        self._stop.set()
        self._thread.join()
        for name, pid in self.pids.items():
            self.peak[name] = max(self.peak[name], rss_bytes(pid))
        return {name: self.peak[name] - self.start[name] for name in self.pids}


def build_model(size: str, workdir: Path) -> tuple[Path, int]:
    """Build the scaled tiny model and return its folder and parameter count."""
    from safetensors import safe_open

    from trinity.common.config import TinyModelConfig
    from trinity.common.models.tiny import build_tiny_model

    hidden, layers, heads, intermediate = SIZES[size]
    path = build_tiny_model(
        workdir / f"model-{size}",
        TinyModelConfig(hidden_size=hidden, num_layers=layers, num_heads=heads, intermediate_size=intermediate),
    )
    params = 0
    with safe_open(str(path / "model.safetensors"), "pt") as weights:
        for name in weights.keys():
            count = 1
            for dim in weights.get_slice(name).get_shape():
                count *= int(dim)
            params += count
    return path, params


def make_plan(model: Path, workdir: Path, ranks: int) -> Any:
    """The quickstart's config on ``model`` with ``ranks`` trainer ranks and one engine, resolved to a plan."""
    from trinity.common.config import load_config
    from trinity.planner.run import resolve_run

    raw = yaml.safe_load(QUICKSTART.read_text())
    raw["model"].pop("tiny", None)
    raw["model"]["model_path"] = str(model)
    raw["checkpoint_root_dir"] = str(workdir / "ckpt")
    raw["name"] = f"sync-{ranks}"
    raw["cluster"]["gpu_per_node"] = ranks + 1
    raw["synchronizer"]["verify_checksums"] = False
    file = workdir / f"sync-{ranks}.yaml"
    file.write_text(yaml.safe_dump(raw))
    return resolve_run(load_config(file))


def bench_ranks(model: Path, workdir: Path, ranks: int, rounds: int) -> dict[str, Any]:
    """Time ``rounds`` end-to-end syncs and raw broadcasts, interleaved, with ``ranks`` trainer ranks."""
    import ray

    import trinity.device
    from trinity.common.constants import SyncMethod
    from trinity.common.models.engines import create_engines
    from trinity.synchronizer.benchmark import peer_pair
    from trinity.synchronizer.synchronizer import Synchronizer
    from trinity.trainer.trainer import FSDPTrainer

    plan = make_plan(model, workdir, ranks)
    collective = trinity.device.get_collective_backend()
    ray.init(address="local", num_cpus=ranks + 3, include_dashboard=False, log_to_driver=False)
    try:
        trainer = FSDPTrainer(plan, world_size=ranks, checkpoint_dir=workdir / f"ckpt-{ranks}")
        engines = create_engines(plan, "hf")
        engine_pid = int(ray.get(engines[0].__ray_call__.remote(lambda _self: os.getpid())))
        pids = {f"trainer rank {i}": int(ray.get(w.ping.remote())) for i, w in enumerate(trainer.workers)}
        pids["engine"] = engine_pid
        sync = Synchronizer(SyncMethod.parse("online", collective=collective), trainer, engines, plan.sync)
        first = sync.sync(version=1)  # builds the group; not timed
        raw_mb = -(-first.bytes // (1 << 20))
        sender, receiver, raw_bytes, _ = peer_pair(raw_mb, collective, f"bench-sync-{ranks}")

        def raw_once() -> float:
            sent, got = ray.get([sender.raw.remote(raw_bytes // 4), receiver.raw.remote(raw_bytes // 4)])
            return float(max(sent, got)) * first.bytes / raw_bytes

        raw_once()  # warm-up
        synced, raw, gathers, transfers, added = [], [], [], [], []
        for index in range(rounds):
            raw.append(raw_once())
            sampler = PeakSampler(pids)
            report = sync.sync(version=index + 2)
            added.append(sampler.added())
            synced.append(report.seconds)
            gathers.append(report.gather_seconds)
            transfers.append(report.transfer_seconds)
            assert int(ray.get(engines[0].model_version.remote())) == index + 2
        ray.get([sender.close.remote(), receiver.close.remote()])
        sync.close()
        trainer.shutdown()
        for engine in engines:
            ray.kill(engine)
    finally:
        ray.shutdown()
    ratios = [s / r for s, r in zip(synced, raw, strict=True)]
    bucket_bytes = plan.sync.bucket_size_mb << 20
    added_median = {name: statistics.median(a[name] for a in added) for name in pids}
    return {
        "ranks": ranks,
        "bytes": first.bytes,
        "bucket_bytes": bucket_bytes,
        "sync_s": synced,
        "gather_s": gathers,
        "transfer_s": transfers,
        "raw_s": raw,
        "median_sync_s": statistics.median(synced),
        "median_raw_s": statistics.median(raw),
        "ratio_per_round": ratios,
        "ratio": statistics.median(ratios),
        "target": TARGETS.get(ranks),
        "met": statistics.median(ratios) <= TARGETS.get(ranks, float("inf")),
        "added_rss_bytes": added_median,
        "added_rss_in_buckets": {name: value / bucket_bytes for name, value in added_median.items()},
    }


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and write its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--size", choices=sorted(SIZES), default="150m")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    import trinity.device

    torch.set_num_threads(1)
    trinity.device.select_backend("cpu")
    results: dict[str, Any] = {
        "how": {"size": args.size, "rounds": args.rounds, "threads_per_process": 1},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_avg_at_start": list(os.getloadavg()),
                    "when": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
        "ranks": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench-sync-") as tmp:
        model, params = build_model(args.size, Path(tmp))
        results["params"] = params
        for ranks in args.ranks:
            results["ranks"][str(ranks)] = bench_ranks(model, Path(tmp), ranks, args.rounds)
    results["machine"]["load_avg_at_end"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"model: {params / 1e6:.1f}M params; bytes per sync {next(iter(results['ranks'].values()))['bytes']:,}")
    print("| trainer ranks | sync end to end | raw broadcast, same bytes | ratio (rounds) | target | added RSS per "
          "process (buckets) |")
    print("|---|---|---|---|---|---|")
    for ranks, entry in results["ranks"].items():
        per_round = ", ".join(f"{r:.2f}" for r in entry["ratio_per_round"])
        memory = ", ".join(f"{name} {value / 2**20:.0f} MiB ({entry['added_rss_in_buckets'][name]:.1f})"
                           for name, value in entry["added_rss_bytes"].items())
        print(f"| {ranks} | {entry['median_sync_s']:.3f} s | {entry['median_raw_s']:.3f} s | {entry['ratio']:.2f}x "
              f"({per_round}) | <= {entry['target']}x | {memory} |")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
