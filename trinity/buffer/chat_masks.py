"""Token ids of a chat and which of them are the assistant's, found by rendering the chat template incrementally.

For a conversation ``m``, the tokens of assistant turn ``i`` are those between
the rendering of ``m[:i]`` with the generation prompt and the rendering of
``m[:i + 1]``; both must be prefixes of the whole conversation's rendering
(as text and as tokens), else the template rewrites earlier turns (or the
tokenizer merges across a turn boundary) and the turn cannot be masked: a
:class:`ChatTemplateError` says so. This is upstream Trinity-RFT's
``tokenize_and_mask_messages_default``, with the prefix checks it lacks. As
upstream, a template with ``{% generation %}`` blocks uses the tokenizer's own
assistant mask instead, and a template mentioning ``<think>`` (which drops the
reasoning of earlier turns) masks only the assistant turns after the last user
message.

``tokenizer`` is a Hugging Face tokenizer (``apply_chat_template``, ``encode``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trinity.buffer.errors import ChatTemplateError as ChatTemplateError

Message = Mapping[str, Any]

_GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")
_FIX = "set format.chat_template (or model.custom_chat_template) to a template that renders earlier turns unchanged"


@dataclass(frozen=True)
class TokenizedChat:
    """A tokenized conversation: its token ids, how many are prompt, and which are trained on."""

    #: Token ids of the whole conversation.
    token_ids: list[int]
    #: Number of tokens before the first trained token.
    prompt_length: int
    #: 1 for tokens of assistant turns (trained on), 0 otherwise; same length as ``token_ids``.
    mask: list[int]

    @property
    def response_mask(self) -> list[int]:
        """The mask over the response (the tokens after the prompt)."""
        return self.mask[self.prompt_length :]


def template_of(tokenizer: Any, chat_template: str | None) -> str:
    """Return the template in use: ``chat_template``, else the tokenizer's; raises ChatTemplateError if neither."""
    template = chat_template or getattr(tokenizer, "chat_template", None)
    if not template:
        raise ChatTemplateError(
            "the tokenizer has no chat template; set format.chat_template (or model.custom_chat_template)"
        )
    if not isinstance(template, str):  # a dict of named templates: the default one
        template = template.get("default") if isinstance(template, Mapping) else None
        if not isinstance(template, str):
            raise ChatTemplateError("the tokenizer has several chat templates and none is 'default'; "
                                    "set format.chat_template")
    return template


