"""The vLLM test double (``tests/doubles/vllm_site``) behaves as vLLM's documented V1 API says.

These tests check the double itself, often against independent
computations with the Hugging Face model: validation errors, output shapes,
stopping rules, seeding, log-prob modes, ``collective_rpc`` and worker
extensions, weight loading, shutdown.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import importlib.util
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

SITE = Path(__file__).resolve().parents[1] / "doubles" / "vllm_site"
PROMPT = [5, 6, 7]
MAX_MODEL_LEN = 256


# ---------------------------------------------------------------- worker extensions (resolved by qualified name)

_RENDEZVOUS: dict[str, threading.Barrier] = {}


class ExtensionForTests:
    """Methods the tests call on every worker through ``collective_rpc``."""

    def describe(self) -> dict[str, Any]:
        """What the worker looks like from inside an extension method."""
        return {
            "is_extension": isinstance(self, ExtensionForTests),
            "class": type(self).__name__,
            "rank": self.rank,  # type: ignore[attr-defined]
            "local_rank": self.local_rank,  # type: ignore[attr-defined]
            "device": str(self.device),  # type: ignore[attr-defined]
            "has_load_weights": callable(getattr(self.model_runner.model, "load_weights", None)),  # type: ignore[attr-defined]
        }

    def rendezvous(self, timeout: float) -> int:
        """Wait for every rank at a barrier (deadlocks, then breaks, if the ranks run one after another)."""
        _RENDEZVOUS["barrier"].wait(timeout)
        return int(self.rank)  # type: ignore[attr-defined]

    def load_named(self, named: dict[str, torch.Tensor], only_rank: int | None = None) -> list[str]:
        """Load ``named`` through ``model_runner.model.load_weights`` (on ``only_rank`` alone when given)."""
        if only_rank is not None and only_rank != self.rank:  # type: ignore[attr-defined]
            return []
        return sorted(self.model_runner.model.load_weights(named.items()))  # type: ignore[attr-defined]

    def add_one_in_place(self, tensor: torch.Tensor) -> torch.Tensor:
        """Change the received tensor in place and send it back."""
        return tensor.add_(1)

    def nap(self, seconds: float) -> int:
        """Sleep, then return the rank."""
        time.sleep(seconds)
        return int(self.rank)  # type: ignore[attr-defined]

    def unsendable_result(self) -> object:
        """Return something that cannot cross a process boundary without pickle."""
        return object()


class ConflictingExtension:
    """Redefines a method the worker already has: vLLM refuses such an extension."""

    def load_model(self) -> None:
        """Shadow the worker's own ``load_model``."""


@dataclasses.dataclass
class PlainRecord:
    """A dataclass instance: not plain data for ``collective_rpc``."""

    value: int = 1


EXTENSION = f"{__name__}.ExtensionForTests"


# ---------------------------------------------------------------- fixtures


def _forget_vllm() -> None:
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]


@pytest.fixture(scope="module")
def api() -> Iterator[SimpleNamespace]:
    """The double's API, importable only while this module's tests run."""
    sys.path.insert(0, str(SITE))
    _forget_vllm()
    try:
        vllm = importlib.import_module("vllm")
        yield SimpleNamespace(
            vllm=vllm,
            AsyncEngineArgs=vllm.AsyncEngineArgs,
            EngineArgs=importlib.import_module("vllm.engine.arg_utils").EngineArgs,
            SamplingParams=vllm.SamplingParams,
            RequestOutputKind=importlib.import_module("vllm.sampling_params").RequestOutputKind,
            AsyncLLM=importlib.import_module("vllm.v1.engine.async_llm").AsyncLLM,
            EngineDeadError=importlib.import_module("vllm.v1.engine.exceptions").EngineDeadError,
        )
    finally:
        sys.path.remove(str(SITE))
        _forget_vllm()
        importlib.invalidate_caches()
    assert importlib.util.find_spec("vllm") is None, "the double must be off the import path again"


@pytest.fixture(scope="module")
def make_engine(api: SimpleNamespace, tiny_model: Path) -> Iterator[Callable[..., Any]]:
    """Build engines on the tiny model; all are shut down at the end of the module."""
    engines: list[Any] = []

    def make(**kwargs: Any) -> Any:
        kwargs.setdefault("max_model_len", MAX_MODEL_LEN)
        engine = api.AsyncLLM.from_engine_args(api.AsyncEngineArgs(model=str(tiny_model), **kwargs))
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.shutdown()


