"""The hf engine with a vision-language model: chat messages with images become prompts the model sees whole.

A tiny Qwen2.5-VL built offline; the oracle is transformers' own generate
on the same prompt ids and images.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from trinity.common.models.client import EngineClient
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import EngineError, HFEngine
from trinity.common.models.model import ModelWrapper


@pytest.fixture(scope="module")
def vlm_engine(tmp_path_factory: pytest.TempPathFactory) -> HFEngine:
    from trinity.common.models.tiny_vlm import build_tiny_vlm

    return HFEngine(str(build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "model")), torch_threads=1,
                    max_prompt_tokens=64)


def _image(seed: int) -> Any:
    from PIL import Image

    return Image.fromarray(np.random.RandomState(seed).randint(0, 256, (56, 84, 3), dtype=np.uint8))


def _messages(image: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "image", "image": image},
                                         {"type": "text", "text": "What is 2 plus 2?"}]}]


def test_a_reply_to_an_image_is_the_models_own_and_carries_the_image_inputs(vlm_engine: HFEngine) -> None:
    params = SamplingParams(max_tokens=6, temperature=0.0, n=2)
    [completions] = vlm_engine.chat([_messages(_image(0))], params)
    assert len(completions) == 2
    first = completions[0]
    assert first.multi_modal_inputs is not None and first.multi_modal_inputs["image_grid_thw"].tolist() == [[1, 4, 6]]
    prompt = first.prompt_tokens.tolist()
    assert prompt.count(vlm_engine.vision.image_token_id) == 6  # the placeholder, once per merged patch
    with torch.no_grad():
        expected = vlm_engine.model.generate(input_ids=torch.tensor([prompt]), **first.multi_modal_inputs,
                                             max_new_tokens=6, do_sample=False)[0, len(prompt):]
    assert first.response_tokens.tolist() == expected[: len(first.response_tokens)].tolist()
    [other] = vlm_engine.chat([_messages(_image(1))], dataclass_n1(params))
    assert not torch.equal(other[0].multi_modal_inputs["pixel_values"], first.multi_modal_inputs["pixel_values"])


def dataclass_n1(params: SamplingParams) -> SamplingParams:
    import dataclasses

    return dataclasses.replace(params, n=1)


def test_experiences_of_image_prompts_keep_their_images(vlm_engine: HFEngine) -> None:
    model = ModelWrapper(EngineClient(vlm_engine).bind(None), SamplingParams(max_tokens=4))
    made = model.chat(_messages(_image(2)), n=2)
    assert all(e.multi_modal_inputs is not None and e.multi_modal_inputs["pixel_values"].shape[0] == 24
               for e in made)
    text_only = model.chat([{"role": "user", "content": "What is 2 plus 2?"}], n=1)
    assert text_only[0].multi_modal_inputs is None  # a vision-language model answers text prompts too


def test_prompts_with_images_are_refused_rather_than_cut(vlm_engine: HFEngine, tiny_model: Path) -> None:
    long = [{"role": "user", "content": [{"type": "image", "image": _image(3)},
                                         {"type": "text", "text": "plus " * 60}]}]
    with pytest.raises(EngineError, match=r"a prompt with images cannot be cut"):
        vlm_engine.chat([long], SamplingParams(max_tokens=2))
    text_engine = HFEngine(str(tiny_model), torch_threads=1)
    with pytest.raises(ValueError, match=r"has images, but this engine's model has no vision tower"):
        text_engine.chat([_messages(_image(0))], SamplingParams(max_tokens=2))


def test_replies_never_hold_the_vision_placeholders(vlm_engine: HFEngine) -> None:
    """A model that favours the image placeholder above all still never samples it (nor the other markers)."""
    image_pad = vlm_engine.vision.image_token_id
    head = vlm_engine.model.get_output_embeddings()

    def favour(_module: Any, _inputs: Any, logits: torch.Tensor) -> torch.Tensor:
        logits = logits.clone()
        logits[..., image_pad] += 1000.0
        return logits

    hook = head.register_forward_hook(favour)
    try:
        [completions] = vlm_engine.chat([_messages(_image(4))], SamplingParams(max_tokens=5, temperature=1.0, n=3))
    finally:
        hook.remove()
    for completion in completions:
        assert not set(completion.response_tokens.tolist()) & set(vlm_engine.vision.special_ids)
        assert torch.isfinite(completion.logprobs).all()
