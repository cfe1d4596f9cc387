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


def rotary_positions(ids: list[int], image_token_id: int, grids: torch.Tensor, merge: int = 2) -> torch.Tensor:
    """Qwen2.5-VL's 3-D rotary positions of one prompt, by its published rule (an oracle independent of our code).

    Text tokens count up on all three axes. An image of ``t x h x w`` merged
    patches, starting at position ``p``, gives its patches ``(p + t', p + h',
    p + w')``; the text after it resumes at ``p + max(h, w)``.
    """
    axes: list[tuple[int, int, int]] = []
    images = iter(grids.tolist())
    position = index = 0
    while index < len(ids):
        if ids[index] != image_token_id:
            axes.append((position, position, position))
            position += 1
            index += 1
            continue
        t, h, w = next(images)
        h, w = h // merge, w // merge
        axes += [(position + a, position + b, position + c) for a in range(t) for b in range(h) for c in range(w)]
        index += t * h * w
        position += max(h, w)
    return torch.tensor(axes).T.unsqueeze(1)  # [3, 1, T]


def _oracle_logprobs(model: Any, experience: Experience, mrope: bool = True) -> torch.Tensor:
    assert experience.multi_modal_inputs is not None
    images = experience.multi_modal_inputs
    ids = experience.tokens.unsqueeze(0)
    positions = rotary_positions(experience.tokens.tolist(), model.config.image_token_id, images["image_grid_thw"])
    with torch.no_grad():
        logits = model(input_ids=ids, position_ids=positions if mrope else None, **images).logits[0]
    return torch.log_softmax(logits[:-1].float(), dim=-1).gather(-1, experience.tokens[1:].unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_the_trainers_log_probs_of_rows_with_images_equal_the_model_run_alone(
    ray_local: Any, tiny_vlm: Path, tmp_path: Path, layout: str
) -> None:
    """The model alone, on each experience with its images at Qwen2.5-VL's 3-D rotary positions, is the oracle."""
    from transformers import AutoModelForImageTextToText

    experiences = _experiences(tiny_vlm)
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm, dtype=torch.float32)
    plan = make_trainer_plan(tiny_vlm, tmp_path, "grpo", world_size=1, micro_batch_size=4, **{
        "trainer.trainer_config.actor_rollout_ref.model.use_remove_padding": layout == "packed"})
    trainer = FSDPTrainer(plan, world_size=1, in_process=True)
    try:
        rows = batch_rows(make_batch(experiences, 0))
        rows.update(multimodal_rows([e.multi_modal_inputs for e in experiences]))
        got = rows_from_wire(trainer.workers[0].prepare(rows_to_wire(rows), ["old_logprobs"], [slice(0, 4)]))
        for row, experience in enumerate(experiences):
            expected = _oracle_logprobs(model, experience)
            start, end = experience.prompt_length - 1, len(experience.tokens) - 1
            torch.testing.assert_close(got["old_logprobs"][row, start:end], expected[start:end], rtol=1e-4,
                                       atol=1e-5)
            flat = _oracle_logprobs(model, experience, mrope=False)  # the 1-D positions give other log-probs
            assert float((flat[start:end] - expected[start:end]).abs().max()) > 1e-4
        visual = {n: _local(p).clone() for n, p in trainer.workers[0].actor.named_parameters() if "visual" in n}
        metrics = trainer.train_step(experiences)
        assert np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
        moved = [n for n, p in trainer.workers[0].actor.named_parameters()
                 if "visual" in n and not torch.equal(_local(p), visual[n])]
        assert moved  # the images were in the forward: the vision tower trained too
    finally:
        trainer.shutdown()


