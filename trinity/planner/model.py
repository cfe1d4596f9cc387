"""The model's lengths, chat template and dtype, derived from ``model`` as upstream Trinity-RFT derives them."""

from __future__ import annotations

from pathlib import Path

from trinity.common.config.loader import ConfigError
from trinity.common.config.plan.model import ModelPlan
from trinity.common.config.schema import Config

#: Spellings of ``explorer.rollout_model.dtype`` and the torch dtype each names (``auto``: the device backend's
#: preferred dtype, decided when the plan meets the backend).
DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
          "float32": "float32", "fp32": "float32", "auto": "auto"}



def resolve_lengths(max_model_len: int | None, prompt: int | None, response: int | None,
                    min_response: int) -> tuple[int, int, int, int]:
    """Return ``(max_model_len, max_prompt_tokens, max_response_tokens, min_response_tokens)`` as upstream fills them.

    Raises ConfigError when the given values contradict each other or cannot determine the context length.
    """
    if max_model_len is not None and prompt is not None and response is not None and prompt + response > max_model_len:
        raise ConfigError(
            f"model.max_prompt_tokens + max_response_tokens ({prompt} + {response}) exceeds model.max_model_len "
            f"({max_model_len}); lower one of them"
        )
    if max_model_len is None:
        if prompt is None or response is None:
            raise ConfigError(
                "model.max_model_len: cannot be derived; set it, or set both max_prompt_tokens and max_response_tokens"
            )
        max_model_len = prompt + response
    if max_model_len < 2:
        raise ConfigError(f"model.max_model_len: must be at least 2, got {max_model_len}")
    if prompt is None and response is None:
        prompt = max_model_len // 2
        response = max_model_len - prompt
    elif prompt is None:
        assert response is not None
        response = min(response, max_model_len - 1)
        prompt = max_model_len - response
    elif response is None:
        prompt = min(prompt, max_model_len - 1)
        response = max_model_len - prompt
    if prompt < 1 or response < 1:
        raise ConfigError(f"model.max_prompt_tokens ({prompt}) and max_response_tokens ({response}) must be positive")
    if min_response >= response:
        min_response = max(response - 1, 0)
    return max_model_len, prompt, response, min_response


def read_chat_template(config: Config) -> str | None:
    """Return the chat template text: ``model.chat_template_path``'s file, else ``custom_chat_template``."""
    path = config.model.chat_template_path
    if path:
        try:
            return Path(path).expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"model.chat_template_path: {path} cannot be read ({exc.strerror or exc}); point it at a Jinja file"
            ) from None
    return config.model.custom_chat_template


def resolve_model(config: Config) -> ModelPlan:
    """Return the :class:`ModelPlan` of ``config``; raises ConfigError."""
    model = config.model
    rollout = config.explorer.rollout_model
    lengths = resolve_lengths(model.max_model_len, model.max_prompt_tokens, model.max_response_tokens,
                              model.min_response_tokens)
    dtype = DTYPES.get(rollout.dtype.strip().lower())
    if dtype is None:
        raise ConfigError(
            f"explorer.rollout_model.dtype: {rollout.dtype!r} is not one of {', '.join(sorted(set(DTYPES)))}"
        )
    return ModelPlan(
        path=model.model_path,
        critic_path=model.critic_model_path or model.model_path,
        trust_remote_code=model.trust_remote_code,
        chat_template=read_chat_template(config),
        max_model_len=lengths[0],
        max_prompt_tokens=lengths[1],
        max_response_tokens=lengths[2],
        min_response_tokens=lengths[3],
        enable_prompt_truncation=model.enable_prompt_truncation,
        repetition_penalty=model.repetition_penalty,
        enable_thinking=model.enable_thinking,
        dtype=dtype,
        tiny=model.tiny,
        rope_scaling=model.rope_scaling,
        rope_theta=model.rope_theta,
    )
