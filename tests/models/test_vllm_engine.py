"""The ``vllm`` engine, against the real vLLM (vLLM's CPU build, the vLLM lane) and the double of vLLM.

One test body, two vLLMs (``tests/doubles/vllm_under_test.py``): the engine
must use vLLM's API as vLLM itself takes it, and its answers must match the
``hf`` engine's contract: same prompts, same greedy tokens, log-probs
recomputable by the trainer, weights that really change by every sync path
(into vLLM's own worker processes, for the real vLLM), one weight version per
completion. Sleep mode is tested against the double alone
(``test_vllm_sleep.py``): vLLM's CPU build ignores it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.plans import make_plan
from tests.trainer.support import TrainerStub
from trinity.common.constants import SyncMethod
from trinity.common.models.checksum import state_dict_checksum
from trinity.common.models.engine import InferenceEngine, SamplingParams
from trinity.common.models.hf_engine import HFEngine


@pytest.fixture(scope="module")
def engine(vllm_kind: str, vllm_model: Path) -> Iterator[Any]:
    """One tp-1 engine whose weights no test of this module changes."""
    from trinity.common.models.vllm_engine import VLLMEngine

    started = VLLMEngine(str(vllm_model), dtype="float32", max_prompt_tokens=32)
    yield started
    started.shutdown()


@pytest.fixture(scope="module")
def fresh(vllm_kind: str, vllm_model: Path) -> Iterator[Any]:
    """A tp-2 engine the tests load weights into (checksums tracked); each test loads the weights it checks."""
    from trinity.common.models.vllm_engine import VLLMEngine

    started = VLLMEngine(str(vllm_model), dtype="float32", tensor_parallel_size=2, track_checksum=True)
    yield started
    started.shutdown()


def reference_logprobs(model: Any, prompt: torch.Tensor, response: torch.Tensor, temperature: float) -> torch.Tensor:
    """Recompute log_softmax(logits / T) of each response token, as a trainer does."""
    ids = torch.cat([prompt, response]).unsqueeze(0)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    scaled = torch.log_softmax(logits / temperature, dim=-1)
    return scaled.gather(-1, response.unsqueeze(-1)).squeeze(-1)


def perturbed_state(model_path: Path, scale: float) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for parameter in model.parameters():  # tied weights are one parameter: they stay tied, as in a trainer
            parameter.add_(scale * torch.randn(parameter.shape, generator=gen))
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_the_engine_follows_the_contract_and_says_what_it_is(engine: Any, vllm_kind: str) -> None:
    import vllm

    assert isinstance(engine, InferenceEngine)
    facts = engine.describe()
    assert facts["engine"] == "vllm" and facts["vllm"] == vllm.__version__
    assert facts["vllm"].endswith("trinity.double") == (vllm_kind == "double")
    assert facts["tensor_parallel_size"] == 1 and engine.weight_sync_ranks() == 1
    args = engine.engine_args
    assert args.worker_extension_cls == "trinity.common.models.vllm_worker.WeightSyncExtension"
    assert args.logprobs_mode == "processed_logprobs" and args.max_model_len is None


def test_greedy_tokens_match_the_hf_engine(engine: Any, vllm_model_hf: HFEngine) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=8, n=2)
    prompts = ["Repeat the letter b.", "hello"]
    ours = engine.generate(prompts, params)
    theirs = vllm_model_hf.generate(prompts, params)
    assert [len(c) for c in ours] == [2, 2]
    for mine, ref in zip(ours, theirs, strict=True):
        for a, b in zip(mine, ref, strict=True):
            assert torch.equal(a.prompt_tokens, b.prompt_tokens)
            assert torch.equal(a.response_tokens, b.response_tokens)
            assert a.finish_reason == b.finish_reason and a.text == b.text
            assert a.model_version == 0


def test_logprobs_are_what_the_trainer_recomputes(engine: Any, vllm_model_hf: HFEngine) -> None:
    completions = engine.generate(["Repeat the letter a."], SamplingParams(temperature=0.7, max_tokens=10, seed=3))
    completion = completions[0][0]
    assert len(completion.logprobs) == len(completion.response_tokens) > 0
    expected = reference_logprobs(vllm_model_hf.model, completion.prompt_tokens, completion.response_tokens, 0.7)
    torch.testing.assert_close(completion.logprobs, expected, atol=1e-4, rtol=1e-4)
    assert "sampling_logprobs" not in completion.info


def test_filtered_sampling_reports_the_filtered_logprobs(engine: Any) -> None:
    completion = engine.generate(["hello"], SamplingParams(temperature=1.0, top_k=3, max_tokens=6, seed=1))[0][0]
    assert torch.equal(completion.info["sampling_logprobs"], completion.logprobs)
    assert bool((completion.logprobs <= 0).all()) and bool(torch.isfinite(completion.logprobs).all())


def test_seeded_requests_repeat_and_length_is_reported(engine: Any) -> None:
    params = SamplingParams(temperature=1.0, max_tokens=5, seed=11, n=3)
    first = engine.generate(["a b c"], params)[0]
    again = engine.generate(["a b c"], params)[0]
    assert [c.response_tokens.tolist() for c in first] == [c.response_tokens.tolist() for c in again]
    for completion in first:
        if completion.finish_reason == "length":
            assert len(completion.response_tokens) == 5
        else:
            assert completion.finish_reason == "stop"
            assert int(completion.response_tokens[-1]) == engine.tokenizer.eos_token_id


def test_chat_and_token_prompts_use_the_same_template_as_hf(engine: Any, vllm_model_hf: HFEngine) -> None:
    conversation = [{"role": "user", "content": "Repeat the letter c."}]
    assert engine.chat_prompt_tokens(conversation) == vllm_model_hf.chat_prompt_tokens(conversation)
    completion = engine.chat([conversation], SamplingParams(temperature=0.0, max_tokens=4))[0][0]
    assert completion.prompt_tokens.tolist() == vllm_model_hf.chat_prompt_tokens(conversation)


def test_long_prompts_keep_their_last_tokens(engine: Any) -> None:
    prompt = list(range(5, 65))
    completion = engine.generate_tokens([prompt], SamplingParams(temperature=0.0, max_tokens=2))[0][0]
    assert completion.prompt_tokens.tolist() == prompt[-32:]


def test_bad_requests_are_clear_errors(engine: Any) -> None:
    from trinity.common.models.vllm_engine import VLLMEngineError

    with pytest.raises(VLLMEngineError, match="n and max_tokens must be at least 1"):
        engine.generate(["x"], SamplingParams(n=0))
    with pytest.raises(VLLMEngineError, match="prompt 1 is empty"):
        engine.generate_tokens([[3], []], SamplingParams())
    assert engine.generate([], SamplingParams()) == []


def test_loaded_weights_change_the_outputs_like_they_change_the_hf_engine(
    vllm_kind: str, vllm_model: Path, fresh: Any
) -> None:
    """sync_method memory's path: the state dict crosses into vLLM's worker processes and loads there."""
    fresh.load_checkpoint_weights(str(vllm_model), version=0)  # the model folder's weights, whatever ran before
    state = perturbed_state(vllm_model, 0.05)
    greedy = SamplingParams(temperature=0.0, max_tokens=8)
    before = fresh.generate(["Repeat the letter b."], greedy)[0][0]
    resets = getattr(fresh.engine, "prefix_cache_resets", None)  # the double counts them; vLLM keeps no count
    fresh.load_state_dict(state, version=4)
    after = fresh.generate(["Repeat the letter b."], greedy)[0][0]
    hf = HFEngine(str(vllm_model), torch_threads=1)
    hf.load_state_dict(state, version=4)
    expected = hf.generate(["Repeat the letter b."], greedy)[0][0]
    assert after.model_version == 4 and fresh.model_version() == 4
    assert torch.equal(after.response_tokens, expected.response_tokens)
    assert not torch.equal(after.response_tokens, before.response_tokens) or not torch.allclose(
        after.logprobs, before.logprobs
    )
    if resets is not None:
        assert fresh.engine.prefix_cache_resets == resets + 1
    assert fresh.state_dict_checksum() == state_dict_checksum(state)


def test_a_partial_load_changes_those_weights_and_forgets_the_checksum(fresh: Any, vllm_model: Path) -> None:
    from trinity.common.models.vllm_engine import VLLMEngineError

    state = perturbed_state(vllm_model, 0.03)
    fresh.load_state_dict({f"module.{k}": v for k, v in state.items()}, version=1)  # a wrapper prefix is fine
    assert fresh.state_dict_checksum() == state_dict_checksum(state)
    one = {"model.norm.weight": state["model.norm.weight"] * 2}
    fresh.load_state_dict(one, version=2)
    assert fresh.model_version() == 2
    with pytest.raises(VLLMEngineError, match="partial set"):
        fresh.state_dict_checksum()
    with pytest.raises(Exception, match=r"bogus"):  # vLLM's load_weights refuses unknown names
        fresh.load_state_dict({"model.bogus": torch.zeros(1)}, version=3)
    assert fresh.model_version() == 2
    greedy = SamplingParams(temperature=0.0, max_tokens=6)
    hf = HFEngine(str(vllm_model), torch_threads=1)
    hf.load_state_dict(state, version=1)
    hf.load_state_dict(one, version=2)
    expected = hf.generate(["Repeat the letter d."], greedy)[0][0]
    assert torch.equal(fresh.generate(["Repeat the letter d."], greedy)[0][0].response_tokens,
                       expected.response_tokens)  # the engine still serves (a failed load killed no worker)


def test_checkpoint_folders_load_one_weight_set(fresh: Any, vllm_model: Path, tmp_path: Path) -> None:
    from safetensors.torch import save_file

    from trinity.common.models.vllm_engine import VLLMEngineError

    state = perturbed_state(vllm_model, 0.02)
    version_dir = tmp_path / "v7"
    version_dir.mkdir()
    save_file({k: v.contiguous() for k, v in state.items()}, str(version_dir / "model.safetensors"))
    (tmp_path / "current").symlink_to(version_dir)
    fresh.load_checkpoint_weights(str(tmp_path / "current"), 7)
    assert fresh.model_version() == 7 and fresh.state_dict_checksum() == state_dict_checksum(state)
    hf = HFEngine(str(vllm_model), torch_threads=1)
    hf.load_state_dict(state, version=7)
    greedy = SamplingParams(temperature=0.0, max_tokens=6)
    assert torch.equal(fresh.generate(["Repeat the letter e."], greedy)[0][0].response_tokens,
                       hf.generate(["Repeat the letter e."], greedy)[0][0].response_tokens)
    with pytest.raises(VLLMEngineError, match=r"no \*\.safetensors file"):
        fresh.load_checkpoint_weights(str(tmp_path), 8)


def test_online_sync_reaches_every_tensor_parallel_worker(fresh: Any, vllm_model: Path) -> None:
    from transformers import AutoModelForCausalLM

    from trinity.synchronizer.synchronizer import Synchronizer

    model = AutoModelForCausalLM.from_pretrained(str(vllm_model), dtype=torch.float32)
    trainer = TrainerStub(model.state_dict())
    trainer.perturb(0.01)
    sync = Synchronizer(SyncMethod.parse("online", "gloo"), [trainer], [fresh],
                        make_plan({"synchronizer.bucket_size_mb": 1, "synchronizer.sync_timeout": 60}).sync)
    try:
        sync.sync(version=2)
        assert trainer.group.world_size == 3  # trainer rank 0 + both tensor-parallel workers
        assert fresh.model_version() == 2
        assert fresh.state_dict_checksum() == trainer.checksum()
        # the double refuses to generate when tensor-parallel workers hold different weights
        assert fresh.generate(["hi"], SamplingParams(temperature=0.0, max_tokens=3))[0][0].model_version == 2
        trainer.perturb(0.02)
        sync.sync(version=3)
        assert fresh.state_dict_checksum() == trainer.checksum() and fresh.model_version() == 3
        hf = HFEngine(str(vllm_model), torch_threads=1)
        hf.load_state_dict(trainer.state, version=3)
        greedy = SamplingParams(temperature=0.0, max_tokens=6)
        assert torch.equal(fresh.generate(["Repeat the letter f."], greedy)[0][0].response_tokens,
                           hf.generate(["Repeat the letter f."], greedy)[0][0].response_tokens)
    finally:
        sync.close()


def test_a_weight_update_waits_for_running_requests_and_holds_new_ones() -> None:
    from trinity.common.models.vllm_engine import _Gate

    order: list[str] = []

    async def scenario() -> None:
        gate = _Gate()
        await gate.enter_request()
        order.append("request 1 running")

        async def update() -> None:
            order.append("update")

        updating = asyncio.create_task(gate.exclusive(update))
        await asyncio.sleep(0.01)
        assert order == ["request 1 running"]  # the update waits for request 1

        async def second() -> None:
            await gate.enter_request()
            order.append("request 2 running")
            await gate.leave_request()

        waiting = asyncio.create_task(second())
        await asyncio.sleep(0.01)
        await gate.leave_request()
        await asyncio.gather(updating, waiting)

    asyncio.run(scenario())
    assert order == ["request 1 running", "update", "request 2 running"]


def test_concurrent_callers_share_the_engine(engine: Any) -> None:
    results: list[Any] = []
    errors: list[BaseException] = []

    def call(i: int) -> None:
        try:
            results.append(engine.generate([f"Repeat the letter {'abcd'[i]}."], SamplingParams(max_tokens=4, seed=i)))
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and len(results) == 4


def test_the_openai_api_serves_from_the_vllm_engine_and_records_what_it_sampled(
        vllm_kind: str, vllm_model: Path) -> None:
    """The same server as the hf engine's, on vLLM's generate; it goes with the engine, which then refuses work."""
    import openai

    from trinity.common.models.client import EngineClient
    from trinity.common.models.vllm_engine import VLLMEngine, VLLMEngineError

    started = VLLMEngine(str(vllm_model), dtype="float32", max_prompt_tokens=64, openai_api={
        "host": "127.0.0.1", "port": 0, "model_names": [str(vllm_model), "rollout"], "max_prompt_tokens": 64,
        "context_length": 256, "default_max_tokens": 8, "history": True})
    try:
        client = EngineClient(started).bind(None)
        openai_client = client.get_openai_client()
        assert isinstance(openai_client, openai.OpenAI) and openai_client.model_path == str(vllm_model)
        messages = [{"role": "user", "content": "say yes"}]
        response = openai_client.chat.completions.create(model="rollout", messages=messages, n=2, max_tokens=6,
                                                         temperature=1.0, logprobs=True)
        records = client.history()
        assert [r.response_tokens.tolist() for r in records] == [c.model_extra["token_ids"] for c in response.choices]
        assert all(r.prompt_tokens.tolist() == started.chat_prompt_tokens(messages) for r in records)
        assert all(torch.equal(r.logprobs, torch.tensor([e.logprob for e in c.logprobs.content]))
                   for r, c in zip(records, response.choices, strict=True))
    finally:
        started.shutdown()
    with pytest.raises(openai.APIConnectionError):
        openai_client.models.list()  # the server went with the engine
    started.shutdown()  # idempotent
    with pytest.raises(VLLMEngineError, match="shut down"):
        started.generate(["x"], SamplingParams())


def test_without_sleep_mode_sleep_is_nothing(engine: Any) -> None:
    engine.sleep()
    assert not engine.is_sleeping() and not engine.engine_args.enable_sleep_mode
