"""Upstream's ``simple_mm_workflow`` on a tiny vision-language model: images in, experiences with images out."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from trinity.common.config.schema import FormatConfig
from trinity.common.models.client import EngineClient
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import HFEngine
from trinity.common.workflows import Task, WorkflowError, make_workflow
from trinity.common.workflows.simple_mm import image_message


@pytest.fixture(scope="module")
def vlm_client(tmp_path_factory: pytest.TempPathFactory) -> EngineClient:
    from trinity.common.models.tiny_vlm import build_tiny_vlm

    engine = HFEngine(str(build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "model")), torch_threads=1,
                      max_prompt_tokens=384)
    return EngineClient(engine).bind(None)


def _png_url(seed: int) -> str:
    import base64
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.random.RandomState(seed).randint(0, 256, (56, 84, 3), dtype=np.uint8)).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_image_tags_place_the_images_and_the_rest_go_first() -> None:
    message = image_message("Compare <image> with <image>.", ["a", "b", "c"])
    kinds = [(part["type"], part.get("image", part.get("text"))) for part in message["content"]]
    assert kinds == [("image", "c"), ("text", "Compare "), ("image", "a"), ("text", " with "), ("image", "b"),
                     ("text", ".")]
    with pytest.raises(WorkflowError, match=r"more <image> tags than its 1 image"):
        image_message("<image><image>", ["a"])


def _task(**fields: Any) -> Task:
    fmt = FormatConfig(prompt_key="problem", response_key="answer", image_key="images")
    raw = {"problem": "<image>How many squares are there?", "answer": "2", "images": [_png_url(0)]}
    return Task(prompt=raw["problem"], answer="2", raw=raw, format=fmt, repeat_times=2,
                workflow="simple_mm_workflow", reward_fn="math_boxed_reward", **fields)


def test_the_workflow_rewards_replies_to_the_record_images(vlm_client: EngineClient) -> None:
    workflow = make_workflow("simple_mm_workflow", SamplingParams(max_tokens=6))
    made = workflow.run(vlm_client, _task())
    assert len(made) == 2 and [e.run_id for e in made] == [0, 1]
    for experience in made:
        assert experience.multi_modal_inputs is not None
        assert experience.multi_modal_inputs["image_grid_thw"].tolist() == [[1, 4, 6]]
        assert experience.reward is not None and "metrics" in experience.info
    with pytest.raises(WorkflowError, match=r"does not take format.reply_prefix"):
        workflow.run(vlm_client, _task(reply_prefix="The answer is"))
