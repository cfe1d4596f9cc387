"""Images in the trainer: a tiny Qwen2.5-VL built offline, prompts with images, log-probs on response tokens.

The oracle is the transformers model itself, run on one experience at a
time with its own images: the trainer's log-probs of a padded micro-batch of
rows with different images must equal it.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.trainer.support import make_trainer_plan
from trinity.common.experience import Experience, make_batch
from trinity.common.models.vision import VisionInputs, model_inputs, multimodal_rows
from trinity.trainer.batching import batch_rows, rows_from_wire, rows_to_wire
from trinity.trainer.trainer import FSDPTrainer


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trinity.common.models.tiny_vlm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "model")


def _image(seed: int, size: tuple[int, int]) -> Any:
    from PIL import Image

    pixels = np.random.RandomState(seed).randint(0, 256, (*size, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def _local(parameter: torch.Tensor) -> torch.Tensor:
    local = getattr(parameter, "to_local", None)
    return (local() if callable(local) else parameter).detach()


def _experiences(model: Path, count: int = 4) -> list[Experience]:
    """Rollouts of prompts with one image each (different sizes), random responses, GRPO groups of 2."""
    inputs = VisionInputs(model)
    generator = torch.Generator().manual_seed(0)
    out = []
    for i in range(count):
        messages = [{"role": "user", "content": [{"type": "image", "image": _image(i, (56 + 14 * i, 84))},
                                                 {"type": "text", "text": f"What is {i} plus {i}?"}]}]
        prompt, images = inputs.encode(messages)
        response = torch.randint(3, 390, (3 + i,), generator=generator)
        out.append(Experience(tokens=torch.cat([torch.tensor(prompt), response]), prompt_length=len(prompt),
                              reward=float(i % 2), group_id=f"g{i // 2}", run_id=i % 2, multi_modal_inputs=images))
    return out


def test_the_tiny_model_sees_its_images(tiny_vlm: Path) -> None:
    from transformers import AutoModelForImageTextToText

    inputs = VisionInputs(tiny_vlm)
    messages = [{"role": "user", "content": [{"type": "image", "image": _image(0, (60, 90))},
                                             {"type": "text", "text": "What is 2 plus 2?"}]}]
    ids, images = inputs.encode(messages)
    assert images is not None and images["image_grid_thw"].tolist() == [[1, 4, 6]]  # 56 x 84 after resizing
    assert ids.count(inputs.image_token_id) == 6  # 24 patches, merged 2 x 2
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm, dtype=torch.float32)
    other = inputs.images([_image(1, (60, 90))])
    with torch.no_grad():
        one = model(input_ids=torch.tensor([ids]), **images).logits
        two = model(input_ids=torch.tensor([ids]), **other).logits
    assert not torch.allclose(one, two)  # the logits depend on the pixels
    with pytest.raises(ValueError, match=r"1 image placeholder\(s\) for 2 image\(s\)"):
        inputs.expand(ids[:ids.index(inputs.image_token_id) + 1], torch.tensor([[1, 4, 6], [1, 4, 6]]))


def test_image_inputs_survive_every_way_an_experience_travels(tiny_vlm: Path) -> None:
    experience = _experiences(tiny_vlm, 1)[0]
    assert experience.multi_modal_inputs is not None
    for copy in (pickle.loads(pickle.dumps(experience)), Experience.from_dict(experience.to_dict())):
        assert copy.multi_modal_inputs is not None
        for name, value in experience.multi_modal_inputs.items():
            assert copy.multi_modal_inputs[name].dtype == value.dtype
            torch.testing.assert_close(copy.multi_modal_inputs[name], value)


def test_rows_carry_each_rows_images_and_give_a_micro_batch_its_own() -> None:
    first = {"pixel_values": torch.ones(4, 3), "image_grid_thw": torch.tensor([[1, 2, 2]])}
    second = {"pixel_values": torch.full((8, 3), 2.0), "image_grid_thw": torch.tensor([[1, 2, 2], [1, 2, 2]])}
    rows = multimodal_rows([first, None, second])
    assert rows["mm_pixel_values"].shape == (3, 8, 3) and rows["mm_patches"].tolist() == [4, 0, 8]
    both = model_inputs(rows)
    assert both["pixel_values"].shape == (12, 3) and both["image_grid_thw"].shape == (3, 3)
    only_second = model_inputs({name: value[1:] for name, value in rows.items()})
    torch.testing.assert_close(only_second["pixel_values"], second["pixel_values"])
    assert model_inputs({name: value[1:2] for name, value in rows.items()}) == {}  # a text-only row


def test_the_trainers_log_probs_of_rows_with_images_equal_the_model_run_alone(
    ray_local: Any, tiny_vlm: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForImageTextToText

    experiences = _experiences(tiny_vlm)
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm, dtype=torch.float32)
    plan = make_trainer_plan(tiny_vlm, tmp_path, "grpo", world_size=1, micro_batch_size=4)
    trainer = FSDPTrainer(plan, world_size=1, in_process=True)
    try:
        rows = batch_rows(make_batch(experiences, 0))
        rows.update(multimodal_rows([e.multi_modal_inputs for e in experiences]))
        got = rows_from_wire(trainer.workers[0].prepare(rows_to_wire(rows), ["old_logprobs"], [slice(0, 4)]))
        for row, experience in enumerate(experiences):
            assert experience.multi_modal_inputs is not None
            with torch.no_grad():
                logits = model(input_ids=experience.tokens.unsqueeze(0), **experience.multi_modal_inputs).logits[0]
            expected = torch.log_softmax(logits[:-1].float(), dim=-1).gather(
                -1, experience.tokens[1:].unsqueeze(-1)).squeeze(-1)
            start, end = experience.prompt_length - 1, len(experience.tokens) - 1
            torch.testing.assert_close(got["old_logprobs"][row, start:end], expected[start:end], rtol=1e-4,
                                       atol=1e-5)
        visual = {n: _local(p).clone() for n, p in trainer.workers[0].actor.named_parameters() if "visual" in n}
        metrics = trainer.train_step(experiences)
        assert np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
        moved = [n for n, p in trainer.workers[0].actor.named_parameters()
                 if "visual" in n and not torch.equal(_local(p), visual[n])]
        assert moved  # the images were in the forward: the vision tower trained too
    finally:
        trainer.shutdown()


def test_image_task_sets_need_a_model_engine_and_trainer_that_take_images(tiny_vlm: Path, tmp_path: Path) -> None:
    from tests.plans import make_plan
    from trinity.common.config.loader import ConfigError
    from trinity.common.models.tiny import build_tiny_model

    taskset = {"path": "examples/data/vlm", "format": {"prompt_key": "problem", "response_key": "answer",
                                                       "image_key": "images"}}
    base = {"mode": "both", "model.model_path": str(tiny_vlm), "buffer.explorer_input.taskset": taskset}
    assert make_plan(base).buffer.train_taskset.format.image_key == "images"
    text_model = build_tiny_model(tmp_path / "text")
    with pytest.raises(ConfigError, match=r"format.image_key gives the tasks images, but .* has no vision tower"):
        make_plan({**base, "model.model_path": str(text_model)})
    with pytest.raises(ConfigError, match=r"the vllm engine does not take images yet"):
        make_plan({**base, "explorer.rollout_model.engine_type": "vllm"})
    with pytest.raises(ConfigError, match=r"rows with images run padded"):
        make_plan({**base, "trainer.trainer_config.actor_rollout_ref.model.use_remove_padding": True})
    with pytest.raises(ConfigError, match=r"videos are not supported yet \(images are"):
        make_plan({**base, "buffer.explorer_input.taskset": {**taskset, "format": {"video_key": "videos"}}})
