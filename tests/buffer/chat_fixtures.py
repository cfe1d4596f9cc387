"""The tiny model's real tokenizer (built once per test session) and chat templates the mask tests use."""

from __future__ import annotations

import functools
from typing import Any

from trinity.common.models.tiny import CHAT_TEMPLATE, build_tokenizer


@functools.cache
def tiny_tokenizer() -> Any:
    """The tiny model's tokenizer (byte-level BPE, ChatML template); built once (about a second)."""
    return build_tokenizer()


#: The tiny model's ChatML template (the tokenizer's own).
CHATML = CHAT_TEMPLATE

# Hugging Face renders templates with trim_blocks (a newline right after a block tag is dropped): the
# templates below put newlines before tags or inside expressions.

#: ChatML with tools, in the manner of Qwen2.5: tool schemas in the system turn, ``<tool_call>`` in the
#: assistant's turn, tool results as a user turn holding ``<tool_response>``.
CHATML_TOOLS = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content + '\\n\\n' }}{% endif %}"
    "# Tools\n<tools>{% for tool in tools %}{{ '\\n' + (tool | tojson) }}{% endfor %}{{ '\\n' }}</tools><|im_end|>\n"
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'user' %}<|im_start|>user\n{{ message.content }}<|im_end|>\n"
    "{% elif message.role == 'assistant' %}<|im_start|>assistant\n{{ message.content or '' }}"
    "{% for call in message.tool_calls or [] %}"
    "{{ '\\n<tool_call>\\n{\"name\": \"' + call.function.name + '\", \"arguments\": ' + call.function.arguments"
    " + '}\\n</tool_call>' }}"
    "{% endfor %}<|im_end|>\n"
    "{% elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n"
    "</tool_response><|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: ChatML that shows only the latest assistant turn, replacing earlier ones by ``...``: a prefix of the
#: conversation does not render as a prefix of the whole, so its assistant turns cannot be masked.
CHATML_HIDING_EARLIER_TURNS = (
    "{% set last = namespace(i=-1) %}"
    "{% for message in messages %}{% if message.role == 'assistant' %}{% set last.i = loop.index0 %}{% endif %}"
    "{% endfor %}"
    "{% for message in messages %}{{ '<|im_start|>' + message.role + '\\n' }}"
    "{% if message.role == 'assistant' and loop.index0 != last.i %}...{% else %}{{ message.content }}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: ChatML whose generation prompt ends inside a word the assistant's reply completes (``Wh`` + ``at ...``):
#: as text the prompt is a prefix, but the tokenizer merges ``What`` across the boundary.
CHATML_SPLIT_WORD = (
    "{% for message in messages %}{{ '<|im_start|>' + message.role + '\\n' }}"
    "{% if message.role == 'assistant' %}Wh{% endif %}{{ message.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\nWh{% endif %}"
)

#: ChatML with ``{% generation %}`` around what the assistant generates (content and ``<|im_end|>``).
CHATML_GENERATION = (
    "{% for message in messages %}{{ '<|im_start|>' + message.role + '\\n' }}"
    "{% if message.role == 'assistant' %}{% generation %}{{ message.content }}<|im_end|>{% endgeneration %}"
    "{{ '\\n' }}{% else %}{{ message.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: A Qwen3-like ChatML: ``<think>`` blocks are kept only after the last user message, and
#: ``enable_thinking=false`` writes an empty one into the generation prompt.
CHATML_THINK = (
    "{% set ns = namespace(last_user=-1) %}"
    "{% for message in messages %}{% if message.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}"
    "{% endfor %}"
    "{% for message in messages %}{{ '<|im_start|>' + message.role + '\\n' }}"
    "{% if message.role == 'assistant' and loop.index0 > ns.last_user %}"
    "{{ '<think>\\n' + (message.reasoning or '') + '\\n</think>\\n\\n' }}{% endif %}"
    "{{ message.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}"
    "{% endif %}"
)