def test_rows_with_images_split_over_two_ranks_train_as_one_rank_running_them_whole(
    ray_local: Any, tiny_vlm: Path, tmp_path: Path
) -> None:
    """Ulysses 2 with images: every rank embeds the images, each runs its slice; loss and gradients as SP 1."""
    experiences = _experiences(tiny_vlm)
    results = {}
    for name, world, sp in (("whole", 1, 1), ("split", 2, 2)):
        plan = make_trainer_plan(tiny_vlm, tmp_path / name, "grpo", world_size=world, micro_batch_size=2, **{
            "trainer.ulysses_sequence_parallel_size": sp,
            "trainer.trainer_config.actor_rollout_ref.model.use_remove_padding": True,
            "algorithm.optimizer.optimizer_type": "sgd", "algorithm.optimizer.lr": 1.0})
        trainer = FSDPTrainer(plan, world_size=world)
        try:
            before = trainer.full_state_dict()
            metrics = trainer.train_step(experiences)
            results[name] = (metrics, {k: v - before[k] for k, v in trainer.full_state_dict().items()})
        finally:
            trainer.shutdown()
    (whole, whole_delta), (split, split_delta) = results["whole"], results["split"]
    for key in ("loss", "grad_norm", "pg_loss"):
        assert split[key] == pytest.approx(whole[key], rel=1e-5, abs=1e-7), key
    worst = max(float((split_delta[k] - v).abs().max()) for k, v in whole_delta.items())
    assert worst < 1e-5, worst
    assert max(float(whole_delta[k].abs().max()) for k in whole_delta if "visual" in k) > 0  # the tower trained


def test_image_task_sets_need_a_vision_language_model(tiny_vlm: Path, tmp_path: Path) -> None:
    from tests.plans import make_plan
    from trinity.common.config.loader import ConfigError
    from trinity.common.models.tiny import build_tiny_model

    taskset = {"path": "examples/data/vlm", "format": {"prompt_key": "problem", "response_key": "answer",
                                                       "image_key": "images"}}
    base = {"mode": "both", "model.model_path": str(tiny_vlm), "buffer.explorer_input.taskset": taskset}
    assert make_plan(base).buffer.train_taskset.format.image_key == "images"
    text_model = build_tiny_model(tmp_path / "text")
    with pytest.raises(ConfigError, match=r"format.image_key gives the records images, but .* has no vision tower"):
        make_plan({**base, "model.model_path": str(text_model)})
    assert make_plan({**base, "explorer.rollout_model.engine_type": "vllm",
                      "trainer.ulysses_sequence_parallel_size": 2, "cluster.gpu_per_node": 3}) is not None
    with pytest.raises(ConfigError, match=r"videos are not supported yet \(images are"):
        make_plan({**base, "buffer.explorer_input.taskset": {**taskset, "format": {"video_key": "videos"}}})


def test_sft_records_with_images_carry_them_with_the_placeholders_in_the_prompt(tiny_vlm: Path) -> None:
    """Upstream's mix_vlm SFT shape: a plaintext prompt with ``<image>`` tags, the record's images under image_key."""
    from trinity.buffer.formatters import FormatError, format_sft
    from trinity.common.config.schema import FormatConfig

    vision = VisionInputs(tiny_vlm)
    fmt = FormatConfig(prompt_type="plaintext", prompt_key="problem", response_key="response", image_key="images")
    record = {"problem": "<image>How many squares?", "response": "There are \\boxed{2}.",
              "images": [_image(0, (56, 84))]}
    experience = format_sft(record, fmt, vision.tokenizer, vision=vision)
    expected_prompt, images = vision.encode([{"role": "user", "content": [
        {"type": "image", "image": record["images"][0]}, {"type": "text", "text": "How many squares?"}]}])
    assert images is not None and experience.multi_modal_inputs is not None
    assert experience.tokens[: experience.prompt_length].tolist() == expected_prompt  # 6 placeholders, all prompt
    torch.testing.assert_close(experience.multi_modal_inputs["pixel_values"], images["pixel_values"])
    text_only = format_sft({**record, "problem": "How many squares?"}, FormatConfig(
        prompt_type="plaintext", prompt_key="problem", response_key="response"), vision.tokenizer)
    response = experience.tokens[experience.prompt_length:]
    assert response.tolist() == text_only.tokens[text_only.prompt_length:].tolist()  # trained on the reply only
    assert bool(experience.action_mask.all())
    with pytest.raises(FormatError, match="has no vision tower"):
        format_sft(record, fmt, vision.tokenizer)
    with pytest.raises(FormatError, match=r"more <image> tags than its 1 image"):
        format_sft({**record, "problem": "<image><image>?"}, fmt, vision.tokenizer, vision=vision)
