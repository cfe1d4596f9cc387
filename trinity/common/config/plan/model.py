"""The policy model as a run plan holds it: resolved lengths, chat template and dtype."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trinity.common.config.schema import TinyModelConfig


@dataclass(frozen=True)
class ModelPlan:
    """The policy model as every part of the run sees it."""

    #: Model folder (or hub id).
    path: str
    #: Critic folder (PPO).
    critic_path: str
    #: ``transformers`` ``trust_remote_code``.
    trust_remote_code: bool
    #: Chat template text replacing the tokenizer's, or None.
    chat_template: str | None
    #: Context length.
    max_model_len: int
    #: Prompt tokens at most.
    max_prompt_tokens: int
    #: New tokens per rollout at most.
    max_response_tokens: int
    #: New tokens per rollout at least.
    min_response_tokens: int
    #: Truncate long prompts from the left.
    enable_prompt_truncation: bool
    #: Repetition penalty of rollouts.
    repetition_penalty: float
    #: Passed to chat templates that know it.
    enable_thinking: bool | None
    #: Weights dtype of engines and of the trainer's compute (``float32``, ``bfloat16``, ``float16``, or
    #: ``auto``: the device backend's preferred one).
    dtype: str
    #: Build a tiny model at ``path`` when missing.
    tiny: TinyModelConfig | None
    #: RoPE overrides for the model config.
    rope_scaling: dict[str, Any] | None
    #: RoPE theta override.
    rope_theta: float | None