@pytest.fixture(scope="module")
def engine(make_engine: Callable[..., Any]) -> Any:
    """A two-rank engine with the test extension; its weights never change."""
    return make_engine(tensor_parallel_size=2, worker_extension_cls=EXTENSION)


@pytest.fixture(scope="module")
def processed_engine(make_engine: Callable[..., Any]) -> Any:
    """A one-rank engine reporting processed log-probs."""
    return make_engine(logprobs_mode="processed_logprobs")


@pytest.fixture(scope="module")
def hf(tiny_model: Path) -> SimpleNamespace:
    """The tiny model and tokenizer loaded independently with transformers."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32).eval()
    return SimpleNamespace(model=model, tokenizer=AutoTokenizer.from_pretrained(str(tiny_model)))


def collect(engine: Any, prompt: Any, params: Any, request_id: str = "req") -> list[Any]:
    """Every ``RequestOutput`` one request yields."""

    async def run() -> list[Any]:
        return [out async for out in engine.generate(prompt, params, request_id)]

    return asyncio.run(run())


def final(engine: Any, prompt: Any, params: Any, request_id: str = "req") -> Any:
    """The last ``RequestOutput`` of one request."""
    return collect(engine, prompt, params, request_id)[-1]


def rpc(engine: Any, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> list[Any]:
    """``collective_rpc`` from synchronous code."""
    return asyncio.run(engine.collective_rpc(method, timeout=timeout, args=args, kwargs=kwargs))


def hf_logits(hf: SimpleNamespace, prompt: list[int], generated: list[int]) -> torch.Tensor:
    """The logits that predicted each generated token (one full forward, no cache)."""
    with torch.no_grad():
        ids = torch.tensor([prompt + generated[:-1]])
        logits = hf.model(input_ids=ids).logits[0].float()
    return logits[len(prompt) - 1 :]


# ---------------------------------------------------------------- arguments


def test_package_identity(api: SimpleNamespace) -> None:
    assert api.vllm.__version__ == "0.11.0+trinity.double"
    assert api.vllm.IS_TRINITY_DOUBLE is True
    assert issubclass(api.AsyncEngineArgs, api.EngineArgs)
    assert [k.value for k in api.RequestOutputKind] == [0, 1, 2]
    assert importlib.import_module("vllm.inputs").TokensPrompt(prompt_token_ids=[1]) == {"prompt_token_ids": [1]}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n": 0},
        {"temperature": -0.5},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"top_k": 0},
        {"top_k": -2},
        {"max_tokens": 0},
        {"logprobs": -1},
        {"stop": [""]},
        {"stop": ["x"], "detokenize": False},
        {"temperature": 0.0, "n": 2},
    ],
)
def test_sampling_params_refuse_bad_values(api: SimpleNamespace, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        api.SamplingParams(**kwargs)


def test_sampling_params_normalise(api: SimpleNamespace) -> None:
    params = api.SamplingParams(stop="END", temperature=0.0, top_k=5, top_p=0.5)
    assert params.stop == ["END"]
    assert (params.top_k, params.top_p) == (-1, 1.0)  # greedy: filters off
    assert api.SamplingParams().output_kind == api.RequestOutputKind.CUMULATIVE
    with pytest.raises(TypeError):
        api.SamplingParams(best_of_everything=3)
    with pytest.raises(TypeError):
        api.AsyncEngineArgs(model="m", no_such_field=1)


def _ray_stub(monkeypatch: pytest.MonkeyPatch, initialized: bool, bundles: list[dict[str, float]] | None) -> None:
    import ray
    import ray.util

    group = None if bundles is None else SimpleNamespace(bundle_specs=bundles)
    monkeypatch.setattr(ray, "is_initialized", lambda: initialized)
    monkeypatch.setattr(ray.util, "get_current_placement_group", lambda: group)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"dtype": "int8"}, ValueError, "dtype"),
        ({"tensor_parallel_size": 0}, ValueError, "tensor_parallel_size"),
        ({"tensor_parallel_size": 3}, ValueError, "divisible"),
        ({"gpu_memory_utilization": 0.0}, ValueError, "gpu_memory_utilization"),
        ({"gpu_memory_utilization": 1.5}, ValueError, "gpu_memory_utilization"),
        ({"distributed_executor_backend": "slurm"}, ValueError, "executor backend"),
        ({"distributed_executor_backend": "uni", "tensor_parallel_size": 2}, ValueError, "uni"),
        ({"logprobs_mode": "probs"}, ValueError, "logprobs_mode"),
        ({"max_model_len": 4096}, ValueError, "max_model_len"),
        ({"worker_extension_cls": "NoDots"}, ValueError, "fully qualified"),
        ({"worker_extension_cls": "no_such_package_xyz.Ext"}, ImportError, "no_such_package_xyz"),
        ({"worker_extension_cls": f"{__name__}.Missing"}, ImportError, "Missing"),
        ({"worker_extension_cls": f"{__name__}.ConflictingExtension"}, ValueError, "load_model"),
    ],
)
def test_from_engine_args_refuses_bad_arguments(
    api: SimpleNamespace, tiny_model: Path, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        api.AsyncLLM.from_engine_args(api.AsyncEngineArgs(model=str(tiny_model), **kwargs))


def test_model_folder_needs_config_json(api: SimpleNamespace, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"config\.json") as caught:
        api.AsyncLLM.from_engine_args(api.AsyncEngineArgs(model=str(tmp_path)))
    assert str(tmp_path) in str(caught.value)


def test_ray_backend_needs_ray_and_enough_bundles(
    api: SimpleNamespace, make_engine: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _ray_stub(monkeypatch, initialized=False, bundles=None)
    with pytest.raises(RuntimeError, match=r"ray\.init"):
        make_engine(distributed_executor_backend="ray")
    _ray_stub(monkeypatch, initialized=True, bundles=[{"CPU": 1.0}])
    with pytest.raises(ValueError, match="bundles"):
        make_engine(distributed_executor_backend="ray", tensor_parallel_size=2)
    _ray_stub(monkeypatch, initialized=True, bundles=[{"CPU": 1.0}, {"CPU": 1.0}])
    engine = make_engine(distributed_executor_backend="ray", tensor_parallel_size=2)
    assert engine.executor_backend == "ray"
    assert engine.placement_group_bundles == [{"CPU": 1.0}, {"CPU": 1.0}]


def test_default_executor_backend(engine: Any, processed_engine: Any) -> None:
    assert (engine.executor_backend, processed_engine.executor_backend) == ("mp", "uni")
    assert engine.placement_group_bundles is None
    assert engine.engine_args.tensor_parallel_size == 2


# ---------------------------------------------------------------- generation


def test_final_only_yields_one_finished_output_with_n_completions(api: SimpleNamespace, engine: Any) -> None:
    params = api.SamplingParams(n=3, max_tokens=5, seed=0, output_kind=api.RequestOutputKind.FINAL_ONLY)
    outputs = collect(engine, {"prompt_token_ids": PROMPT}, params, "final-only")
    assert len(outputs) == 1
    out = outputs[0]
    assert (out.finished, out.request_id, out.prompt, out.prompt_token_ids) == (True, "final-only", None, PROMPT)
    assert [c.index for c in out.outputs] == [0, 1, 2]
    for completion in out.outputs:
        assert 1 <= len(completion.token_ids) <= 5
        assert all(isinstance(t, int) for t in completion.token_ids)
        assert completion.finished()
        assert (completion.logprobs, completion.cumulative_logprob) == (None, None)
    cumulative = collect(engine, {"prompt_token_ids": PROMPT}, api.SamplingParams(max_tokens=3), "cumulative")
    assert cumulative[-1].finished and all(not o.finished for o in cumulative[:-1])


def test_text_prompt_is_tokenized_with_special_tokens(api: SimpleNamespace, engine: Any, hf: SimpleNamespace) -> None:
    out = final(engine, "What is 3 plus 4?", api.SamplingParams(max_tokens=2, seed=1))
    assert out.prompt == "What is 3 plus 4?"
    assert out.prompt_token_ids == hf.tokenizer("What is 3 plus 4?", add_special_tokens=True).input_ids


def test_eos_ends_with_stop_and_stays_in_token_ids(api: SimpleNamespace, engine: Any, hf: SimpleNamespace) -> None:
    eos = hf.tokenizer.eos_token_id
    for seed in range(40):
        completion = final(engine, {"prompt_token_ids": PROMPT}, api.SamplingParams(max_tokens=32, seed=seed)).outputs[
            0
        ]
        if completion.finish_reason == "stop":
            break
    else:
        pytest.fail("no seed in 0..39 reached EOS within 32 tokens")
    assert completion.token_ids[-1] == eos
    assert eos not in completion.token_ids[:-1]
    assert completion.stop_reason is None
    assert completion.text == hf.tokenizer.decode(completion.token_ids[:-1], skip_special_tokens=True)


def test_stop_string_cuts_text_but_keeps_the_token(api: SimpleNamespace, engine: Any, hf: SimpleNamespace) -> None:
    base = final(engine, {"prompt_token_ids": PROMPT}, api.SamplingParams(max_tokens=24, seed=5)).outputs[0]
    assert base.finish_reason == "length"
    stop = next(
        base.text[i : i + 2]
        for i in range(1, len(base.text) - 1)
        if base.text[i : i + 2].isascii()
        and base.text[i : i + 2].isprintable()
        and base.text.find(base.text[i : i + 2]) > 0
    )
    cut = base.text.find(stop)
    for include in (False, True):
        params = api.SamplingParams(max_tokens=24, seed=5, stop=[stop], include_stop_str_in_output=include)
        completion = final(engine, {"prompt_token_ids": PROMPT}, params).outputs[0]
        assert (completion.finish_reason, completion.stop_reason) == ("stop", stop)
        assert completion.token_ids == base.token_ids[: len(completion.token_ids)]
        assert stop in hf.tokenizer.decode(completion.token_ids, skip_special_tokens=True)
        assert stop not in hf.tokenizer.decode(completion.token_ids[:-1], skip_special_tokens=True)
        assert completion.text == base.text[: cut + (len(stop) if include else 0)]


def test_stop_token_ids_report_the_token(api: SimpleNamespace, engine: Any) -> None:
    base = final(engine, {"prompt_token_ids": PROMPT}, api.SamplingParams(max_tokens=8, seed=2)).outputs[0]
    token = base.token_ids[3]
    first = base.token_ids.index(token)
    completion = final(
        engine, {"prompt_token_ids": PROMPT}, api.SamplingParams(max_tokens=8, seed=2, stop_token_ids=[token])
    ).outputs[0]
    assert completion.token_ids == base.token_ids[: first + 1]
    assert (completion.finish_reason, completion.stop_reason) == ("stop", token)


def test_max_tokens_and_max_model_len(api: SimpleNamespace, engine: Any) -> None:
    completion = final(engine, {"prompt_token_ids": PROMPT}, api.SamplingParams(max_tokens=3, seed=0)).outputs[0]
    assert (len(completion.token_ids), completion.finish_reason, completion.stop_reason) == (3, "length", None)
    long_prompt = [5] * (MAX_MODEL_LEN - 2)
    capped = final(engine, {"prompt_token_ids": long_prompt}, api.SamplingParams(max_tokens=10, seed=0)).outputs[0]
    assert (len(capped.token_ids), capped.finish_reason) == (2, "length")
    too_long = [5] * (MAX_MODEL_LEN + 1)
    message = (
        f"The decoder prompt (length {MAX_MODEL_LEN + 1}) is longer than the maximum model length of {MAX_MODEL_LEN}"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        final(engine, {"prompt_token_ids": too_long}, api.SamplingParams())


def test_seeded_requests_reproduce(api: SimpleNamespace, engine: Any) -> None:
    params = api.SamplingParams(n=2, max_tokens=8, seed=11, logprobs=1)
    first = final(engine, {"prompt_token_ids": PROMPT}, params).outputs
    again = final(engine, {"prompt_token_ids": PROMPT}, params).outputs
    assert [c.token_ids for c in first] == [c.token_ids for c in again]
    assert [c.cumulative_logprob for c in first] == [c.cumulative_logprob for c in again]
    assert first[0].token_ids != first[1].token_ids  # each completion sampled on its own
    # vLLM seeds completion i with seed + i.
    shifted = final(engine, {"prompt_token_ids": PROMPT}, api.SamplingParams(max_tokens=8, seed=12)).outputs[0]
    assert shifted.token_ids == first[1].token_ids


def test_greedy_is_deterministic_argmax_with_raw_logprobs(
    api: SimpleNamespace, engine: Any, hf: SimpleNamespace
) -> None:
    params = api.SamplingParams(temperature=0.0, max_tokens=6, logprobs=2)
    one = final(engine, {"prompt_token_ids": PROMPT}, params).outputs[0]
    two = final(engine, {"prompt_token_ids": PROMPT}, params).outputs[0]
    assert one.token_ids == two.token_ids
    logits = hf_logits(hf, PROMPT, one.token_ids)
    assert one.token_ids == logits.argmax(-1).tolist()
    expected = torch.log_softmax(logits, -1)
    for i, token in enumerate(one.token_ids):
        entry = one.logprobs[i]
        assert entry[token].rank == 1
        assert entry[token].logprob == pytest.approx(float(expected[i, token]), abs=1e-4)
        assert len(entry) == 2  # the sampled token is the best: only one alternative besides it
    assert one.cumulative_logprob == pytest.approx(sum(one.logprobs[i][t].logprob for i, t in enumerate(one.token_ids)))


def test_processed_logprobs_are_temperature_scaled(
    api: SimpleNamespace, engine: Any, processed_engine: Any, hf: SimpleNamespace
) -> None:
    params = api.SamplingParams(temperature=0.7, max_tokens=6, seed=4, logprobs=3)
    raw = final(engine, {"prompt_token_ids": PROMPT}, params).outputs[0]
    processed = final(processed_engine, {"prompt_token_ids": PROMPT}, params).outputs[0]
    assert raw.token_ids == processed.token_ids  # same weights, same seed: same draws
    logits = hf_logits(hf, PROMPT, raw.token_ids)
    scaled = torch.log_softmax(logits / 0.7, -1)
    unscaled = torch.log_softmax(logits, -1)
    for i, token in enumerate(raw.token_ids):
        got_processed, got_raw = processed.logprobs[i][token], raw.logprobs[i][token]
        assert got_processed.logprob == pytest.approx(float(scaled[i, token]), abs=1e-4)
        assert got_raw.logprob == pytest.approx(float(unscaled[i, token]), abs=1e-4)
        assert abs(got_processed.logprob - got_raw.logprob) > 1e-3
        assert got_processed.rank == int((scaled[i] >= scaled[i, token]).sum())
        top = torch.topk(scaled[i], 3).indices.tolist()
        assert [processed.logprobs[i][t].rank for t in top] == [1, 2, 3]
        assert set(processed.logprobs[i]) == {token, *top}
    assert processed.cumulative_logprob == pytest.approx(sum(float(scaled[i, t]) for i, t in enumerate(raw.token_ids)))


def test_processed_logprobs_see_the_top_k_filter(api: SimpleNamespace, processed_engine: Any) -> None:
    params = api.SamplingParams(temperature=1.0, top_k=4, max_tokens=4, seed=9, logprobs=6)
    completion = final(processed_engine, {"prompt_token_ids": PROMPT}, params).outputs[0]
    for token, entry in zip(completion.token_ids, completion.logprobs, strict=True):
        assert entry[token].rank <= 4
        by_rank = sorted((lp.rank, lp.logprob) for lp in entry.values())
        assert all(lp > float("-inf") for rank, lp in by_rank if rank <= 4)
        assert all(lp == float("-inf") for rank, lp in by_rank if rank > 4)


def test_concurrent_requests_and_duplicate_ids(api: SimpleNamespace, engine: Any) -> None:
    params = [api.SamplingParams(max_tokens=4, seed=s) for s in range(5)]
    alone = [final(engine, {"prompt_token_ids": PROMPT}, p).outputs[0].token_ids for p in params]

    async def together() -> list[list[int]]:
        async def one(i: int) -> list[int]:
            outs = [o async for o in engine.generate({"prompt_token_ids": PROMPT}, params[i], f"c{i}")]
            return outs[-1].outputs[0].token_ids

        return list(await asyncio.gather(*(one(i) for i in range(5))))

    assert asyncio.run(together()) == alone

    async def duplicate() -> None:
        long = api.SamplingParams(max_tokens=32, seed=0)
        running = asyncio.create_task(collect_async(engine.generate({"prompt_token_ids": PROMPT}, long, "dup")))
        await asyncio.sleep(0)  # let the first request register
        with pytest.raises(ValueError, match="already running"):
            await collect_async(engine.generate({"prompt_token_ids": PROMPT}, long, "dup"))
        await running
        await collect_async(engine.generate({"prompt_token_ids": PROMPT}, long, "dup"))  # finished: reusable

    asyncio.run(duplicate())


async def collect_async(stream: Any) -> list[Any]:
    """Drain an async generator."""
    return [item async for item in stream]


def test_reset_prefix_cache_counts(engine: Any) -> None:
    before = engine.prefix_cache_resets
    assert asyncio.run(engine.reset_prefix_cache()) is True
    assert engine.prefix_cache_resets == before + 1


# ---------------------------------------------------------------- workers and collective_rpc


def test_extension_is_a_base_of_every_worker(engine: Any) -> None:
    described = rpc(engine, "describe")
    assert [d["rank"] for d in described] == [0, 1]
    assert [d["local_rank"] for d in described] == [0, 1]
    assert all(d["is_extension"] and d["has_load_weights"] and d["device"] == "cpu" for d in described)
    assert all(ExtensionForTests in type(w).__mro__ for w in engine.double_workers)
    first, second = (w.model_runner.model for w in engine.double_workers)
    assert first is not second  # each rank holds its own copy
    assert first.model.embed_tokens.weight.data_ptr() != second.model.embed_tokens.weight.data_ptr()


def test_collective_rpc_runs_the_workers_concurrently(engine: Any) -> None:
    _RENDEZVOUS["barrier"] = threading.Barrier(2)
    assert rpc(engine, "rendezvous", 10.0) == [0, 1]


def test_collective_rpc_sends_plain_data_only(engine: Any) -> None:
    for args, kwargs in [((PlainRecord(),), {}), ((), {"named": {"w": PlainRecord()}}), ((), {"named": {1: 2}})]:
        with pytest.raises(TypeError, match="VLLM_ALLOW_INSECURE_SERIALIZATION") as caught:
            asyncio.run(engine.collective_rpc("load_named", args=args, kwargs=kwargs))
        assert "PlainRecord" in str(caught.value) or "dict key" in str(caught.value)
    with pytest.raises(TypeError, match="VLLM_ALLOW_INSECURE_SERIALIZATION"):
        rpc(engine, "unsendable_result")
    with pytest.raises(TypeError):
        asyncio.run(engine.collective_rpc(ExtensionForTests.describe))


def test_collective_rpc_copies_tensors_across_the_boundary(engine: Any) -> None:
    sent = torch.zeros(3)
    results = rpc(engine, "add_one_in_place", sent)
    assert torch.equal(sent, torch.zeros(3))
    assert all(torch.equal(r, torch.ones(3)) for r in results)


def test_worker_errors_reach_the_caller(engine: Any) -> None:
    with pytest.raises(RuntimeError, match=r"no\.such\.weight") as caught:
        rpc(engine, "load_named", {"no.such.weight": torch.zeros(1)})
    assert isinstance(caught.value.__cause__, KeyError)
    with pytest.raises(KeyError):
        engine.double_workers[0].model_runner.model.load_weights([("no.such.weight", torch.zeros(1))])
    with pytest.raises(RuntimeError) as caught:
        rpc(engine, "no_such_method")
    assert isinstance(caught.value.__cause__, AttributeError)


def test_collective_rpc_timeout(engine: Any) -> None:
    with pytest.raises(TimeoutError):
        rpc(engine, "nap", 0.5, timeout=0.05)
    assert rpc(engine, "nap", 0.0, timeout=5.0) == [0, 1]


def test_load_weights_changes_outputs_and_every_rank_must_load(
    api: SimpleNamespace, make_engine: Callable[..., Any]
) -> None:
    engine = make_engine(tensor_parallel_size=2, worker_extension_cls=EXTENSION)
    params = api.SamplingParams(temperature=0.0, max_tokens=6, logprobs=0)
    before = final(engine, {"prompt_token_ids": PROMPT}, params).outputs[0]
    original = engine.double_workers[0].model_runner.model.model.embed_tokens.weight.detach().clone()
    changed = {"model.embed_tokens.weight": torch.randn(original.shape, generator=torch.Generator().manual_seed(0))}

    assert rpc(engine, "load_named", changed, only_rank=0) == [["model.embed_tokens.weight"], []]
    with pytest.raises(RuntimeError, match="tensor-parallel workers hold different weights"):
        final(engine, {"prompt_token_ids": PROMPT}, params)

    assert rpc(engine, "load_named", changed) == [["model.embed_tokens.weight"]] * 2
    after = final(engine, {"prompt_token_ids": PROMPT}, params).outputs[0]
    assert (after.token_ids, after.cumulative_logprob) != (before.token_ids, before.cumulative_logprob)

    # Tied embeddings: lm_head is skipped, as vLLM's loader does; loading the originals restores the outputs.
    assert rpc(engine, "load_named", {"lm_head.weight": original}) == [[], []]
    rpc(engine, "load_named", {"model.embed_tokens.weight": original})
    restored = final(engine, {"prompt_token_ids": PROMPT}, params).outputs[0]
    assert restored.token_ids == before.token_ids
    assert restored.cumulative_logprob == pytest.approx(before.cumulative_logprob, abs=1e-5)


def test_shutdown_is_idempotent_and_final(api: SimpleNamespace, make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    assert not engine.errored
    engine.shutdown()
    engine.shutdown()
    assert engine.errored
    with pytest.raises(api.EngineDeadError):
        final(engine, {"prompt_token_ids": PROMPT}, api.SamplingParams(max_tokens=2))
    with pytest.raises(api.EngineDeadError):
        rpc(engine, "check_health")
    with pytest.raises(api.EngineDeadError):
        asyncio.run(engine.reset_prefix_cache())


# ---------------------------------------------------------------- sleep mode


def test_sleep_mode_must_be_enabled_and_releases_what_vllm_releases(make_engine: Callable[..., Any],
                                                                    api: SimpleNamespace) -> None:
    plain = make_engine()
    with pytest.raises(ValueError, match="Sleep mode is not enabled"):
        asyncio.run(plain.sleep(1))
    napper = make_engine(enable_sleep_mode=True, tensor_parallel_size=2)
    greedy = api.SamplingParams(temperature=0.0, max_tokens=4)
    before = final(napper, {"prompt_token_ids": [5, 6, 7]}, greedy, "before").outputs[0].token_ids
    resets = napper.prefix_cache_resets
    asyncio.run(napper.sleep(1))
    assert asyncio.run(napper.is_sleeping()) and napper.prefix_cache_resets == resets + 1
    with pytest.raises(RuntimeError, match=r"the engine is sleeping \(kv_cache, weights released\)"):
        final(napper, {"prompt_token_ids": [5, 6, 7]}, greedy, "asleep")
    for worker in napper.double_workers:  # the device copy is gone; level 1 keeps one in CPU memory
        assert all(torch.isnan(p).all() for p in worker.get_model().parameters())
    asyncio.run(napper.wake_up(["weights"]))
    assert asyncio.run(napper.is_sleeping()), "the KV cache is still released"
    asyncio.run(napper.wake_up(["kv_cache"]))
    assert not asyncio.run(napper.is_sleeping())
    assert final(napper, {"prompt_token_ids": [5, 6, 7]}, greedy, "after").outputs[0].token_ids == before


def test_level_two_forgets_the_weights_until_they_are_loaded(make_engine: Callable[..., Any],
                                                             api: SimpleNamespace, hf: SimpleNamespace) -> None:
    napper = make_engine(enable_sleep_mode=True)
    asyncio.run(napper.sleep(2))
    model = napper.double_workers[0].get_model()
    state = {n: p.detach().clone() for n, p in hf.model.named_parameters()}
    with pytest.raises(RuntimeError, match=r"wake_up\(tags=\['weights'\]\) first"):
        model.load_weights(state.items())
    asyncio.run(napper.wake_up(["weights"]))
    assert all(torch.isnan(p).all() for p in model.parameters()), "level 2 forgets the values"
    model.load_weights(state.items())
    asyncio.run(napper.wake_up(["kv_cache"]))
    greedy = api.SamplingParams(temperature=0.0, max_tokens=3)
    out = final(napper, {"prompt_token_ids": [5, 6, 7]}, greedy, "reloaded").outputs[0]
    assert len(out.token_ids) == 3 and all(torch.isfinite(p).all() for p in model.parameters())
    with pytest.raises(RuntimeError, match="unknown sleep-mode tag"):  # a worker's error, as collective_rpc reports it
        asyncio.run(napper.wake_up(["everything"]))
