"""The ``vllm`` engine with a vision-language model: images go to vLLM as ``multi_modal_data``.

vLLM cannot run on this CPU-only machine; the double (``tests/doubles/vllm_site``)
models what vLLM documents for a token prompt with images: one placeholder
per image in the ids, vLLM expanding each to the image's feature count, the
expanded ids in ``RequestOutput.prompt_token_ids``, generation with the images
at Qwen2.5-VL's 3-D rotary positions. The oracle for the engine's answers is
the ``hf`` engine (transformers' own ``generate``) on the same model and
messages, and the transformers model run on the finished experience.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.doubles.vllm_path import vllm_double
from tests.trainer.support import local_ray
from tests.trainer.test_multimodal import rotary_positions
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import HFEngine


@pytest.fixture(scope="module")
def vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trinity.common.models.tiny_vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "model")


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    """A local Ray for the trainer of the last test, stopped after this module (unless it was running already)."""
    yield from local_ray()


@pytest.fixture(scope="module")
def double() -> Iterator[Path]:
    with vllm_double() as site:
        yield site


@pytest.fixture(scope="module")
def engine(double: Path, vlm: Path) -> Iterator[Any]:
    from trinity.common.models.vllm_engine import VLLMEngine

    started = VLLMEngine(str(vlm), dtype="float32", max_prompt_tokens=64)
    yield started
    started.shutdown()


def _image(seed: int, size: tuple[int, int] = (56, 84)) -> Any:
    from PIL import Image

    return Image.fromarray(np.random.RandomState(seed).randint(0, 256, (*size, 3), dtype=np.uint8))


def _messages(image: Any, question: str = "What is 2 plus 2?") -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": question}]}]


def test_vllm_expands_one_placeholder_per_image_in_a_token_prompt(double: Path, vlm: Path, tiny_model: Path) -> None:
    """The double as vLLM documents it: ids with one placeholder per image come back expanded; others fail."""
    import asyncio

    from vllm import AsyncEngineArgs
    from vllm import SamplingParams as VllmParams
    from vllm.inputs import TokensPrompt
    from vllm.v1.engine.async_llm import AsyncLLM

    from trinity.common.models.vision import VisionInputs

    vision = VisionInputs(vlm)
    ids, images = vision.prompt(_messages(_image(0)))
    llm = AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(vlm), dtype="float32"))
    text_llm = AsyncLLM.from_engine_args(AsyncEngineArgs(model=str(tiny_model), dtype="float32"))

    async def final(engine: Any, prompt: Any, request: str) -> Any:
        final = None
        async for output in engine.generate(prompt, VllmParams(max_tokens=2, temperature=0.0), request):
            final = output
        return final

    try:
        out = asyncio.run(final(llm, TokensPrompt(prompt_token_ids=ids, multi_modal_data={"image": images}), "a"))
        expanded, _ = vision.encode(_messages(_image(0)))
        assert out.prompt_token_ids == expanded and len(expanded) == len(ids) + 5  # 6 merged patches
        with pytest.raises(ValueError, match="one placeholder per image"):  # already expanded: not detected
            asyncio.run(final(llm, TokensPrompt(prompt_token_ids=expanded, multi_modal_data={"image": images}), "b"))
        with pytest.raises(ValueError, match="is not a multimodal model"):
            asyncio.run(final(text_llm, TokensPrompt(prompt_token_ids=[1, 2], multi_modal_data={"image": images}),
                              "c"))
    finally:
        llm.shutdown()
        text_llm.shutdown()


def test_a_reply_to_an_image_is_the_hf_engines_and_carries_the_trainers_image_inputs(
    engine: Any, vlm: Path
) -> None:
    hf = HFEngine(str(vlm), torch_threads=1, max_prompt_tokens=64)
    params = SamplingParams(max_tokens=6, temperature=0.0, n=2)
    conversations = [_messages(_image(0)), _messages(_image(1, (84, 56)), "What is 3 plus 1?")]
    got = engine.chat(conversations, params)
    expected = hf.chat(conversations, params)
    for mine, theirs in zip(got, expected, strict=True):
        assert len(mine) == 2
        first, other = mine[0], theirs[0]
        assert first.prompt_tokens.tolist() == other.prompt_tokens.tolist()  # vLLM's expansion = the processor's
        assert first.multi_modal_inputs is not None and other.multi_modal_inputs is not None
        for name in ("pixel_values", "image_grid_thw"):
            torch.testing.assert_close(first.multi_modal_inputs[name], other.multi_modal_inputs[name])
        assert first.response_tokens.tolist() == other.response_tokens.tolist()
    assert not torch.equal(got[0][0].multi_modal_inputs["pixel_values"], got[1][0].multi_modal_inputs["pixel_values"])


def test_sampled_log_probs_are_the_models_at_its_3d_rotary_positions(engine: Any, vlm: Path) -> None:
    """The model on prompt + reply with the images, at Qwen2.5-VL's positions, the vision tokens left out."""
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(vlm, dtype=torch.float32).eval()
    [[completion]] = engine.chat([_messages(_image(2))], SamplingParams(max_tokens=5, temperature=0.7, seed=3))
    images = completion.multi_modal_inputs
    assert images is not None
    tokens = torch.cat([completion.prompt_tokens, completion.response_tokens])
    positions = rotary_positions(tokens.tolist(), model.config.image_token_id, images["image_grid_thw"])
    with torch.no_grad():
        logits = model(input_ids=tokens.unsqueeze(0), position_ids=positions, **images).logits[0].float()
    start = len(completion.prompt_tokens)
    logits[:, engine.vision.special_ids] -= 100.0  # never sampled: vLLM's processed log-probs leave them out
    expected = torch.log_softmax(logits[start - 1 : -1] / 0.7, dim=-1).gather(
        -1, completion.response_tokens.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(completion.logprobs, expected, rtol=1e-4, atol=1e-4)


def test_text_prompts_after_image_prompts_are_unchanged(engine: Any) -> None:
    """The model's rotary offsets of an image request never leak into the next request."""
    params = SamplingParams(max_tokens=6, temperature=0.0)
    text = [[{"role": "user", "content": "What is 2 plus 2?"}]]
    before = engine.chat(text, params)[0][0]
    engine.chat([_messages(_image(4))], params)
    after = engine.chat(text, params)[0][0]
    assert after.response_tokens.tolist() == before.response_tokens.tolist()
    torch.testing.assert_close(after.logprobs, before.logprobs)
    assert before.multi_modal_inputs is None


def test_image_prompts_are_refused_where_they_cannot_be_taken_whole(engine: Any, vlm: Path) -> None:
    from trinity.common.models.vision import VisionInputs
    from trinity.common.models.vllm_engine import VLLMEngineError

    big = _image(5, (224, 224))  # 16 merged patches
    with pytest.raises(VLLMEngineError, match="a prompt with images cannot be cut"):
        engine.chat([_messages(big, "Describe the picture in as much detail as you can, please. " * 3)],
                    SamplingParams(max_tokens=2))
    ids, images = VisionInputs(vlm).encode(_messages(_image(0)))
    with pytest.raises(VLLMEngineError, match="takes images through chat"):
        engine.generate_tokens([ids], dataclasses.replace(SamplingParams(max_tokens=2)), images=[images])


def test_replies_never_hold_the_vision_placeholders(engine: Any) -> None:
    """A reply with an image placeholder would claim an image nobody gave; the engine biases them away."""
    model = engine.engine.double_workers[0].get_model()
    favoured = engine.vision.image_token_id

    def favour(_module: Any, _inputs: Any, output: Any) -> Any:
        output.logits[..., favoured] += 50.0  # the model now prefers the placeholder above all
        return output

    handle = model.hf_model.register_forward_hook(favour)
    try:
        [[completion]] = engine.chat([_messages(_image(6))], SamplingParams(max_tokens=4, temperature=1.0, seed=1))
    finally:
        handle.remove()
    assert favoured not in completion.response_tokens.tolist()
    assert "sampling_logprobs" in completion.info


def test_the_trainer_recomputes_the_engines_log_probs_of_a_workflows_image_experiences(
    ray_local: Any, engine: Any, vlm: Path, tmp_path: Path
) -> None:
    """simple_mm_workflow on the vllm engine, then the trainer on its experiences: the same images, positions and
    log-probs (up to the vision tokens' share the engine leaves out, which the tiny model gives ~1e-2)."""
    from tests.trainer.support import make_trainer_plan
    from tests.workflows.test_simple_mm import _task
    from trinity.common.experience import make_batch
    from trinity.common.models.client import EngineClient
    from trinity.common.models.vision import multimodal_rows
    from trinity.common.workflows import make_workflow
    from trinity.trainer.batching import batch_rows, rows_from_wire, rows_to_wire
    from trinity.trainer.trainer import FSDPTrainer

    engine.max_prompt_tokens = 384  # the workflow's system prompt
    try:
        made = make_workflow("simple_mm_workflow", SamplingParams(max_tokens=6)).run(
            EngineClient(engine).bind(None), _task())
    finally:
        engine.max_prompt_tokens = 64
    assert len(made) == 2 and all(e.multi_modal_inputs is not None for e in made)
    plan = make_trainer_plan(vlm, tmp_path, "grpo", world_size=1, micro_batch_size=2, **{
        "trainer.trainer_config.actor_rollout_ref.model.use_remove_padding": True})
    trainer = FSDPTrainer(plan, world_size=1, in_process=True)
    try:
        rows = batch_rows(make_batch(made, 0))
        rows.update(multimodal_rows([e.multi_modal_inputs for e in made]))
        got = rows_from_wire(trainer.workers[0].prepare(rows_to_wire(rows), ["old_logprobs"], [slice(0, 2)]))
    finally:
        trainer.shutdown()
    for row, experience in enumerate(made):
        start, end = experience.prompt_length - 1, len(experience.tokens) - 1
        assert experience.logprobs is not None
        recomputed = got["old_logprobs"][row, start:end]
        assert float((recomputed - experience.logprobs).abs().max()) < 5e-2
        assert float((recomputed - experience.logprobs).max()) <= 1e-5  # the engine's are the larger (mass left out)
