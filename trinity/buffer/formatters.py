"""Turning data-set records into tasks (explorer input) and SFT/DPO experiences (trainer input), as upstream does.

A record is one row of a data set (a dict, see :mod:`trinity.buffer.datasets`);
``fmt`` is its ``format`` section (:class:`~trinity.common.config.schema.buffer.FormatConfig`).

* :func:`format_task`: the prompt, reference answer, system prompt, reply prefix and
  per-record workflow / reward function of a task record.
* :func:`format_sft`: an :class:`~trinity.common.experience.Experience` trained on the
  assistant's tokens. ``messages`` records train on the last message (which must be the
  assistant's), or, with ``enable_concatenated_multi_turn``, on every assistant turn at once
  (other tokens masked out); ``plaintext`` records become system/user/assistant messages.
* :func:`format_dpo`: one Experience per preference pair, the chosen response in ``tokens``
  and the rejected one in ``rejected_tokens`` (both after the same prompt tokens).

Messages may be stored as JSON strings (as upstream recommends for ``datasets``);
keys whose value is None (filled in by Arrow's schema alignment) are dropped from
messages and list-form tool schemas. As upstream, nothing is truncated here.
Every problem is a :class:`FormatError` of one line naming the data set and record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

import torch

from trinity.buffer.chat_masks import (
    ChatTemplateError,
    TokenizedChat,
    tokenize_assistant_turns,
    tokenize_prompt_response,
)
from trinity.buffer.errors import FormatError as FormatError
from trinity.buffer.record_keys import missing_key_message, prompt_type_of
from trinity.common.experience import Experience
from trinity.common.models.vision import image_user_turn, record_images

if TYPE_CHECKING:
    from trinity.common.config.schema.buffer import FormatConfig


class TaskFields(TypedDict):
    """What a task record holds, by the task set's format (a plain dict at run time)."""

    #: Value of ``prompt_key``.
    prompt: Any
    #: Value of ``response_key``; None when the record has none and none is required.
    answer: Any
    #: The record's ``system_prompt_key`` value, else ``format.system_prompt`` (None: no system message).
    system_prompt: str | None
    #: ``format.reply_prefix``: text the assistant's reply starts with.
    reply_prefix: str | None
    #: The chat a workflow sends: system prompt, the prompt as the user's, the reply prefix as the assistant's.
    messages: list[dict[str, Any]]
    #: The record's ``workflow_key`` value; None: the task set's default workflow.
    workflow: str | None
    #: The record's ``reward_fn_key`` value; None: the task set's default reward function.
    reward_fn: str | None
    #: The whole record.
    raw: dict[str, Any]
    #: Position of the record in the data set (0-based, as ``dataset[index]``).
    index: int


def _where(name: str, index: int) -> str:
    return f"{name}: record {index}"


def _value(row: Mapping[str, Any], field: str, key: str, where: str) -> Any:
    """Return ``row[key]``; raises FormatError naming ``format.<field>`` and the keys the record has.

    A key whose value is None counts as missing: ``datasets`` fills a column a
    record lacks with None.
    """
    if row.get(key) is None:
        raise FormatError(missing_key_message(where, field, key, [k for k, v in row.items() if v is not None]))
    return row[key]


def _optional(row: Mapping[str, Any], key: str) -> str | None:
    """Return ``row[key]`` as a name when ``key`` is set and the record has a value for it, else None."""
    if not key:
        return None
    value = row.get(key)
    return str(value) if value not in (None, "") else None


def _system_prompt(row: Mapping[str, Any], fmt: FormatConfig, where: str) -> str | None:
    """Return the record's system prompt (``system_prompt_key``), else ``format.system_prompt``."""
    if fmt.system_prompt_key:
        value = _value(row, "system_prompt_key", fmt.system_prompt_key, where)
        if value is not None:
            return str(value)
    return fmt.system_prompt


def format_task(
    row: Mapping[str, Any], fmt: FormatConfig, *, index: int, name: str, require_response: bool = True
) -> TaskFields:
    """Return the task fields of record ``index`` of task set ``name``.

    ``prompt_key`` is required, and so is ``response_key`` unless
    ``require_response`` is False (then a record without it has answer None);
    ``system_prompt_key`` is required when set. A record without a value for
    ``workflow_key`` / ``reward_fn_key`` gets None (the task set's defaults), as
    upstream. Raises :class:`FormatError` naming the missing key, the record
    and the keys it has.
    """
    where = _where(name, index)
    prompt = _value(row, "prompt_key", fmt.prompt_key, where)
    if require_response:
        answer = _value(row, "response_key", fmt.response_key, where)
    else:
        answer = row.get(fmt.response_key)
    system_prompt = _system_prompt(row, fmt, where)
    messages: list[dict[str, Any]] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    messages.append({"role": "user", "content": prompt})
    if fmt.reply_prefix:
        messages.append({"role": "assistant", "content": fmt.reply_prefix})
    return TaskFields(
        prompt=prompt,
        answer=answer,
        system_prompt=system_prompt,
        reply_prefix=fmt.reply_prefix,
        messages=messages,
        workflow=_optional(row, fmt.workflow_key),
        reward_fn=_optional(row, fmt.reward_fn_key),
        raw=dict(row),
        index=index,
    )


