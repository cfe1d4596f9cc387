"""The ``hf`` engine's decode loop (one prefill per distinct prompt) against transformers' generate, on real models."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from trinity.common.models import decoding
from trinity.common.models.decoding import _growing_cache, decode, unsupported_reason
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import HFEngine
from trinity.common.models.sampling import LogprobRecorder

CONVS = [
    [{"role": "user", "content": "Repeat the letter a."}],
    [{"role": "user", "content": "What is 12 plus 30? Please think step by step and give the answer."}],
    [{"role": "user", "content": "Hi"}],
]


def _rows(engine: HFEngine, n: int) -> list[list[int]]:
    """Prompts of three lengths, each repeated ``n`` times in a row (a GRPO group's layout)."""
    return [engine.chat_prompt_tokens(conv) for conv in CONVS for _ in range(n)]


def _both(engine: HFEngine, prompts: list[list[int]], params: SamplingParams
          ) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None], ...]:
    """Sample ``prompts`` with the decode loop and with generate from the same seed: (tokens, policy, sampling) each."""
    results = []
    for loop in ("decode", "generate"):
        torch.manual_seed(1234)
        recorder = LogprobRecorder(params.temperature, params.top_k, params.top_p)
        if loop == "generate":
            tokens = engine._generate(prompts, params, recorder)
        else:
            tokens = decode(engine.model, prompts, max_tokens=params.max_tokens, greedy=params.temperature <= 0,
                            processor=recorder, eos_ids=sorted(engine._eos_ids), pad_id=engine._pad_id)
        results.append((tokens, *recorder.finish(tokens)))
    return tuple(results)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.0, max_tokens=12),
        SamplingParams(temperature=1.0, max_tokens=16),
        SamplingParams(temperature=0.7, top_k=5, top_p=0.9, max_tokens=16),
    ],
    ids=["greedy", "sampled", "filtered"],
)
def test_decode_draws_what_generate_draws_from_the_same_seed(shared_engine: HFEngine, params: SamplingParams) -> None:
    ours, theirs = _both(shared_engine, _rows(shared_engine, 4), params)
    assert torch.equal(ours[0], theirs[0])
    torch.testing.assert_close(ours[1], theirs[1], atol=2e-5, rtol=1e-5)
    if theirs[2] is None:
        assert ours[2] is None
    else:
        assert ours[2] is not None
        torch.testing.assert_close(ours[2], theirs[2], atol=2e-5, rtol=1e-5)


def test_finished_rows_are_padded_and_the_loop_stops_when_all_are_done(shared_engine: HFEngine) -> None:
    prompts = _rows(shared_engine, 8)
    params = SamplingParams(temperature=1.5, max_tokens=40)
    ours, theirs = _both(shared_engine, prompts, params)
    assert torch.equal(ours[0], theirs[0])
    eos = sorted(shared_engine._eos_ids)
    ended = [row for row in ours[0].tolist() if any(t in eos for t in row)]
    assert ended, "no row reached EOS at temperature 1.5 in 40 tokens"
    for row in ended:
        cut = next(i for i, t in enumerate(row) if t in eos)
        assert all(t == shared_engine._pad_id for t in row[cut + 1 :])


def test_decoding_past_the_caches_first_room_draws_what_generate_draws(
    shared_engine: HFEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decoding, "FIRST_ROOM", 3)  # the cache grows twice within 20 tokens
    ours, theirs = _both(shared_engine, _rows(shared_engine, 2), SamplingParams(temperature=1.0, max_tokens=20))
    assert ours[0].shape[1] > 3 and torch.equal(ours[0], theirs[0])
    torch.testing.assert_close(ours[1], theirs[1], atol=2e-5, rtol=1e-5)


def test_each_distinct_prompt_is_prefilled_once(shared_engine: HFEngine) -> None:
    shapes: list[tuple[int, ...]] = []
    embed = shared_engine.model.get_input_embeddings()
    handle = embed.register_forward_pre_hook(lambda _module, args: shapes.append(tuple(args[0].shape)))
    try:
        out = shared_engine.chat(CONVS, SamplingParams(temperature=1.0, n=5, max_tokens=6))
    finally:
        handle.remove()
    assert [len(per_prompt) for per_prompt in out] == [5, 5, 5]
    width = max(len(shared_engine.chat_prompt_tokens(conv)) for conv in CONVS)
    assert shapes[0] == (3, width), "the prefill should run the 3 distinct prompts, not the 15 rows"
    assert all(shape == (15, 1) for shape in shapes[1:])
    assert 1 <= len(shapes) - 1 <= 5


def test_the_growing_cache_keeps_every_position_past_its_first_room() -> None:
    cache = _growing_cache(2, limit=5)
    steps = [torch.randn(3, 2, 1, 4) for _ in range(5)]
    rooms = []
    for k in steps:
        keys, values = cache.update(k, -k, 0)
        rooms.append(cache.layers[0]._keys.shape[2])
    expected = torch.cat(steps, dim=2)
    assert torch.equal(keys, expected) and torch.equal(values, -expected)
    assert cache.get_seq_length() == 5
    assert rooms == [2, 2, 4, 4, 5]  # doubled, but never past the limit
    cache.layers[0].take_rows(torch.tensor([2, 2, 0, 1]))
    assert torch.equal(cache.layers[0].keys, expected[[2, 2, 0, 1]])


@pytest.fixture(scope="module")
def sliding_model(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model's weights under a config with sliding-window attention layers (another cache layout)."""
    folder = tmp_path_factory.mktemp("sliding") / "model"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(use_sliding_window=True, sliding_window=8, max_window_layers=0)
    config.pop("layer_types", None)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_model_with_another_cache_layout_samples_with_generate(sliding_model: Path) -> None:
    engine = HFEngine(str(sliding_model), torch_threads=1)
    reason = unsupported_reason(engine.model)
    assert reason is not None and "DynamicSlidingWindowLayer" in reason
    out = engine.chat(CONVS[:2], SamplingParams(temperature=1.0, n=2, max_tokens=8))
    assert engine._decode_unsupported() == reason
    for per_prompt in out:
        for c in per_prompt:
            ids = torch.cat([c.prompt_tokens, c.response_tokens])[None]
            with torch.no_grad():
                logits = engine.model(ids).logits[0, len(c.prompt_tokens) - 1 : -1].float()
            expected = torch.log_softmax(logits, -1).gather(1, c.response_tokens[:, None]).squeeze(1)
            torch.testing.assert_close(c.logprobs, expected, atol=2e-4, rtol=1e-4)


def test_the_tiny_model_takes_the_decode_loop(shared_engine: HFEngine) -> None:
    assert unsupported_reason(shared_engine.model) is None
