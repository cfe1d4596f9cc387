"""LoRA slots: the vLLM double serves a PEFT adapter folder beside the base weights, as vLLM documents it
(``enable_lora``, ``LoRARequest``, ``add_lora``/``remove_lora``/``list_loras``, ``generate(lora_request=...)``),
and the ``vllm`` engine serves the policy's adapter from a slot.

The oracle is PEFT: the merged model (``merge_and_unload``) of the same adapter folder.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.doubles.vllm_path import vllm_double
from trinity.common.models.engine import SamplingParams

PROMPT = [5, 17, 42, 7, 99, 3]


@pytest.fixture(scope="module")
def double() -> Iterator[Path]:
    with vllm_double() as site:
        yield site


@pytest.fixture(scope="module")
def adapter(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A PEFT adapter folder (rank 4, B nonzero) of the tiny model, and PEFT's merged model of it."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.1)
    folder = tmp_path_factory.mktemp("adapter") / "adapter"
    model.save_pretrained(str(folder))
    return folder, model.merge_and_unload().eval()


def _final(llm: Any, prompt: Any, params: Any, request: str, **kwargs: Any) -> Any:
    async def run() -> Any:
        final = None
        async for output in llm.generate(prompt, params, request, **kwargs):
            final = output
        return final

    return asyncio.run(run())


def test_a_lora_request_is_served_as_the_merged_model(double: Path, tiny_model: Path,
                                                      adapter: tuple[Path, Any]) -> None:
    from vllm import AsyncEngineArgs
    from vllm import SamplingParams as VllmParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest
    from vllm.v1.engine.async_llm import AsyncLLM

    folder, merged = adapter
    llm = AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(tiny_model), dtype="float32", enable_lora=True,
                                                    max_lora_rank=8, logprobs_mode="processed_logprobs"))
    params = VllmParams(max_tokens=6, temperature=0.0, logprobs=0)
    try:
        request = LoRARequest("mine", 1, str(folder))
        assert asyncio.run(llm.add_lora(request)) and asyncio.run(llm.list_loras()) == {1}
        served = _final(llm, TokensPrompt(prompt_token_ids=PROMPT), params, "a", lora_request=request).outputs[0]
        plain = _final(llm, TokensPrompt(prompt_token_ids=PROMPT), params, "b").outputs[0]
        assert asyncio.run(llm.remove_lora(1)) and not asyncio.run(llm.remove_lora(1))
        assert asyncio.run(llm.list_loras()) == set()
    finally:
        llm.shutdown()
    with torch.no_grad():
        expected = merged.generate(torch.tensor([PROMPT]), max_new_tokens=6, do_sample=False)[0, len(PROMPT):]
        ids = torch.tensor([PROMPT + list(served.token_ids)])
        logits = merged(input_ids=ids).logits[0, len(PROMPT) - 1 : -1]
    assert list(served.token_ids) == expected.tolist()[: len(served.token_ids)]
    recomputed = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(served.token_ids).unsqueeze(-1))
    got = torch.tensor([step[token].logprob for step, token in zip(served.logprobs, served.token_ids, strict=True)])
    torch.testing.assert_close(got, recomputed.squeeze(-1), rtol=1e-4, atol=1e-4)
    assert plain.logprobs[0][plain.token_ids[0]].logprob != got[0].item()


def test_lora_is_refused_as_vllm_refuses_it(double: Path, tiny_model: Path, adapter: tuple[Path, Any],
                                            tmp_path: Path) -> None:
    from vllm import AsyncEngineArgs
    from vllm import SamplingParams as VllmParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest
    from vllm.v1.engine.async_llm import AsyncLLM

    folder, _ = adapter
    with pytest.raises(ValueError, match="id must be > 0"):
        LoRARequest("mine", 0, str(folder))
    with pytest.raises(ValueError, match=r"max_lora_rank \(12\) must be one of"):
        AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(tiny_model), enable_lora=True, max_lora_rank=12))
    plain = AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(tiny_model), dtype="float32"))
    small = AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(tiny_model), dtype="float32", enable_lora=True,
                                                      max_lora_rank=1))
    try:
        with pytest.raises(ValueError, match="LoRA is not enabled"):
            _final(plain, TokensPrompt(prompt_token_ids=PROMPT), VllmParams(max_tokens=2), "a",
                   lora_request=LoRARequest("mine", 1, str(folder)))
        with pytest.raises(ValueError, match=r"LoRA rank 4 is greater than max_lora_rank 1"):
            asyncio.run(small.add_lora(LoRARequest("mine", 1, str(folder))))
        with pytest.raises(ValueError, match="No adapter found"):
            asyncio.run(small.add_lora(LoRARequest("none", 2, str(tmp_path))))
    finally:
        plain.shutdown()
        small.shutdown()


def test_the_engine_serves_the_policys_adapter_and_whole_weights_replace_it(
    double: Path, tiny_model: Path, adapter: tuple[Path, Any]
) -> None:
    """Started from an adapter folder (``lora_configs[0].path``), the engine serves it; whole weights loaded
    later (a checkpoint published as merged weights) replace it."""
    from trinity.common.models.adapter_files import read_adapter_tensors
    from trinity.common.models.checksum import state_dict_checksum
    from trinity.common.models.vllm_engine import VLLMEngine, lora_slot_rank

    folder, merged = adapter
    greedy = SamplingParams(temperature=0.0, max_tokens=6)
    engine = VLLMEngine(str(tiny_model), dtype="float32", lora={"rank": 4, "path": str(folder)})
    try:
        assert engine.takes_adapters() and engine.engine.engine_args.max_lora_rank == 8
        assert engine.state_dict_checksum() == state_dict_checksum(read_adapter_tensors(folder))
        [[served]] = engine.generate_tokens([PROMPT], greedy)
        engine.load_state_dict(merged.state_dict(), version=3)
        [[whole]] = engine.generate_tokens([PROMPT], greedy)
        assert asyncio.run(engine.engine.list_loras()) == set() and engine.model_version() == 3
    finally:
        engine.shutdown()
    torch.testing.assert_close(whole.logprobs, served.logprobs, rtol=1e-4, atol=1e-4)  # the same policy, once
    assert lora_slot_rank(4) == 8 and lora_slot_rank(32) == 32 and lora_slot_rank(300) == 320