def _without_none(value: Any, keep: frozenset[str] = frozenset()) -> Any:
    """Return ``value`` with None-valued dict keys dropped, recursively (keys in ``keep`` stay)."""
    if isinstance(value, Mapping):
        return {k: _without_none(v, keep) for k, v in value.items() if v is not None or k in keep}
    if isinstance(value, list):
        return [_without_none(v, keep) for v in value]
    return value


def _messages(value: Any, field: str, key: str, where: str) -> list[dict[str, Any]]:
    """Return a record's message list (a list, or a JSON string of one); raises FormatError otherwise."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise FormatError(
                f"{where}: {key!r} (format.{field}) is a string but not JSON ({exc.msg} at column {exc.colno}); "
                f"store a list of messages or its JSON"
            ) from None
    if not isinstance(value, list) or not all(isinstance(m, Mapping) and "role" in m for m in value):
        raise FormatError(
            f"{where}: {key!r} (format.{field}) holds {type(value).__name__}, not a list of messages with a 'role'; "
            f"fix the data or set format.{field}"
        )
    return [{k: v for k, v in m.items() if v is not None or k == "content"} for m in value]


def _tools(row: Mapping[str, Any], fmt: FormatConfig, where: str) -> list[dict[str, Any]] | None:
    """Return the record's tool schemas (``tools_key``: a list or its JSON), None when it has none."""
    value = row.get(fmt.tools_key) if fmt.tools_key else None
    if value in (None, "", []):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise FormatError(
                f"{where}: {fmt.tools_key!r} (format.tools_key) is not valid JSON ({exc.msg} at column {exc.colno}); "
                f"store a list of tool schemas or its JSON"
            ) from None
    if not isinstance(value, list) or not all(isinstance(t, Mapping) for t in value):
        raise FormatError(
            f"{where}: {fmt.tools_key!r} (format.tools_key) holds {type(value).__name__}, not a list of tool schemas; "
            f"fix the data or set format.tools_key"
        )
    return [dict(t) for t in _without_none(value)]


def _plaintext_prompt(row: Mapping[str, Any], fmt: FormatConfig, where: str) -> list[dict[str, Any]]:
    system_prompt = _system_prompt(row, fmt, where)
    messages: list[dict[str, Any]] = []
    if system_prompt is not None:
        messages.append({"role": "system", "content": system_prompt})
    messages.append({"role": "user", "content": _value(row, "prompt_key", fmt.prompt_key, where)})
    return messages


def _ids(token_ids: list[int]) -> torch.Tensor:
    return torch.tensor(token_ids, dtype=torch.long)


def _experience(chat: TokenizedChat, where: str, images: dict[str, torch.Tensor] | None = None) -> Experience:
    try:
        return Experience(tokens=_ids(chat.token_ids), prompt_length=chat.prompt_length,
                          action_mask=torch.tensor(chat.response_mask, dtype=torch.bool), multi_modal_inputs=images)
    except ValueError as exc:
        raise FormatError(f"{where}: {exc}") from None


def _with_images(chat: TokenizedChat, items: Sequence[Any], vision: Any
                 ) -> tuple[TokenizedChat, dict[str, torch.Tensor]]:
    """``chat`` (images in its prompt, one placeholder each) with each placeholder repeated per merged patch."""
    inputs = vision.images(items)
    ids = vision.expand(chat.token_ids, inputs["image_grid_thw"])
    added = len(ids) - len(chat.token_ids)
    return TokenizedChat(ids, chat.prompt_length + added, [0] * added + chat.mask), inputs


