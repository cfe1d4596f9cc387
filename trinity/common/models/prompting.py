"""Text and chat prompts, shared by every engine: tokenize here, then sample from token ids."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trinity.common.models.engine import Completion, SamplingParams


class TextPrompts:
    """``generate`` and ``chat`` of an engine, built on its ``tokenizer`` and its ``generate_tokens``.

    Both engines tokenize the same way, so the same prompt gives the same
    prompt tokens whichever engine serves it.
    """

    tokenizer: Any
    #: A chat template replacing the tokenizer's (``model.custom_chat_template``), or None.
    chat_template: str | None = None
    #: A vision-language model's prompt images (:class:`~trinity.common.models.vision.VisionInputs`), or None.
    vision: Any = None

    def generate_tokens(self, prompts: Sequence[Sequence[int]], params: SamplingParams, *,
                        images: Sequence[dict[str, Any] | None] | None = None) -> list[list[Completion]]:
        """Sample ``params.n`` completions for each prompt given as token ids (the engine implements it);
        ``images``: per prompt, its image inputs (None: none)."""
        raise NotImplementedError

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Completion]]:
        """Sample ``params.n`` completions for each raw prompt string (tokenizer special tokens added)."""
        ids = [self.tokenizer(p, add_special_tokens=True)["input_ids"] for p in prompts]
        return self.generate_tokens(ids, params)

    def chat(
        self, conversations: Sequence[Sequence[Mapping[str, Any]]], params: SamplingParams
    ) -> list[list[Completion]]:
        """Apply the chat template with a generation prompt to each conversation, then sample.

        A conversation with image parts (``{"type": "image", "image": ...}``) needs a
        vision-language model: its images go to the model beside the prompt's tokens.
        """
        from trinity.common.models.vision import has_images

        if not any(has_images(c) for c in conversations):
            return self.generate_tokens([self.chat_prompt_tokens(c) for c in conversations], params)
        if self.vision is None:
            raise ValueError("a conversation has images, but this engine's model has no vision tower; use a "
                             "vision-language model (Qwen2.5-VL's layout)")
        return self.chat_with_images(conversations, params)

    def chat_with_images(
        self, conversations: Sequence[Sequence[Mapping[str, Any]]], params: SamplingParams
    ) -> list[list[Completion]]:
        """:meth:`chat` of conversations with images: here, their expanded prompt ids and image inputs go to
        :meth:`generate_tokens`; an engine that takes the images themselves overrides it."""
        encoded = [self.vision.encode(c, chat_template=self.chat_template) for c in conversations]
        return self.generate_tokens([ids for ids, _ in encoded], params, images=[mm for _, mm in encoded])

    def chat_prompt_tokens(
        self, conversation: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None
    ) -> list[int]:
        """Return the token ids of ``conversation`` under the chat template, with the generation prompt.

        ``tools`` (OpenAI function specs) are rendered by templates that know them (Hermes, Qwen).
        """
        return self.text_tokens(self.chat_text(conversation, tools))

    def chat_text(
        self, conversation: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """Return ``conversation`` rendered by the chat template (with ``tools``; the generation prompt if asked)."""
        extra: dict[str, Any] = {"tools": [dict(t) for t in tools]} if tools else {}
        text: str = self.tokenizer.apply_chat_template(
            [dict(m) for m in conversation], add_generation_prompt=add_generation_prompt, tokenize=False,
            chat_template=self.chat_template, **extra,
        )
        return text

    def text_tokens(self, text: str) -> list[int]:
        """Return the token ids of ``text`` (special-token markup in it becomes those tokens; nothing is added)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
