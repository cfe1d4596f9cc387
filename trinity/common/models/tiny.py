"""Build a tiny causal LM and its tokenizer offline (no model hub): tests and the CPU quickstart.

The tokenizer is a byte-level BPE trained on a small synthetic corpus (digits,
arithmetic, letters, common words, ChatML markers) and saved as a
``PreTrainedTokenizerFast`` with a ChatML chat template (Hermes-style tool calls
when given ``tools``) and left padding.
The model is a Qwen2-architecture decoder with random weights. The folder is
written atomically: built beside the target, then renamed into place.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

from trinity.common.config.schema import TinyModelConfig

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
#: ChatML; with ``tools``, Hermes-style tool calls (``<tool_call>`` JSON blocks, ``<tool_response>`` turns).
CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    "You can call these tools, each described by a JSON object:\n<tools>\n"
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools>\n"
    "To call one, write its name and arguments as one JSON object between <tool_call> and </tool_call>:\n"
    "<tool_call>\n{\"name\": \"<tool name>\", \"arguments\": {\"<argument>\": \"<value>\"}}\n</tool_call><|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if tools and loop.first and message['role'] == 'system' %}"
    "{% elif message['role'] == 'tool' %}"
    "<|im_start|>user\n<tool_response>\n{{ message['content'] }}\n</tool_response><|im_end|>\n"
    "{% else %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "{% if message['tool_calls'] is defined and message['tool_calls'] %}{% for call in message['tool_calls'] %}"
    "{% if message['content'] or not loop.first %}\n{% endif %}"
    "<tool_call>\n{\"name\": {{ call['function']['name'] | tojson }}, "
    "\"arguments\": {{ call['function']['arguments'] | tojson }}}\n</tool_call>"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_WORDS = (
    "the a an is are what how many plus minus times answer question repeat letter word number sum total "
    "say write give copy count yes no and or of to in it you me please think step result equals"
).split()


def synthetic_corpus(lines: int = 4000, seed: int = 0) -> list[str]:
    """Return deterministic text lines covering what the tiny tasks use."""
    rng = random.Random(seed)
    corpus = []
    for _ in range(lines):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        letter = rng.choice("abcdefghijklmnopqrstuvwxyz")
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 10)))
        corpus.append(
            rng.choice(
                [
                    f"What is {a} plus {b}? The answer is {a + b}.",
                    f"{a} + {b} = {a + b}",
                    f"Repeat the letter {letter}: {letter * rng.randint(1, 8)}",
                    words,
                    f"<|im_start|>user\n{words}<|im_end|>\n<|im_start|>assistant\n{letter}<|im_end|>",
                ]
            )
        )
    return corpus


def build_tokenizer(vocab_size: int = 400, seed: int = 0):  # type: ignore[no-untyped-def]
    """Train and return a ``PreTrainedTokenizerFast`` (byte-level BPE, ChatML template, left padding)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(synthetic_corpus(seed=seed), trainer=trainer)
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=core,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        padding_side="left",
        chat_template=CHAT_TEMPLATE,
        model_max_length=4096,
    )


def save_quietly(model: Any, folder: Path) -> None:
    """``model.save_pretrained(folder)`` without transformers' progress bar (a tiny model needs none)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        model.save_pretrained(folder)
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


def build_tiny_model(path: str | Path, config: TinyModelConfig | None = None) -> Path:
    """Build the tiny model and tokenizer into ``path`` (atomically) and return it.

    If ``path`` already holds a model (``config.json``), nothing is rebuilt.
    With ``config.vision`` the model is the tiny vision-language one (:mod:`.tiny_vlm`).
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    target = Path(path)
    if (target / "config.json").is_file():
        return target
    cfg = config or TinyModelConfig()
    if cfg.vision:
        from trinity.common.models.tiny_vlm import build_tiny_vlm

        return build_tiny_vlm(target, cfg)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        tokenizer = build_tokenizer(cfg.vocab_size, cfg.seed)
        torch.manual_seed(cfg.seed)
        model_config = Qwen2Config(
            vocab_size=len(tokenizer),
            hidden_size=cfg.hidden_size,
            intermediate_size=cfg.intermediate_size,
            num_hidden_layers=cfg.num_layers,
            num_attention_heads=cfg.num_heads,
            num_key_value_heads=cfg.num_heads,
            max_position_embeddings=2048,
            tie_word_embeddings=True,
            bos_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        model = Qwen2ForCausalLM(model_config)
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        save_quietly(model, staging)
        tokenizer.save_pretrained(staging)
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / "config.json").is_file():  # not a concurrent builder winning the race
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target
