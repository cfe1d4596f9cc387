"""Assistant-token masks from chat templates, checked token by token with the tiny model's real tokenizer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.buffer.chat_fixtures import (
    CHATML,
    CHATML_GENERATION,
    CHATML_HIDING_EARLIER_TURNS,
    CHATML_SPLIT_WORD,
    CHATML_THINK,
    CHATML_TOOLS,
    tiny_tokenizer,
)
from trinity.buffer.chat_masks import (
    ChatTemplateError,
    encode,
    render_chat,
    tokenize_assistant_turns,
    tokenize_prompt_response,
)

TWO_TURNS = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "What is 3 plus 4?"},
    {"role": "assistant", "content": "7"},
    {"role": "user", "content": "and 5 plus 5?"},
    {"role": "assistant", "content": "10"},
]


def expected(segments: list[tuple[str, int]]) -> tuple[list[int], list[int]]:
    """Token ids and mask of hand-written text segments, each tokenized on its own with its mask flag."""
    ids: list[int] = []
    mask: list[int] = []
    for text, flag in segments:
        part = encode(tiny_tokenizer(), text)
        ids += part
        mask += [flag] * len(part)
    return ids, mask


def masked_spans(ids: list[int], mask: list[int]) -> list[str]:
    """Decode each run of masked tokens."""
    spans, run = [], []
    for token, flag in zip(ids, mask, strict=True):
        if flag:
            run.append(token)
        elif run:
            spans.append(tiny_tokenizer().decode(run))
            run = []
    if run:
        spans.append(tiny_tokenizer().decode(run))
    return spans


def test_chatml_masks_every_assistant_turn_token_by_token() -> None:
    chat = tokenize_assistant_turns(tiny_tokenizer(), TWO_TURNS)
    ids, mask = expected([
        ("<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nWhat is 3 plus 4?<|im_end|>\n"
         "<|im_start|>assistant\n", 0),
        ("7<|im_end|>\n", 1),
        ("<|im_start|>user\nand 5 plus 5?<|im_end|>\n<|im_start|>assistant\n", 0),
        ("10<|im_end|>\n", 1),
    ])
    assert chat.token_ids == ids
    assert chat.mask == mask
    assert chat.prompt_length == mask.index(1)
    assert chat.response_mask == mask[chat.prompt_length :]
    assert masked_spans(chat.token_ids, chat.mask) == ["7<|im_end|>\n", "10<|im_end|>\n"]


def test_explicit_chat_template_overrides_the_tokenizers() -> None:
    upper = CHATML.replace("message['content']", "message['content'] | upper")
    chat = tokenize_assistant_turns(tiny_tokenizer(), TWO_TURNS, chat_template=upper)
    assert masked_spans(chat.token_ids, chat.mask) == ["7<|im_end|>\n", "10<|im_end|>\n"]
    assert "BE BRIEF" in tiny_tokenizer().decode(chat.token_ids[: chat.prompt_length])


def tool_chat() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    tool = {"type": "function", "function": {"name": "calculator", "description": "Give a plus b.",
                                             "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}}
    call = {"id": "c0", "type": "function", "function": {"name": "calculator", "arguments": '{"a": 3, "b": 4}'}}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Use the tool."},
        {"role": "user", "content": "What is 3 plus 4?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c0", "content": '{"result": 7}'},
        {"role": "assistant", "content": "The answer is 7."},
    ]
    return messages, [tool]


def test_tool_calls_are_masked_in_and_tool_results_out() -> None:
    messages, tools = tool_chat()
    chat = tokenize_assistant_turns(tiny_tokenizer(), messages, tools=tools, chat_template=CHATML_TOOLS)
    ids, mask = expected([
        ("<|im_start|>system\nUse the tool.\n\n# Tools\n<tools>\n" + json.dumps(tools[0]) + "\n</tools><|im_end|>\n"
         "<|im_start|>user\nWhat is 3 plus 4?<|im_end|>\n<|im_start|>assistant\n", 0),
        ('\n<tool_call>\n{"name": "calculator", "arguments": {"a": 3, "b": 4}}\n</tool_call><|im_end|>\n', 1),
        ('<|im_start|>user\n<tool_response>\n{"result": 7}\n</tool_response><|im_end|>\n<|im_start|>assistant\n', 0),
        ("The answer is 7.<|im_end|>\n", 1),
    ])
    assert chat.token_ids == ids
    assert chat.mask == mask


def test_tools_reach_the_template() -> None:
    messages, tools = tool_chat()
    with_tools = render_chat(tiny_tokenizer(), messages, tools=tools, chat_template=CHATML_TOOLS)
    without = render_chat(tiny_tokenizer(), messages, chat_template=CHATML_TOOLS)
    assert '"name": "calculator"' in with_tools.split("<|im_end|>")[0]
    assert "# Tools" not in without


def test_a_template_that_rewrites_earlier_turns_cannot_be_masked() -> None:
    with pytest.raises(ChatTemplateError) as caught:
        tokenize_assistant_turns(tiny_tokenizer(), TWO_TURNS, chat_template=CHATML_HIDING_EARLIER_TURNS)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        "the chat template cannot mask assistant turns: the conversation through message 2 is not a prefix of the "
        "whole conversation (at character "
    )
    assert "'7<|im_end|>" in message and "'...<|im_end|>" in message
    assert message.endswith(
        "; set format.chat_template (or model.custom_chat_template) to a template that renders earlier turns unchanged"
    )


def test_a_token_merged_across_the_turn_boundary_is_refused() -> None:
    tokenizer = tiny_tokenizer()
    assert encode(tokenizer, "What") != encode(tokenizer, "Wh") + encode(tokenizer, "at")  # the premise
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "at is 7"}]
    with pytest.raises(ChatTemplateError, match=r"the tokens of the conversation up to message 1 are not a prefix of "
                                                r"the conversation's tokens \(the tokenizer merges across the turn "
                                                r"boundary\)"):
        tokenize_assistant_turns(tokenizer, messages, chat_template=CHATML_SPLIT_WORD)


def test_generation_blocks_use_the_tokenizers_assistant_mask() -> None:
    chat = tokenize_assistant_turns(tiny_tokenizer(), TWO_TURNS, chat_template=CHATML_GENERATION)
    ids, mask = expected([
        ("<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nWhat is 3 plus 4?<|im_end|>\n"
         "<|im_start|>assistant\n", 0),
        ("7<|im_end|>", 1),
        ("\n<|im_start|>user\nand 5 plus 5?<|im_end|>\n<|im_start|>assistant\n", 0),
        ("10<|im_end|>", 1),
        ("\n", 0),
    ])
    assert chat.token_ids == ids
    assert chat.mask == mask


def test_think_templates_mask_only_turns_after_the_last_user_message() -> None:
    chat = tokenize_assistant_turns(tiny_tokenizer(), TWO_TURNS, chat_template=CHATML_THINK)
    assert masked_spans(chat.token_ids, chat.mask) == ["<think>\n\n</think>\n\n10<|im_end|>\n"]
    assert tiny_tokenizer().decode(chat.token_ids[: chat.prompt_length]).endswith(
        "<|im_start|>user\nand 5 plus 5?<|im_end|>\n<|im_start|>assistant\n")


def test_enable_thinking_is_passed_only_when_set() -> None:
    prompt = [{"role": "user", "content": "hi"}]
    plain = render_chat(tiny_tokenizer(), prompt, add_generation_prompt=True, chat_template=CHATML_THINK)
    off = render_chat(tiny_tokenizer(), prompt, add_generation_prompt=True, chat_template=CHATML_THINK,
                      enable_thinking=False)
    on = render_chat(tiny_tokenizer(), prompt, add_generation_prompt=True, chat_template=CHATML_THINK,
                     enable_thinking=True)
    assert plain == on == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert off == plain + "<think>\n\n</think>\n\n"


def test_prompt_and_response_split() -> None:
    prompt = [{"role": "user", "content": "What is 1 plus 1?"}]
    chat = tokenize_prompt_response(tiny_tokenizer(), prompt, [*prompt, {"role": "assistant", "content": "2"}])
    ids, mask = expected([("<|im_start|>user\nWhat is 1 plus 1?<|im_end|>\n<|im_start|>assistant\n", 0),
                          ("2<|im_end|>\n", 1)])
    assert (chat.token_ids, chat.mask) == (ids, mask)
    assert chat.prompt_length == mask.index(1)


def test_a_prompt_rendered_differently_from_the_conversation_is_refused() -> None:
    prompt = [{"role": "user", "content": "hi"}]
    with pytest.raises(ChatTemplateError, match=r"^the chat template cannot split the prompt from the response: the "
                                                r"prompt rendered with the generation prompt is not a prefix"):
        tokenize_prompt_response(tiny_tokenizer(), prompt, [*prompt, {"role": "assistant", "content": "yes"}],
                                 chat_template=CHATML_HIDING_EARLIER_TURNS.replace("<|im_start|>assistant\n{% endif",
                                                                                   "<|im_start|>bot\n{% endif"))


def test_conversations_without_an_assistant_turn_or_prompt_are_refused() -> None:
    with pytest.raises(ChatTemplateError, match=r"^the conversation has no assistant turn to train on; add one"):
        tokenize_assistant_turns(tiny_tokenizer(), [{"role": "user", "content": "hi"}])
    with pytest.raises(ChatTemplateError, match=r"^the conversation has no message"):
        tokenize_assistant_turns(tiny_tokenizer(), [])
    contents_only = "{% for message in messages %}{{ message.content }}{% endfor %}"  # no generation prompt
    with pytest.raises(ChatTemplateError, match=r"^the prompt has 1 of the conversation's 1 tokens; a sample needs "
                                                r"both a prompt and a response$"):
        tokenize_prompt_response(tiny_tokenizer(), [{"role": "user", "content": "a"}],
                                 [{"role": "user", "content": "a"}], chat_template=contents_only)
    with pytest.raises(ChatTemplateError, match=r"^the conversation starts with an assistant turn; a sample needs a "
                                                r"prompt before it$"):
        tokenize_assistant_turns(tiny_tokenizer(), [{"role": "assistant", "content": "yes"}])


def test_missing_or_failing_templates_are_one_line_errors() -> None:
    tokenizer = tiny_tokenizer()
    saved = tokenizer.chat_template
    tokenizer.chat_template = None
    try:
        with pytest.raises(ChatTemplateError, match=r"^the tokenizer has no chat template; set format.chat_template "
                                                    r"\(or model.custom_chat_template\)$"):
            tokenize_assistant_turns(tokenizer, TWO_TURNS)
    finally:
        tokenizer.chat_template = saved
    failing = "{{ raise_exception('roles must alternate\nuser/assistant') }}"
    with pytest.raises(ChatTemplateError) as caught:
        render_chat(tokenizer, TWO_TURNS, chat_template=failing)
    assert str(caught.value) == ("the chat template cannot render this conversation (roles must alternate); "
                                 "fix the messages or set format.chat_template")
