"""Cost of the OpenAI API: chat completions over HTTP vs the engine's direct Ray call, same prompts and batch.

One ``hf`` engine runs as a Ray actor on the tiny model (hidden 64, 2 layers), as
``trinity run`` starts it with ``enable_openai_api: true``. Clients are threads
of this process, as a workflow's runners are:

* **direct**: ``engine.chat.remote([conversation], params)`` through Ray (what
  built-in workflows do);
* **http**: ``openai.OpenAI().chat.completions.create(...)`` against the
  engine's server, recorded under a session, then one Ray call taking that
  session's history (what an agent workflow does for a one-call episode).

Greedy decoding, equal ``max_tokens``: both sides generate the same tokens.
Rounds alternate (direct, http, direct, ...) so load drifts hit both alike.
Reported: median seconds per request at ``--concurrency`` (8) concurrent
requests and the ratio http / direct (goal <= 1.15), and requests/s with
``--clients`` (32) concurrent clients each way.

Run ``.venv/bin/python benchmarks/bench_openai_api.py``; it prints the figures
and writes JSON to ``benchmarks/results/openai_api.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "benchmarks" / "results" / "openai_api.json"
QUESTIONS = [f"Repeat the letter {c}." for c in "abcdefghijklmnopqrstuvwxyzabcdef"]


def _concurrent(calls: list[Callable[[], int]]) -> tuple[float, list[float], int]:
    """Run ``calls`` on threads at once; return wall seconds, each call's seconds and the tokens generated."""
    times = [0.0] * len(calls)
    tokens = [0] * len(calls)
    barrier = threading.Barrier(len(calls) + 1)

    def worker(i: int) -> None:
        barrier.wait()
        start = time.perf_counter()
        tokens[i] = calls[i]()
        times[i] = time.perf_counter() - start

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, times, sum(tokens)


def main() -> None:
    """Measure and print; write the JSON results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="measured rounds per side at --concurrency")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import openai
    import ray

    from trinity.common.models.engine import SamplingParams
    from trinity.common.models.hf_engine import HFEngine
    from trinity.common.models.tiny import build_tiny_model

    workdir = Path(tempfile.mkdtemp(prefix="bench-openai-"))
    model = build_tiny_model(workdir / "tiny-model")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        engine = ray.remote(HFEngine).options(num_cpus=1, max_concurrency=max(args.clients, args.concurrency) + 4)
        engine = engine.remote(str(model), max_batch_size=64, torch_threads=1, openai_api={
            "host": "127.0.0.1", "port": 0, "model_names": [str(model), "rollout"], "max_prompt_tokens": 256,
            "context_length": 2048, "default_max_tokens": args.max_tokens, "history": True,
        })
        url = ray.get(engine.describe.remote())["openai_api"]["url"]
        params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
        clients = [openai.OpenAI(base_url=f"{url}/v1", api_key="EMPTY", max_retries=0,
                                 default_headers={"X-Trinity-Session": f"bench-{i}"}) for i in range(args.clients)]

        def direct(i: int) -> Callable[[], int]:
            conversation = [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]

            def call() -> int:
                completion = ray.get(engine.chat.remote([conversation], params))[0][0]
                return len(completion.response_tokens)

            return call

        def http(i: int) -> Callable[[], int]:
            messages = [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]

            def call() -> int:
                response = clients[i].chat.completions.create(model="rollout", messages=messages, temperature=0,
                                                              max_tokens=args.max_tokens)
                ray.get(engine.drop_history.remote(f"bench-{i}"))  # a workflow takes its history once per episode
                return int(response.usage.completion_tokens)

            return call

        sides = {"direct": direct, "http": http}
        for _ in range(2):  # warm-up
            for make in sides.values():
                _concurrent([make(i) for i in range(args.concurrency)])
        per_request: dict[str, list[float]] = {name: [] for name in sides}
        tokens: dict[str, list[int]] = {name: [] for name in sides}
        for _ in range(args.rounds):
            for name, make in sides.items():
                _wall, times, generated = _concurrent([make(i) for i in range(args.concurrency)])
                per_request[name].append(statistics.mean(times))
                tokens[name].append(generated)
        throughput: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(3):
            for name, make in sides.items():
                wall, _times, _ = _concurrent([make(i) for i in range(args.clients)])
                throughput[name].append(args.clients / wall)
        ray.get(engine.shutdown.remote())
    finally:
        ray.shutdown()
    direct_s = statistics.median(per_request["direct"])
    http_s = statistics.median(per_request["http"])
    result: dict[str, Any] = {
        "concurrency": args.concurrency, "rounds": args.rounds, "max_tokens": args.max_tokens,
        "seconds_per_request": {"direct": direct_s, "http": http_s},
        "ratio_http_over_direct": http_s / direct_s,
        "tokens_per_round": {name: statistics.mean(v) for name, v in tokens.items()},
        "clients": args.clients,
        "requests_per_s": {name: statistics.median(v) for name, v in throughput.items()},
        "load": os.getloadavg()[0],
    }
    print(f"{args.concurrency} concurrent requests, {args.max_tokens} greedy tokens each, {args.rounds} rounds:")
    print(f"  direct Ray call {direct_s * 1000:.1f} ms/request, HTTP {http_s * 1000:.1f} ms/request: "
          f"ratio {result['ratio_http_over_direct']:.3f} (goal <= 1.15)")
    print(f"  tokens per round: direct {result['tokens_per_round']['direct']:.0f}, "
          f"http {result['tokens_per_round']['http']:.0f}")
    print(f"{args.clients} concurrent clients: direct {result['requests_per_s']['direct']:.1f} requests/s, "
          f"HTTP {result['requests_per_s']['http']:.1f} requests/s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
