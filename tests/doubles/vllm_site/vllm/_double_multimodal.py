"""Multi-modal inputs of the double: images for Qwen2-VL-style models, as vLLM V1 processes them.

What vLLM documents for a prompt given as token ids with ``multi_modal_data``
(docs: design/mm_processing, "Tokenized Prompt Inputs"): the token ids are
taken as they are, the images go through the model's Hugging Face processor,
and vLLM then applies the prompt updates itself: each image placeholder token
becomes as many placeholders as the image has features (merged patches).
The request's ``prompt_token_ids`` are the updated ids. The model then runs
with the images' pixel values and its 3-D rotary positions (mRoPE).

Modelled: ``multi_modal_data={"image": image | [images]}`` with PIL images,
for a model whose config has a ``vision_config`` and an ``image_token_id``.
Not modelled: other modalities, image embeddings as inputs, numpy/tensor
images, ``limit_mm_per_prompt``, ``mm_processor_kwargs``, the processor cache.
"""

from __future__ import annotations

import os
from typing import Any

import torch


class ImageProcessing:
    """The image side of a vision-language model folder: its image processor and placeholder layout."""

    def __init__(self, model: str, hf_config: Any) -> None:
        """Load the image processor of ``model`` (a local folder)."""
        from transformers import AutoImageProcessor

        try:
            self.processor = AutoImageProcessor.from_pretrained(model)
        except ImportError:  # the default backend needs torchvision; the PIL one computes the same pixels
            self.processor = AutoImageProcessor.from_pretrained(model, backend="pil")
        self.image_token_id = int(hf_config.image_token_id)
        self.merge = int(hf_config.vision_config.spatial_merge_size)
        self.model = os.path.basename(os.path.normpath(model))

    def process(self, ids: list[int], data: Any) -> tuple[list[int], dict[str, torch.Tensor]]:
        """Return ``ids`` with each image placeholder repeated per feature, and the model's image inputs."""
        from PIL import Image

        if not isinstance(data, dict):
            raise TypeError(f"multi_modal_data must be a dict of modality to items, got {type(data).__qualname__}")
        unknown = sorted(set(data) - {"image"})
        if unknown:
            raise ValueError(f"the double models the 'image' modality only, got {unknown}")
        items = data.get("image")
        images = list(items) if isinstance(items, (list, tuple)) else [items]
        for image in images:
            if not isinstance(image, Image.Image):
                raise TypeError(f"an image item must be a PIL image in the double, got {type(image).__qualname__}")
        placeholders = ids.count(self.image_token_id)
        if placeholders != len(images):
            raise ValueError(
                f"Failed to apply prompt replacement for mm_items['image']: the prompt has {placeholders} image "
                f"placeholder token(s) ({self.image_token_id}) for {len(images)} image(s); a token prompt holds one "
                "placeholder per image, which vLLM expands")
        processed = self.processor(images=[image.convert("RGB") for image in images], return_tensors="pt")
        grid = processed["image_grid_thw"].long()
        features = [int(row.prod()) // (self.merge * self.merge) for row in grid]
        out: list[int] = []
        image = 0
        for token in ids:
            if token == self.image_token_id:
                out += [token] * features[image]
                image += 1
            else:
                out.append(token)
        return out, {"pixel_values": processed["pixel_values"], "image_grid_thw": grid}

    def forward_inputs(self, ids: list[int], inputs: dict[str, torch.Tensor], dtype: torch.dtype
                       ) -> dict[str, torch.Tensor]:
        """The first forward's extra inputs: pixel values, grid and token types (for the 3-D rotary positions)."""
        types = (torch.tensor([ids]) == self.image_token_id).int()
        return {"pixel_values": inputs["pixel_values"].to(dtype), "image_grid_thw": inputs["image_grid_thw"],
                "mm_token_type_ids": types}