@dataclass(frozen=True)
class _Chat:
    """How to render: the template, tools and ``enable_thinking``."""

    tokenizer: Any
    template: str
    tools: Sequence[Mapping[str, Any]] | None
    enable_thinking: bool | None

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``apply_chat_template`` besides the messages."""
        out: dict[str, Any] = {"chat_template": self.template, "tools": list(self.tools) if self.tools else None}
        if self.enable_thinking is not None:
            out["enable_thinking"] = self.enable_thinking
        return out

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = False) -> str:
        """Return the rendered text; raises ChatTemplateError when the template fails."""
        try:
            text = self.tokenizer.apply_chat_template(
                [dict(m) for m in messages], add_generation_prompt=add_generation_prompt, tokenize=False,
                **self.kwargs(),
            )
        except Exception as exc:  # noqa: BLE001 - jinja and transformers raise many types
            raise _render_error(exc) from None
        if not isinstance(text, str):
            raise ChatTemplateError(f"the chat template rendered {type(text).__name__}, not text; "
                                    f"set format.chat_template")
        return text


def _render_error(exc: Exception) -> ChatTemplateError:
    cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return ChatTemplateError(f"the chat template cannot render this conversation ({cause}); "
                             f"fix the messages or set format.chat_template")


def render_chat(
    tokenizer: Any,
    messages: Sequence[Message],
    *,
    add_generation_prompt: bool = False,
    tools: Sequence[Mapping[str, Any]] | None = None,
    chat_template: str | None = None,
    enable_thinking: bool | None = None,
) -> str:
    """Return the text of ``messages`` rendered by the chat template (``chat_template`` or the tokenizer's).

    ``enable_thinking`` is passed to the template only when not None. Raises
    :class:`ChatTemplateError` when there is no template or rendering fails.
    """
    chat = _Chat(tokenizer, template_of(tokenizer, chat_template), tools, enable_thinking)
    return chat.render(messages, add_generation_prompt)


def encode(tokenizer: Any, text: str) -> list[int]:
    """Return the token ids of rendered ``text`` (no special tokens added: the template wrote them)."""
    return [int(i) for i in tokenizer.encode(text, add_special_tokens=False)]


def _diverges(prefix: str, whole: str) -> str:
    at = next((i for i, (a, b) in enumerate(zip(prefix, whole, strict=False)) if a != b), min(len(prefix), len(whole)))
    return f"at character {at}: {prefix[at:at + 20]!r} vs {whole[at:at + 20]!r}"


def _prefix_tokens(tokenizer: Any, prefix: str, whole: str, whole_ids: list[int], *, what: str,
                   problem: str = "cannot mask assistant turns") -> int:
    """Return the token count of ``prefix``, checking it is a prefix of ``whole`` as text and as tokens."""
    if not whole.startswith(prefix):
        raise ChatTemplateError(
            f"the chat template {problem}: {what} is not a prefix of the whole "
            f"conversation ({_diverges(prefix, whole)}); {_FIX}"
        )
    ids = encode(tokenizer, prefix)
    if whole_ids[: len(ids)] != ids:
        raise ChatTemplateError(
            f"the chat template {problem}: the tokens of {what} are not a prefix of the "
            f"conversation's tokens (the tokenizer merges across the turn boundary); {_FIX}"
        )
    return len(ids)


def tokenize_prompt_response(
    tokenizer: Any,
    prompt: Sequence[Message],
    conversation: Sequence[Message],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    chat_template: str | None = None,
    enable_thinking: bool | None = None,
) -> TokenizedChat:
    """Return ``conversation`` tokenized, its prompt being ``prompt`` rendered with the generation prompt.

    Every token after the prompt is trained on (mask 1), as upstream's SFT
    (last turn) and DPO formatters do. Raises :class:`ChatTemplateError` when
    rendering fails, when the prompt's rendering (as text or tokens) is not a
    prefix of the conversation's, or when nothing follows the prompt.
    """
    chat = _Chat(tokenizer, template_of(tokenizer, chat_template), tools, enable_thinking)
    whole = chat.render(conversation)
    whole_ids = encode(tokenizer, whole)
    start = chat.render(prompt, add_generation_prompt=True)
    length = _prefix_tokens(tokenizer, start, whole, whole_ids, what="the prompt rendered with the generation prompt",
                            problem="cannot split the prompt from the response")
    if length == 0 or length >= len(whole_ids):
        raise ChatTemplateError(
            f"the prompt has {length} of the conversation's {len(whole_ids)} tokens; a sample needs both a prompt "
            f"and a response"
        )
    return TokenizedChat(whole_ids, length, [0] * length + [1] * (len(whole_ids) - length))


def _assistant_turns(messages: Sequence[Message], template: str) -> list[int]:
    turns = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if "<think>" in template:
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        if users:
            turns = [i for i in turns if i > users[-1]]
    return turns


def _generation_mask(chat: _Chat, messages: Sequence[Message]) -> tuple[list[int], list[int]]:
    """Return (token ids, assistant mask) from the tokenizer's ``{% generation %}`` support."""
    try:
        out = chat.tokenizer.apply_chat_template(
            [dict(m) for m in messages], tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
            add_generation_prompt=False, **chat.kwargs(),
        )
    except Exception as exc:  # noqa: BLE001 - jinja and transformers raise many types
        raise _render_error(exc) from None
    ids = [int(i) for i in out["input_ids"]]
    return ids, [int(bool(v)) for v in out["assistant_masks"]]


def tokenize_assistant_turns(
    tokenizer: Any,
    messages: Sequence[Message],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    chat_template: str | None = None,
    enable_thinking: bool | None = None,
) -> TokenizedChat:
    """Return the conversation tokenized with mask 1 on every assistant turn (upstream's concatenated multi-turn).

    A turn's tokens run from the end of the generation prompt to the end of
    what the template renders for it (for ChatML: the content, ``<|im_end|>``
    and the newline after it). The prompt is everything before the first
    masked token. Raises :class:`ChatTemplateError` when rendering fails, when
    a turn cannot be located (see the module docstring), or when there is no
    assistant turn or no prompt before the first one (the conversation opens
    with the assistant).
    """
    if not messages:
        raise ChatTemplateError("the conversation has no message; a sample needs messages")
    chat = _Chat(tokenizer, template_of(tokenizer, chat_template), tools, enable_thinking)
    if _GENERATION_TAG.search(chat.template):
        ids, mask = _generation_mask(chat, messages)
    else:
        whole = chat.render(messages)
        ids = encode(tokenizer, whole)
        mask = [0] * len(ids)
        for turn in _assistant_turns(messages, chat.template):
            before = chat.render(messages[:turn], add_generation_prompt=True) if turn else ""
            through = chat.render(messages[: turn + 1])
            start = _prefix_tokens(tokenizer, before, whole, ids, what=f"the conversation up to message {turn}")
            stop = _prefix_tokens(tokenizer, through, whole, ids, what=f"the conversation through message {turn}")
            mask[start:stop] = [1] * (stop - start)
    if 1 not in mask:
        raise ChatTemplateError("the conversation has no assistant turn to train on; add one, "
                                "or check the roles of its messages")
    prompt_length = mask.index(1)
    if prompt_length == 0:
        raise ChatTemplateError("the conversation starts with an assistant turn; a sample needs a prompt before it")
    return TokenizedChat(ids, prompt_length, mask)
