"""LoRA slots: vLLM serves a PEFT adapter folder beside the base weights (``enable_lora``, ``LoRARequest``,
``add_lora``/``remove_lora``/``list_loras``, ``generate(lora_request=...)``), and the ``vllm`` engine serves the
policy's adapter from a slot. Against the real vLLM (the vLLM lane) and the double, one test body.

The oracle is PEFT: the merged model (``merge_and_unload``) of the same adapter folder.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch

from trinity.common.models.engine import SamplingParams

PROMPT = [5, 17, 42, 7, 99, 3]


@pytest.fixture(scope="module")
def adapter(vllm_model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A PEFT adapter folder (rank 4, B nonzero) of the tiny model, and PEFT's merged model of it."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(vllm_model, dtype=torch.float32),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.1)
    folder = tmp_path_factory.mktemp("adapter") / "adapter"
    model.save_pretrained(str(folder))
    return folder, model.merge_and_unload().eval()


async def _final(llm: Any, prompt: Any, params: Any, request: str, **kwargs: Any) -> Any:
    final = None
    async for output in llm.generate(prompt, params, request, **kwargs):
        final = output
    return final


def _in_one_loop(scenario: Any) -> Any:
    """Run ``scenario`` (a coroutine that starts its own AsyncLLMs): vLLM's engine stays on the loop it began on."""
    return asyncio.run(scenario)


def test_a_lora_request_is_served_as_the_merged_model(vllm_kind: str, vllm_model: Path,
                                                      adapter: tuple[Path, Any]) -> None:
    from vllm import AsyncEngineArgs
    from vllm import SamplingParams as VllmParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest
    from vllm.v1.engine.async_llm import AsyncLLM

    folder, merged = adapter
    params = VllmParams(max_tokens=6, temperature=0.0, logprobs=0)

    async def scenario() -> tuple[Any, Any]:
        llm = AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(vllm_model), dtype="float32", enable_lora=True,
                                                        max_lora_rank=8, logprobs_mode="processed_logprobs"))
        try:
            request = LoRARequest("mine", 1, str(folder))
            assert await llm.add_lora(request) and list(await llm.list_loras()) == [1]
            served = (await _final(llm, TokensPrompt(prompt_token_ids=PROMPT), params, "a",
                                   lora_request=request)).outputs[0]
            plain = (await _final(llm, TokensPrompt(prompt_token_ids=PROMPT), params, "b")).outputs[0]
            assert await llm.remove_lora(1)
            assert not await llm.list_loras()
            return served, plain
        finally:
            llm.shutdown()

    served, plain = _in_one_loop(scenario())
    with torch.no_grad():
        expected = merged.generate(torch.tensor([PROMPT]), max_new_tokens=6, do_sample=False)[0, len(PROMPT):]
        ids = torch.tensor([PROMPT + list(served.token_ids)])
        logits = merged(input_ids=ids).logits[0, len(PROMPT) - 1 : -1]
    assert list(served.token_ids) == expected.tolist()[: len(served.token_ids)]
    recomputed = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(served.token_ids).unsqueeze(-1))
    got = torch.tensor([step[token].logprob for step, token in zip(served.logprobs, served.token_ids, strict=True)])
    torch.testing.assert_close(got, recomputed.squeeze(-1), rtol=1e-4, atol=1e-4)
    assert plain.logprobs[0][plain.token_ids[0]].logprob != got[0].item()


def test_lora_is_refused_as_vllm_refuses_it(vllm_kind: str, vllm_model: Path, adapter: tuple[Path, Any],
                                            tmp_path: Path) -> None:
    from vllm import AsyncEngineArgs
    from vllm import SamplingParams as VllmParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest
    from vllm.v1.engine.async_llm import AsyncLLM

    folder, _ = adapter
    with pytest.raises(ValueError, match="id must be > 0"):
        LoRARequest("mine", 0, str(folder))
    with pytest.raises(ValueError, match=r"max_lora_rank[\s\S]*\b1, 8, 16\b"):  # vLLM's own values named
        AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(vllm_model), enable_lora=True, max_lora_rank=12))

    async def scenario() -> None:
        plain = AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(vllm_model), dtype="float32"))
        small = AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(vllm_model), dtype="float32", enable_lora=True,
                                                          max_lora_rank=1))
        try:
            with pytest.raises(Exception, match="LoRA is not enabled"):  # vLLM 0.32: VLLMValidationError
                await _final(plain, TokensPrompt(prompt_token_ids=PROMPT), VllmParams(max_tokens=2), "a",
                             lora_request=LoRARequest("mine", 1, str(folder)))
            # the double raises ValueError; vLLM 0.32 a plain Exception from its engine core
            with pytest.raises(Exception, match=r"LoRA rank 4 is greater than max_lora_rank 1"):
                await small.add_lora(LoRARequest("mine", 1, str(folder)))
            with pytest.raises(Exception, match="No adapter found"):
                await small.add_lora(LoRARequest("none", 2, str(tmp_path)))
        finally:
            plain.shutdown()
            small.shutdown()

    _in_one_loop(scenario())


def test_the_engine_serves_the_policys_adapter_and_whole_weights_replace_it(
    vllm_kind: str, vllm_model: Path, adapter: tuple[Path, Any]
) -> None:
    """Started from an adapter folder (``lora_configs[0].path``), the engine serves it; whole weights loaded
    later (a checkpoint published as merged weights) replace it."""
    from trinity.common.models.adapter_files import read_adapter_tensors
    from trinity.common.models.checksum import state_dict_checksum
    from trinity.common.models.vllm_engine import VLLMEngine, lora_slot_rank

    folder, merged = adapter
    greedy = SamplingParams(temperature=0.0, max_tokens=6)
    engine = VLLMEngine(str(vllm_model), dtype="float32", lora={"rank": 4, "path": str(folder)})
    try:
        assert engine.takes_adapters() and engine.engine_args.max_lora_rank == 8
        assert engine.state_dict_checksum() == state_dict_checksum(read_adapter_tensors(folder))
        [[served]] = engine.generate_tokens([PROMPT], greedy)
        engine.load_state_dict(merged.state_dict(), version=3)
        [[whole]] = engine.generate_tokens([PROMPT], greedy)
        assert not engine._run(engine.engine.list_loras()) and engine.model_version() == 3
    finally:
        engine.shutdown()
    torch.testing.assert_close(whole.logprobs, served.logprobs, rtol=1e-4, atol=1e-4)  # the same policy, once
    assert lora_slot_rank(4) == 8 and lora_slot_rank(32) == 32 and lora_slot_rank(300) == 320
