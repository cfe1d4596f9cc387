"""The ``hf`` engine on the tiny model: shapes, log-probs, sampling settings, combining, weights."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tests.models.tiny_fixtures import record_batches
from trinity.common.models.checksum import state_dict_checksum
from trinity.common.models.engine import InferenceEngine, SamplingParams
from trinity.common.models.hf_engine import EngineError, HFEngine
from trinity.weight_transport.protocol import TensorMeta, WeightSyncGroupInfo

CONV = [{"role": "user", "content": "Repeat the letter a."}]
LONG_CONV = [{"role": "user", "content": "What is 12 plus 30? Please think step by step and give the answer."}]


def recomputed_logprobs(engine: HFEngine, prompt: torch.Tensor, response: torch.Tensor, temperature: float = 1.0):
    """Log-probs of ``response`` after ``prompt`` from one unpadded forward pass."""
    ids = torch.cat([prompt, response])[None]
    with torch.no_grad():
        logits = engine.model(ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, dim=-1).gather(1, response[:, None]).squeeze(1), logits


def test_engine_satisfies_the_contract(shared_engine: HFEngine) -> None:
    assert isinstance(shared_engine, InferenceEngine)
    assert shared_engine.model_version() == 0
    assert shared_engine.describe()["tokenizer_path"] == shared_engine.tokenizer_path


def test_chat_shapes_n_completions_and_finish(shared_engine: HFEngine) -> None:
    params = SamplingParams(temperature=1.0, n=3, max_tokens=12)
    out = shared_engine.chat([CONV, LONG_CONV], params)
    assert [len(per_prompt) for per_prompt in out] == [3, 3]
    eos = shared_engine.tokenizer.eos_token_id
    for conv, per_prompt in zip([CONV, LONG_CONV], out, strict=True):
        expected_prompt = shared_engine.chat_prompt_tokens(conv)
        for c in per_prompt:
            assert c.prompt_tokens.tolist() == expected_prompt
            assert 1 <= len(c.response_tokens) <= 12
            assert c.logprobs.shape == c.response_tokens.shape
            assert bool((c.logprobs <= 0).all())
            assert c.model_version == 0
            assert c.text == shared_engine.tokenizer.decode(c.response_tokens.tolist(), skip_special_tokens=True)
            if c.finish_reason == "length":
                assert len(c.response_tokens) == 12 and eos not in c.response_tokens.tolist()
            else:
                assert c.finish_reason == "stop" and c.response_tokens[-1].item() == eos
                assert eos not in c.response_tokens[:-1].tolist()
    # a prompt of token ids gives the same prompt back
    ids = shared_engine.chat_prompt_tokens(CONV)
    [[c]] = shared_engine.generate_tokens([ids], SamplingParams(max_tokens=3))
    assert c.prompt_tokens.tolist() == ids


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_logprobs_match_a_recomputed_forward_pass(shared_engine: HFEngine, temperature: float) -> None:
    # prompts of different lengths: left padding must not change the log-probs
    out = shared_engine.chat([CONV, LONG_CONV], SamplingParams(temperature=temperature, n=2, max_tokens=16))
    for per_prompt in out:
        for c in per_prompt:
            expected, _ = recomputed_logprobs(shared_engine, c.prompt_tokens, c.response_tokens, temperature)
            torch.testing.assert_close(c.logprobs, expected, atol=2e-4, rtol=1e-4)
            assert "sampling_logprobs" not in c.info


def test_top_k_and_top_p_sample_from_the_filtered_distribution(shared_engine: HFEngine) -> None:
    params = SamplingParams(temperature=1.0, top_k=5, top_p=0.9, n=4, max_tokens=10)
    for c in shared_engine.chat([CONV], params)[0]:
        policy, logits = recomputed_logprobs(shared_engine, c.prompt_tokens, c.response_tokens)
        torch.testing.assert_close(c.logprobs, policy, atol=2e-4, rtol=1e-4)
        top5 = torch.topk(logits, 5, dim=-1).indices
        assert bool((top5 == c.response_tokens[:, None]).any(dim=1).all()), "a token outside the top 5 was sampled"
        sampling = c.info["sampling_logprobs"]
        assert sampling.shape == c.logprobs.shape
        # renormalised over at most 5 tokens: at least as likely as under the full distribution
        assert bool((sampling >= c.logprobs - 1e-5).all())
        assert bool((sampling > c.logprobs + 1e-3).any())


def test_greedy_is_deterministic_and_follows_the_argmax(shared_engine: HFEngine) -> None:
    params = SamplingParams(temperature=0.0, n=2, max_tokens=10)
    first = shared_engine.chat([LONG_CONV], params)[0]
    again = shared_engine.chat([LONG_CONV], params)[0]
    assert first[0].response_tokens.tolist() == first[1].response_tokens.tolist() == again[0].response_tokens.tolist()
    c = first[0]
    policy, logits = recomputed_logprobs(shared_engine, c.prompt_tokens, c.response_tokens)
    assert c.response_tokens.tolist() == logits.argmax(dim=-1).tolist()
    torch.testing.assert_close(c.logprobs, policy, atol=2e-4, rtol=1e-4)


def test_seeded_sampling_is_reproducible(shared_engine: HFEngine) -> None:
    def sample(seed: int) -> list[list[int]]:
        out = shared_engine.chat([CONV], SamplingParams(temperature=1.0, n=3, max_tokens=12, seed=seed))[0]
        return [c.response_tokens.tolist() for c in out]

    assert sample(7) == sample(7)
    assert sample(7) != sample(8)


def test_stop_strings_cut_the_response(shared_engine: HFEngine) -> None:
    seeded = SamplingParams(temperature=1.0, max_tokens=24, seed=11)
    [[free]] = shared_engine.chat([LONG_CONV], seeded)
    text = free.text
    # a two-letter stop string from the middle of the free text
    start = next(i for i in range(1, len(text) - 1) if text[i : i + 2].isascii() and text[i : i + 2].isalpha())
    stop = text[start : start + 2]
    first = text.find(stop)
    [[cut]] = shared_engine.chat([LONG_CONV], SamplingParams(temperature=1.0, max_tokens=24, seed=11, stop=(stop,)))
    assert cut.finish_reason == "stop"
    assert cut.text == text[:first]
    tokens = cut.response_tokens.tolist()
    assert tokens == free.response_tokens.tolist()[: len(tokens)]
    decode = shared_engine.tokenizer.decode
    assert stop in decode(tokens) and stop not in decode(tokens[:-1])
    assert len(cut.logprobs) == len(tokens)
    # a stop string completed by the prompt's end and the first token does not count (transformers' would)
    [[greedy]] = shared_engine.chat([LONG_CONV], SamplingParams(temperature=0.0, max_tokens=6))
    ending = shared_engine.tokenizer.decode(greedy.prompt_tokens.tolist())[-1] + greedy.text[:1]
    [[not_cut]] = shared_engine.chat([LONG_CONV], SamplingParams(temperature=0.0, max_tokens=6, stop=(ending,)))
    assert len(not_cut.response_tokens) >= min(2, len(greedy.response_tokens))


def test_prompts_are_truncated_from_the_left(tiny_model: Path) -> None:
    engine = HFEngine(str(tiny_model), max_prompt_tokens=8, torch_threads=1)
    full = engine.chat_prompt_tokens(LONG_CONV)
    assert len(full) > 8
    [[c]] = engine.chat([LONG_CONV], SamplingParams(max_tokens=4))
    assert c.prompt_tokens.tolist() == full[-8:]
    expected, _ = recomputed_logprobs(engine, c.prompt_tokens, c.response_tokens)
    torch.testing.assert_close(c.logprobs, expected, atol=2e-4, rtol=1e-4)


def test_batches_are_chunked_by_max_batch_size(tiny_model: Path) -> None:
    engine = HFEngine(str(tiny_model), max_batch_size=4, torch_threads=1)
    sizes = record_batches(engine)
    out = engine.chat([CONV, LONG_CONV, CONV], SamplingParams(n=3, max_tokens=3))
    assert sizes == [4, 4, 1]
    assert [len(p) for p in out] == [3, 3, 3]


def test_concurrent_requests_are_combined_into_one_batch(shared_engine: HFEngine) -> None:
    convs = [[{"role": "user", "content": f"Repeat the letter {letter}."}] for letter in "abcd"]
    results: dict[int, list] = {}
    calls = record_batches(shared_engine)
    try:
        with shared_engine._model_lock:  # a batch is "running": the four requests queue up
            threads = [
                threading.Thread(target=lambda i=i: results.__setitem__(
                    i, shared_engine.chat([convs[i]], SamplingParams(n=2, max_tokens=4))))
                for i in range(4)
            ]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 10
            while len(shared_engine._pending) < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(shared_engine._pending) == 4
        for t in threads:
            t.join(timeout=30)
    finally:
        del shared_engine._sample
    assert calls == [8], "the four queued requests were not served as one batch"
    for i in range(4):
        [per_prompt] = results[i]
        assert len(per_prompt) == 2
        assert all(c.prompt_tokens.tolist() == shared_engine.chat_prompt_tokens(convs[i]) for c in per_prompt)


def test_bad_requests_raise(shared_engine: HFEngine) -> None:
    with pytest.raises(EngineError, match="at least 1"):
        shared_engine.chat([CONV], SamplingParams(n=0))
    with pytest.raises(EngineError, match="empty"):
        shared_engine.generate_tokens([[]], SamplingParams())
    assert shared_engine.generate_tokens([], SamplingParams()) == []
    with pytest.raises(EngineError, match="before init_weight_sync"):
        shared_engine.receive_weights([TensorMeta("x", "float32", (1,))], 1, 1024)
    with pytest.raises(EngineError, match="dtype"):
        HFEngine("unused", dtype="float64")


@pytest.fixture
def fresh_engine(tiny_model: Path) -> HFEngine:
    return HFEngine(str(tiny_model), torch_threads=1)


def perturbed(engine: HFEngine, scale: float = 0.05, seed: int = 1) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        name: value + scale * torch.randn(value.shape, generator=gen)
        for name, value in engine.model.state_dict().items()
        if name != "lm_head.weight"  # tied to the embeddings: sent once, as checkpoints do
    }


def test_load_state_dict_changes_weights_outputs_and_version(fresh_engine: HFEngine) -> None:
    greedy = SamplingParams(temperature=0.0, max_tokens=8)
    [[before]] = fresh_engine.chat([LONG_CONV], greedy)
    checksum = fresh_engine.state_dict_checksum()
    new = perturbed(fresh_engine)
    fresh_engine.load_state_dict(new, version=3)
    assert fresh_engine.model_version() == 3
    assert fresh_engine.state_dict_checksum() != checksum
    assert fresh_engine.state_dict_checksum() == state_dict_checksum(fresh_engine.model.state_dict())
    torch.testing.assert_close(fresh_engine.model.state_dict()["model.norm.weight"], new["model.norm.weight"])
    [[after]] = fresh_engine.chat([LONG_CONV], greedy)
    assert after.model_version == 3
    assert not torch.allclose(
        recomputed_logprobs(fresh_engine, before.prompt_tokens, before.response_tokens)[0], before.logprobs
    )
    # names with a wrapper prefix load too; unknown names and wrong shapes are refused, weights untouched
    fresh_engine.load_state_dict({"module.model.norm.weight": torch.ones(64)}, version=4)
    assert bool((fresh_engine.model.model.norm.weight == 1).all())
    checksum = fresh_engine.state_dict_checksum()
    with pytest.raises(EngineError, match="unknown"):
        fresh_engine.load_state_dict({"model.norm.weight": torch.zeros(64), "nope.weight": torch.zeros(1)}, 5)
    with pytest.raises(EngineError, match="shape"):
        fresh_engine.load_state_dict({"model.norm.weight": torch.zeros(3)}, 5)
    assert fresh_engine.state_dict_checksum() == checksum and fresh_engine.model_version() == 4


def test_load_checkpoint_weights_reads_every_safetensors_file(fresh_engine: HFEngine, tmp_path: Path) -> None:
    new = perturbed(fresh_engine, seed=2)
    names = sorted(new)
    half = len(names) // 2
    save_file({n: new[n].contiguous() for n in names[:half]}, str(tmp_path / "model-00001.safetensors"))
    save_file({n: new[n].contiguous() for n in names[half:]}, str(tmp_path / "model-00002.safetensors"))
    (tmp_path / "version").write_text(json.dumps(9))
    before = fresh_engine.state_dict_checksum()
    fresh_engine.load_checkpoint_weights(str(tmp_path), version=9)
    assert fresh_engine.model_version() == 9
    after = fresh_engine.state_dict_checksum()
    assert after != before
    expected = dict(new)
    expected["lm_head.weight"] = new["model.embed_tokens.weight"]
    assert after == state_dict_checksum(expected)
    with pytest.raises(EngineError, match=r"no \*\.safetensors"):
        fresh_engine.load_checkpoint_weights(str(tmp_path / "missing"), version=10)


def test_online_receive_loads_the_broadcast_weights(fresh_engine: HFEngine) -> None:
    from trinity.weight_transport import WeightSyncGroup, find_free_port, state_dict_metas

    info = WeightSyncGroupInfo(
        master_addr="127.0.0.1", master_port=find_free_port("127.0.0.1"), world_size=2, rank_offset=1,
        group_name="test-hf-receive", backend="gloo", timeout_s=30.0,
    )
    new = perturbed(fresh_engine, seed=3)
    storage = {name: p.data_ptr() for name, p in fresh_engine.model.named_parameters()}
    joined: list[BaseException] = []

    def engine_side() -> None:
        try:
            fresh_engine.init_weight_sync(info, first_rank=1)
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            joined.append(exc)

    thread = threading.Thread(target=engine_side)
    thread.start()
    trainer = WeightSyncGroup.create(info)
    thread.join(timeout=30)
    assert not joined
    try:
        metas = state_dict_metas(new)
        bucket = 64 << 10  # several buckets, some tensors split across two
        receiver = threading.Thread(target=fresh_engine.receive_weights, args=(metas, 5, bucket))
        receiver.start()
        trainer.broadcast_state_dict(new, bucket)
        receiver.join(timeout=30)
    finally:
        trainer.close()
    assert fresh_engine.model_version() == 5
    assert {name: p.data_ptr() for name, p in fresh_engine.model.named_parameters()} == storage  # loaded in place
    expected = {**new, "lm_head.weight": new["model.embed_tokens.weight"]}
    assert fresh_engine.state_dict_checksum() == state_dict_checksum(expected)
