"""Sleep mode (mode colocate) of the ``vllm`` engine, against the double of vLLM only.

vLLM's CPU build has no sleep mode: ``CPUWorker.sleep`` and ``wake_up`` log
"not supported on CPU, ignore it" and keep the weights. The double models what
vLLM does on a GPU (level 1 keeps a host copy of the weights, released memory
must be woken before weights load into it), which is what mode colocate relies
on there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.doubles.vllm_path import vllm_double
from tests.models.test_vllm_engine import perturbed_state
from trinity.common.models.checksum import state_dict_checksum
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import HFEngine


@pytest.fixture(scope="module")
def double() -> Iterator[Path]:
    with vllm_double() as site:
        yield site



def test_a_sleeping_engine_wakes_for_the_next_request_with_its_weights(double: Path, tiny_model: Path) -> None:
    from trinity.common.models.vllm_engine import VLLMEngine

    napper = VLLMEngine(str(tiny_model), dtype="float32", max_prompt_tokens=32, sleep_mode=True)
    try:
        assert napper.engine_args.enable_sleep_mode
        greedy = SamplingParams(temperature=0.0, max_tokens=6)
        before = napper.generate(["Repeat the letter b."], greedy)[0][0]
        napper.sleep()
        assert napper.is_sleeping() and asyncio.run(napper.engine.is_sleeping())
        napper.sleep()  # asleep already: nothing
        again = napper.generate(["Repeat the letter b."], greedy)[0][0]  # level 1 kept the weights
        assert not napper.is_sleeping() and torch.equal(again.response_tokens, before.response_tokens)
    finally:
        napper.shutdown()


def test_a_sleeping_engine_takes_new_weights_then_its_kv_cache(double: Path, tiny_model: Path) -> None:
    from trinity.common.models.vllm_engine import VLLMEngine

    napper = VLLMEngine(str(tiny_model), dtype="float32", max_prompt_tokens=32, sleep_mode=True,
                        track_checksum=True)
    try:
        state = perturbed_state(tiny_model, 0.05)
        napper.sleep()
        napper.load_state_dict(state, version=3)  # vLLM would fault loading into released memory: woken first
        assert not napper.is_sleeping() and napper.model_version() == 3
        assert napper.state_dict_checksum() == state_dict_checksum(state)
        hf = HFEngine(str(tiny_model), torch_threads=1)
        hf.load_state_dict(state, version=3)
        greedy = SamplingParams(temperature=0.0, max_tokens=6)
        ours = napper.generate(["Repeat the letter b."], greedy)[0][0]
        assert torch.equal(ours.response_tokens, hf.generate(["Repeat the letter b."], greedy)[0][0].response_tokens)
    finally:
        napper.shutdown()
