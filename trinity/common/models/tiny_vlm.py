"""Build a tiny vision-language model offline (no model hub): Qwen2.5-VL's classes with random weights.

The text side is the tiny causal LM's (:mod:`.tiny`: its byte-level BPE
tokenizer, plus Qwen2.5-VL's vision markers as special tokens); the vision
tower is one block over 14-pixel patches, merged 2 x 2. The image processor
keeps images between 4 and 16 merged patches, so a prompt's image costs few
tokens. The chat template renders a message's ``{"type": "image"}`` parts as
``<|vision_start|><|image_pad|><|vision_end|>``. The folder (config, weights,
tokenizer, template, ``preprocessor_config.json``) loads with
``AutoModelForImageTextToText``, ``AutoTokenizer`` and ``AutoImageProcessor``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from trinity.common.config.schema import TinyModelConfig

VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
#: ChatML whose message content is a string or a list of ``text`` and ``image`` parts.
VLM_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
#: Pixels per merged patch: two 14-pixel patches a side.
_MERGED_PATCH = 28 * 28


def build_tiny_vlm(path: str | Path, config: TinyModelConfig | None = None) -> Path:
    """Build the tiny vision-language model into ``path`` (atomically) and return it; an existing one is kept."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    try:  # transformers 5: the PIL backend (the default one needs torchvision)
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
            Qwen2VLImageProcessorPil as ImageProcessor,
        )
    except ImportError:  # transformers 4: the slow processor is the PIL one
        from transformers import Qwen2VLImageProcessor as ImageProcessor  # type: ignore[assignment]

    from trinity.common.models.tiny import build_tokenizer, save_quietly

    target = Path(path)
    if (target / "config.json").is_file():
        return target
    cfg = config or TinyModelConfig()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        tokenizer = build_tokenizer(cfg.vocab_size, cfg.seed)
        tokenizer.add_special_tokens({"additional_special_tokens": VISION_TOKENS})
        tokenizer.chat_template = VLM_CHAT_TEMPLATE
        start, end, image, video = tokenizer.convert_tokens_to_ids(VISION_TOKENS)
        head_dim = cfg.hidden_size // cfg.num_heads
        section = head_dim // 2 // 4  # the rotary halves split over time, height and width
        torch.manual_seed(cfg.seed)
        model_config = Qwen2_5_VLConfig(
            text_config={
                "vocab_size": len(tokenizer), "hidden_size": cfg.hidden_size,
                "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_layers,
                "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_heads,
                "max_position_embeddings": 2048, "tie_word_embeddings": True,
                "rope_scaling": {"type": "mrope", "mrope_section": [head_dim // 2 - 2 * section, section, section]},
                "bos_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id,
                "pad_token_id": tokenizer.pad_token_id,
            },
            vision_config={
                "depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                "out_hidden_size": cfg.hidden_size, "patch_size": 14, "spatial_merge_size": 2,
                "temporal_patch_size": 2, "window_size": 56, "fullatt_block_indexes": [0],
            },
            image_token_id=image, video_token_id=video, vision_start_token_id=start, vision_end_token_id=end,
            tie_word_embeddings=True,
        )
        model = Qwen2_5_VLForConditionalGeneration(model_config)
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.generation_config.bos_token_id = tokenizer.pad_token_id
        save_quietly(model, staging)
        tokenizer.save_pretrained(staging)
        ImageProcessor(min_pixels=4 * _MERGED_PATCH, max_pixels=16 * _MERGED_PATCH, patch_size=14,
                       merge_size=2, temporal_patch_size=2).save_pretrained(staging)
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target
