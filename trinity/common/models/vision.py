"""Images for vision-language models (Qwen2.5-VL's layout): prompts with image placeholders, and model inputs.

A vision-language prompt holds, per image, a start marker, the image's
placeholder token repeated once per merged patch, and an end marker. Its
images travel beside the tokens as the model takes them:
``pixel_values`` ``[patches, dim]`` and ``image_grid_thw`` ``[images, 3]``
(an :class:`~trinity.common.experience.Experience`'s ``multi_modal_inputs``).
:class:`VisionInputs` makes both from chat messages whose content lists
``{"type": "image", "image": ...}`` parts (upstream's message shape), using
the model folder's tokenizer, chat template and image processor only.

For the trainer, :func:`multimodal_rows` lays a batch's inputs out as
rectangular per-row tensors (so rows shard and slice like every other
field), and :func:`model_inputs` gathers a micro-batch's back.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: The per-row tensors :func:`multimodal_rows` adds to a batch's rows.
ROW_FIELDS = ("mm_pixel_values", "mm_patches", "mm_image_grid", "mm_images")


def is_vision_language(config: Any) -> bool:
    """Whether a model config (transformers' or its ``config.json`` as a dict) has a vision tower."""
    if isinstance(config, Mapping):
        return config.get("vision_config") is not None
    return getattr(config, "vision_config", None) is not None


def folder_is_vision_language(path: str | Path) -> bool:
    """Whether the model folder at ``path`` holds a vision-language model (False when it has no config)."""
    import json

    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    try:
        return is_vision_language(json.loads(config.read_text()))
    except ValueError:
        return False


def load_image(item: Any) -> Any:
    """Return ``item`` as an RGB PIL image: a PIL image, a file path, a ``data:image/...;base64,`` URL, bytes, or
    ``{"bytes": ..., "path": ...}`` (how Hugging Face datasets store an image)."""
    import base64

    from PIL import Image

    if isinstance(item, Image.Image):
        image = item
    elif isinstance(item, Mapping):
        if item.get("bytes"):
            image = Image.open(io.BytesIO(item["bytes"]))
        elif item.get("path"):
            image = Image.open(item["path"])
        else:
            raise ValueError("an image record has neither bytes nor a path")
    elif isinstance(item, (bytes, bytearray)):
        image = Image.open(io.BytesIO(bytes(item)))
    elif isinstance(item, str) and item.startswith("data:image/"):
        image = Image.open(io.BytesIO(base64.b64decode(item.split(",", 1)[1])))
    elif isinstance(item, (str, Path)):
        image = Image.open(item)
    else:
        raise ValueError(f"cannot read an image from a {type(item).__name__}")
    return image if image.mode == "RGB" else image.convert("RGB")


def message_images(messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Return the images of ``messages``' image parts, in order."""
    images = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            images += [part["image"] for part in content if isinstance(part, Mapping) and part.get("type") == "image"]
    return images


def has_images(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any message has an image part."""
    return bool(message_images(messages))


def record_images(value: Any) -> list[Any]:
    """A record's images under its ``image_key``: one image or a list of them (None: none)."""
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def image_user_turn(prompt: str, images: Sequence[Any]) -> dict[str, Any]:
    """The user turn of ``prompt`` with ``images``: each ``<image>`` tag becomes the next image, the rest go first
    (upstream's placement).

    Raises ValueError when the prompt has more tags than images.
    """
    import re

    parts: list[dict[str, Any]] = []
    used = 0
    for piece in re.split(r"(<image>)", prompt):
        if piece == "<image>":
            if used >= len(images):
                raise ValueError(f"the prompt has more <image> tags than its {len(images)} image(s)")
            parts.append({"type": "image", "image": images[used]})
            used += 1
        elif piece:
            parts.append({"type": "text", "text": piece})
    leading = [{"type": "image", "image": image} for image in images[used:]]
    return {"role": "user", "content": leading + parts}


class VisionInputs:
    """Prompt ids and image tensors of a vision-language model folder (tokenizer + image processor)."""

    def __init__(self, path: str | Path, tokenizer: Any = None) -> None:
        from transformers import AutoConfig, AutoImageProcessor, AutoTokenizer

        self.config = AutoConfig.from_pretrained(path)
        if not is_vision_language(self.config):
            raise ValueError(f"{path} is not a vision-language model (its config has no vision_config)")
        self.tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(path)
        try:
            self.processor = AutoImageProcessor.from_pretrained(path)
        except ImportError:  # the default backend needs torchvision; the PIL one computes the same pixels
            self.processor = AutoImageProcessor.from_pretrained(path, backend="pil")
        self.image_token_id = int(self.config.image_token_id)
        self.merge = int(self.config.vision_config.spatial_merge_size)
        #: The vision markers and placeholders: prompt-only tokens, never sampled.
        self.special_ids = sorted({int(getattr(self.config, name)) for name in (
            "image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
            if getattr(self.config, name, None) is not None})

    def images(self, items: Sequence[Any]) -> dict[str, torch.Tensor]:
        """The model inputs of ``items`` (any form :func:`load_image` reads)."""
        processed = self.processor(images=[load_image(item) for item in items], return_tensors="pt")
        return {"pixel_values": processed["pixel_values"].float(),
                "image_grid_thw": processed["image_grid_thw"].long()}

    def expand(self, ids: Sequence[int], grid: torch.Tensor) -> list[int]:
        """Repeat each image placeholder of ``ids`` once per merged patch of its image (``grid``'s rows in order)."""
        counts = [int(row.prod()) // (self.merge * self.merge) for row in grid]
        out: list[int] = []
        image = 0
        for token in ids:
            if token == self.image_token_id:
                if image >= len(counts):
                    raise ValueError(f"the prompt has more image placeholders than its {len(counts)} image(s)")
                out += [token] * counts[image]
                image += 1
            else:
                out.append(token)
        if image != len(counts):
            raise ValueError(f"the prompt has {image} image placeholder(s) for {len(counts)} image(s)")
        return out

    def prompt(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True,
               **template: Any) -> tuple[list[int], list[Any]]:
        """Return the prompt ids of chat ``messages`` with one placeholder per image, and the images (PIL, RGB)."""
        conversation: Any = [dict(message) for message in messages]
        text = self.tokenizer.apply_chat_template(conversation, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt, **template)
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return ids, [load_image(item) for item in message_images(messages)]

    def encode(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True,
               **template: Any) -> tuple[list[int], dict[str, torch.Tensor] | None]:
        """Return the prompt ids of chat ``messages`` and their images' inputs (None without an image)."""
        ids, items = self.prompt(messages, add_generation_prompt=add_generation_prompt, **template)
        if not items:
            return ids, None
        inputs = self.images(items)
        return self.expand(ids, inputs["image_grid_thw"]), inputs


def multimodal_rows(inputs: Sequence[Mapping[str, torch.Tensor] | None]) -> dict[str, torch.Tensor]:
    """Lay out each row's image inputs (None: no image) as rectangular tensors, padded to the batch's largest.

    ``mm_pixel_values`` ``[B, P, dim]`` and ``mm_patches`` ``[B]`` (real patches
    per row); ``mm_image_grid`` ``[B, I, 3]`` and ``mm_images`` ``[B]``.
    """
    import torch

    rows = len(inputs)
    present = [item for item in inputs if item is not None]
    if not present:
        return {}
    dim = int(present[0]["pixel_values"].shape[-1])
    patches = torch.tensor([0 if item is None else int(item["pixel_values"].shape[0]) for item in inputs])
    images = torch.tensor([0 if item is None else int(item["image_grid_thw"].shape[0]) for item in inputs])
    pixel_values = torch.zeros((rows, max(1, int(patches.max())), dim), dtype=torch.float32)
    grid = torch.zeros((rows, max(1, int(images.max())), 3), dtype=torch.long)
    for row, item in enumerate(inputs):
        if item is not None:
            pixel_values[row, : patches[row]] = item["pixel_values"].float()
            grid[row, : images[row]] = item["image_grid_thw"].long()
    return {"mm_pixel_values": pixel_values, "mm_patches": patches, "mm_image_grid": grid, "mm_images": images}


def token_types(ids: torch.Tensor, config: Any) -> torch.Tensor:
    """``mm_token_type_ids`` of ``ids``: 1 at image placeholders, 2 at video placeholders, 0 elsewhere.

    Qwen2.5-VL's 3-D rotary positions (mRoPE) are built from them; without
    them transformers falls back to 1-D positions, which the model was not
    trained with.
    """
    import torch

    types = torch.zeros_like(ids, dtype=torch.int32)
    for value, name in ((1, "image_token_id"), (2, "video_token_id")):
        token = config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)
        if token is not None:
            types[ids == int(token)] = value
    return types


def model_inputs(rows: Mapping[str, torch.Tensor], config: Any = None) -> dict[str, torch.Tensor]:
    """The ``pixel_values`` and ``image_grid_thw`` of a micro-batch's rows (in row order); empty without images.

    With the model's ``config``, also the rows' ``mm_token_type_ids`` (:func:`token_types`), from which the model
    builds its 3-D rotary positions.
    """
    import torch

    if "mm_images" not in rows or int(rows["mm_images"].sum()) == 0:
        return {}
    patches, images = rows["mm_patches"].tolist(), rows["mm_images"].tolist()
    pixel_values = torch.cat([rows["mm_pixel_values"][i, :n] for i, n in enumerate(patches) if n])
    grid = torch.cat([rows["mm_image_grid"][i, :n] for i, n in enumerate(images) if n])
    out = {"pixel_values": pixel_values, "image_grid_thw": grid}
    if config is not None:
        out["mm_token_type_ids"] = token_types(rows["input_ids"], config)
    return out


def takes_token_types(index: Any) -> bool:
    """Whether a model's ``get_rope_index`` (:func:`rope_index`) builds the 3-D rotary positions from
    ``mm_token_type_ids`` (transformers 5); older releases find the placeholders in ``input_ids`` themselves and
    take no such input."""
    import inspect

    return "mm_token_type_ids" in inspect.signature(index).parameters


def rope_index(model: Any) -> Any:
    """The model's ``get_rope_index`` (its 3-D rotary positions), found on it or one of its modules."""
    for module in model.modules():
        if getattr(type(module), "get_rope_index", None) is not None:
            return module.get_rope_index
    raise ValueError(f"{type(model).__name__} has no get_rope_index: it does not take 3-D rotary positions")


def packed_positions(index: Any, rows: Mapping[str, torch.Tensor], real: torch.Tensor, text_positions: torch.Tensor,
                     config: Any) -> torch.Tensor:
    """``[4, 1, N]`` position ids of ``rows`` packed into one sequence (their ``real`` tokens, in order).

    Row 0 is ``text_positions`` (1-D, restarting at each row: transformers
    keeps packed rows apart by them); rows 1-3 are each row's own 3-D rotary
    positions, as the model's ``get_rope_index`` (``index``, :func:`rope_index`)
    computes them for that row alone.
    """
    import torch

    typed = takes_token_types(index)
    ids = rows["input_ids"]
    types = token_types(ids, config)
    images = rows["mm_images"].tolist() if "mm_images" in rows else [0] * ids.shape[0]
    parts = []
    for row, count in enumerate(images):
        keep = real[row]
        row_ids = ids[row, keep].unsqueeze(0)
        if count:
            grid = rows["mm_image_grid"][row, :count]
            by_type = {"mm_token_type_ids": types[row, keep].unsqueeze(0)} if typed else {}
            positions, _ = index(row_ids, image_grid_thw=grid, **by_type)
        else:
            positions = torch.arange(row_ids.shape[1], device=ids.device).view(1, 1, -1).expand(3, 1, -1)
        parts.append(positions)
    spatial = torch.cat(parts, dim=2).to(text_positions.device, text_positions.dtype)
    return torch.cat([text_positions.view(1, 1, -1), spatial], dim=0)
