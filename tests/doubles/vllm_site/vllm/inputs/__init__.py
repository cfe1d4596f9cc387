"""Prompt types accepted by ``AsyncLLM.generate`` (besides a plain ``str``)."""

from __future__ import annotations

from typing import Any

from typing_extensions import NotRequired, Required, TypedDict


class TokensPrompt(TypedDict, total=False):
    """A prompt given as token ids."""

    prompt_token_ids: Required[list[int]]
    token_type_ids: NotRequired[list[int]]
    multi_modal_data: NotRequired[Any]
    mm_processor_kwargs: NotRequired[dict[str, Any]]
    cache_salt: NotRequired[str]


class TextPrompt(TypedDict, total=False):
    """A prompt given as text (tokenized by the engine, special tokens added)."""

    prompt: Required[str]
    multi_modal_data: NotRequired[Any]
    mm_processor_kwargs: NotRequired[dict[str, Any]]
    cache_salt: NotRequired[str]


__all__ = ["TextPrompt", "TokensPrompt"]