def format_sft(
    row: Mapping[str, Any],
    fmt: FormatConfig,
    tokenizer: Any,
    *,
    chat_template: str | None = None,
    index: int = 0,
    name: str = "sft",
    vision: Any = None,
) -> Experience:
    """Return the SFT experience of record ``index``: prompt + response tokens, ``action_mask`` on what is trained.

    With ``format.image_key`` (plaintext prompts), the record's images join
    its user turn as upstream places them (``<image>`` tags, the rest first)
    and the experience carries their inputs; ``vision`` is the model's
    :class:`~trinity.common.models.vision.VisionInputs`.

    The template is ``fmt.chat_template``, else ``chat_template`` (the
    model's), else the tokenizer's; tools come from ``tools_key`` and
    ``enable_thinking`` is passed when set. Raises :class:`FormatError` for a
    missing key, malformed messages or tools, a ``messages`` record whose last
    message is not the assistant's (without ``enable_concatenated_multi_turn``),
    or a template that cannot render the record or locate its assistant tokens.
    """
    where = _where(name, index)
    template = fmt.chat_template or chat_template
    tools = _tools(row, fmt, where)
    try:
        if prompt_type_of(fmt) == "plaintext":
            prompt = _plaintext_prompt(row, fmt, where)
            items = record_images(row.get(fmt.image_key)) if fmt.image_key else []
            if items:
                if vision is None:
                    raise FormatError(f"{where}: the record has images (format.image_key), but the model has no "
                                      "vision tower; use a vision-language model")
                prompt[-1] = image_user_turn(str(prompt[-1]["content"]), items)
            reply = {"role": "assistant", "content": _value(row, "response_key", fmt.response_key, where)}
            chat = tokenize_prompt_response(tokenizer, prompt, [*prompt, reply], tools=tools, chat_template=template,
                                            enable_thinking=fmt.enable_thinking)
            if not items:
                return _experience(chat, where)
            chat, images = _with_images(chat, items, vision)
            return _experience(chat, where, images)
        messages = _messages(_value(row, "messages_key", fmt.messages_key, where), "messages_key",
                             fmt.messages_key, where)
        if fmt.enable_concatenated_multi_turn:
            chat = tokenize_assistant_turns(tokenizer, messages, tools=tools, chat_template=template,
                                            enable_thinking=fmt.enable_thinking)
            return _experience(chat, where)
        last = messages[-1].get("role") if messages else None
        if last != "assistant":
            raise FormatError(
                f"{where}: the last message is {'no message' if last is None else repr(last) + ' message'}, "
                f"not the assistant's; SFT trains on the last assistant message: end the conversation with one, "
                f"or set format.enable_concatenated_multi_turn to train on every assistant turn"
            )
        chat = tokenize_prompt_response(tokenizer, messages[:-1], messages, tools=tools, chat_template=template,
                                        enable_thinking=fmt.enable_thinking)
        return _experience(chat, where)
    except (ChatTemplateError, ValueError) as exc:
        if isinstance(exc, FormatError):
            raise
        raise FormatError(f"{where}: {exc}") from None


def _reply(row: Mapping[str, Any], fmt: FormatConfig, field: str, key: str, where: str) -> list[dict[str, Any]]:
    """Return the chosen or rejected side of a DPO record as messages."""
    value = _value(row, field, key, where)
    if prompt_type_of(fmt) == "plaintext":
        return [{"role": "assistant", "content": value}]
    return _messages(value, field, key, where)


def format_dpo(
    row: Mapping[str, Any],
    fmt: FormatConfig,
    tokenizer: Any,
    *,
    chat_template: str | None = None,
    index: int = 0,
    name: str = "dpo",
) -> Experience:
    """Return the DPO experience of record ``index``: chosen in ``tokens``, rejected in ``rejected_tokens``.

    ``plaintext`` records: ``prompt_key`` (with the system prompt) is the
    user's message, ``chosen_key`` / ``rejected_key`` the assistant's replies.
    ``messages`` records: ``messages_key`` holds the prompt messages and
    ``chosen_key`` / ``rejected_key`` the messages that follow. Both sides share
    the prompt tokens (``prompt_length``) and are trained on in full, as
    upstream (which passes no tools to DPO templates either). Raises
    :class:`FormatError` for a missing key, malformed messages, or a template
    that cannot render the record or split its prompt from the responses.
    """
    where = _where(name, index)
    template = fmt.chat_template or chat_template
    try:
        if prompt_type_of(fmt) == "plaintext":
            prompt = _plaintext_prompt(row, fmt, where)
        else:
            prompt = _messages(_value(row, "messages_key", fmt.messages_key, where), "messages_key",
                               fmt.messages_key, where)
        chosen = _reply(row, fmt, "chosen_key", fmt.chosen_key, where)
        rejected = _reply(row, fmt, "rejected_key", fmt.rejected_key, where)
        sides = [
            tokenize_prompt_response(tokenizer, prompt, [*prompt, *reply], chat_template=template,
                                     enable_thinking=fmt.enable_thinking)
            for reply in (chosen, rejected)
        ]
    except (ChatTemplateError, ValueError) as exc:
        if isinstance(exc, FormatError):
            raise
        raise FormatError(f"{where}: {exc}") from None
    chosen_chat, rejected_chat = sides  # one prompt rendering: the same prompt tokens on both sides
    try:
        return Experience(tokens=_ids(chosen_chat.token_ids), prompt_length=chosen_chat.prompt_length,
                          rejected_tokens=_ids(rejected_chat.token_ids))
    except ValueError as exc:
        raise FormatError(f"{where}: {exc}") from None


def format_records(
    rows: Sequence[Mapping[str, Any]],
    schema: str,
    fmt: FormatConfig,
    tokenizer: Any,
    *,
    chat_template: str | None = None,
    name: str = "data",
    start: int = 0,
    vision: Any = None,
) -> list[Experience]:
    """Return the experiences of ``rows`` (records ``start``, ``start + 1``, ...) of an ``sft`` or ``dpo`` data set.

    Raises :class:`FormatError` for the first record that does not fit, and
    ValueError for a schema other than ``sft`` / ``dpo``.
    """
    if schema not in ("sft", "dpo"):
        raise ValueError(f"experiences are formatted from 'sft' or 'dpo' data sets, not {schema!r}")
    if schema == "sft":
        return [format_sft(row, fmt, tokenizer, chat_template=chat_template, index=start + i, name=name,
                           vision=vision) for i, row in enumerate(rows)]
    return [format_dpo(row, fmt, tokenizer, chat_template=chat_template, index=start + i, name=name)
            for i, row in enumerate(rows)]
