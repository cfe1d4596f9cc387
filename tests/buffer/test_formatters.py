"""Records to tasks and SFT/DPO experiences (upstream's formatter semantics), with the tiny model's tokenizer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.buffer.chat_fixtures import CHATML_HIDING_EARLIER_TURNS, CHATML_TOOLS, tiny_tokenizer
from trinity.buffer.chat_masks import encode
from trinity.buffer.datasets import load_split
from trinity.buffer.formatters import FormatError, format_dpo, format_records, format_sft, format_task
from trinity.buffer.record_keys import required_keys
from trinity.common.config.schema.buffer import FormatConfig
from trinity.common.experience import Experience

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "data"
CONVERSATION = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "What is 3 plus 4?"},
    {"role": "assistant", "content": "7"},
    {"role": "user", "content": "and 5 plus 5?"},
    {"role": "assistant", "content": "10"},
]


def decode(ids: Any) -> str:
    return str(tiny_tokenizer().decode(list(ids)))


def prompt_and_response(exp: Experience) -> tuple[str, str]:
    return decode(exp.tokens[: exp.prompt_length]), decode(exp.tokens[exp.prompt_length :])


# ---- tasks


def test_task_fields_follow_the_format_keys() -> None:
    fmt = FormatConfig(prompt_key="question", response_key="answer", system_prompt="Think.", reply_prefix="So,",
                       workflow_key="wf", reward_fn_key="rf")
    row = {"question": "What is 1 plus 1?", "answer": "#### 2", "wf": "math", "rf": ""}
    task = format_task(row, fmt, index=3, name="gsm")
    assert task == {
        "prompt": "What is 1 plus 1?",
        "answer": "#### 2",
        "system_prompt": "Think.",
        "reply_prefix": "So,",
        "messages": [{"role": "system", "content": "Think."}, {"role": "user", "content": "What is 1 plus 1?"},
                     {"role": "assistant", "content": "So,"}],
        "workflow": "math",
        "reward_fn": None,  # empty value: the task set's default, as upstream
        "raw": row,
        "index": 3,
    }


def test_task_system_prompt_key_wins_over_system_prompt() -> None:
    fmt = FormatConfig(system_prompt_key="sys", system_prompt="default")
    task = format_task({"prompt": "p", "response": "r", "sys": "per record"}, fmt, index=0, name="t")
    assert task["system_prompt"] == "per record"
    assert task["messages"][0] == {"role": "system", "content": "per record"}
    assert format_task({"prompt": "p", "response": "r"}, FormatConfig(), index=0, name="t")["messages"] == [
        {"role": "user", "content": "p"}]


def test_task_missing_keys_are_one_line_errors() -> None:
    fmt = FormatConfig(prompt_key="question", response_key="answer")
    with pytest.raises(FormatError) as caught:
        format_task({"problem": "x", "answer": "1"}, fmt, index=5, name="gsm8k")
    assert str(caught.value) == ("gsm8k: record 5 has no key 'question' (format.prompt_key); its keys: problem, "
                                 "answer; set format.prompt_key to the key that holds it, or fix the data")
    with pytest.raises(FormatError, match=r"^gsm8k: record 0 has no key 'answer' \(format.response_key\)"):
        format_task({"question": "x"}, fmt, index=0, name="gsm8k")
    assert format_task({"question": "x"}, fmt, index=0, name="gsm8k", require_response=False)["answer"] is None


# ---- SFT


def test_sft_messages_train_on_the_last_assistant_message() -> None:
    exp = format_sft({"messages": CONVERSATION}, FormatConfig(messages_key="messages"), tiny_tokenizer())
    prompt, response = prompt_and_response(exp)
    assert prompt == ("<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nWhat is 3 plus 4?<|im_end|>\n"
                      "<|im_start|>assistant\n7<|im_end|>\n<|im_start|>user\nand 5 plus 5?<|im_end|>\n"
                      "<|im_start|>assistant\n")
    assert response == "10<|im_end|>\n"
    assert exp.action_mask is not None and exp.action_mask.all()
    assert exp.prompt_length == len(encode(tiny_tokenizer(), prompt))


def test_sft_concatenated_multi_turn_trains_on_every_assistant_turn() -> None:
    fmt = FormatConfig(messages_key="messages", enable_concatenated_multi_turn=True)
    exp = format_sft({"messages": json.dumps(CONVERSATION)}, fmt, tiny_tokenizer())  # JSON string, as upstream
    prompt, response = prompt_and_response(exp)
    assert prompt.endswith("What is 3 plus 4?<|im_end|>\n<|im_start|>assistant\n")
    assert response == "7<|im_end|>\n<|im_start|>user\nand 5 plus 5?<|im_end|>\n<|im_start|>assistant\n10<|im_end|>\n"
    assert exp.action_mask is not None
    trained = [int(t) for t, m in zip(exp.response_tokens, exp.action_mask, strict=True) if m]
    assert decode(trained) == "7<|im_end|>\n10<|im_end|>\n"
    assert not exp.action_mask.all()


def test_sft_messages_must_end_with_the_assistant_unless_concatenated() -> None:
    with pytest.raises(FormatError) as caught:
        format_sft({"message": CONVERSATION[:4]}, FormatConfig(), tiny_tokenizer(), index=2, name="chat")
    assert str(caught.value) == (
        "chat: record 2: the last message is 'user' message, not the assistant's; SFT trains on the last assistant "
        "message: end the conversation with one, or set format.enable_concatenated_multi_turn to train on every "
        "assistant turn")
    exp = format_sft({"message": CONVERSATION[:4]}, FormatConfig(enable_concatenated_multi_turn=True),
                     tiny_tokenizer())
    assert decode(exp.response_tokens).startswith("7<|im_end|>\n")


def test_sft_plaintext_builds_system_user_assistant() -> None:
    fmt = FormatConfig(prompt_type="plaintext", system_prompt_key="sys", system_prompt="ignored")
    exp = format_sft({"sys": "be brief", "prompt": "What is 2 plus 2?", "response": "4"}, fmt, tiny_tokenizer())
    assert prompt_and_response(exp) == (
        "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nWhat is 2 plus 2?<|im_end|>\n"
        "<|im_start|>assistant\n", "4<|im_end|>\n")
    fmt = FormatConfig(prompt_type="plaintext", system_prompt="be brief")
    exp2 = format_sft({"prompt": "What is 2 plus 2?", "response": "4"}, fmt, tiny_tokenizer())
    assert exp2.tokens.tolist() == exp.tokens.tolist()


def test_sft_with_tools_renders_them_and_masks_tool_calls() -> None:
    tools = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}]
    call = {"id": "c", "type": "function", "function": {"name": "calculator", "arguments": '{"a": 3}'}}
    messages = [{"role": "user", "content": "What is 3 plus 4?"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "content": "7", "tool_call_id": "c"},
                {"role": "assistant", "content": "7", "tool_calls": None}]  # None: Arrow's schema alignment
    fmt = FormatConfig(messages_key="messages", enable_concatenated_multi_turn=True, chat_template=CHATML_TOOLS)
    exp = format_sft({"messages": messages, "tools": json.dumps(tools)}, fmt, tiny_tokenizer())
    prompt, _ = prompt_and_response(exp)
    assert '# Tools\n<tools>\n{"type": "function"' in prompt
    assert exp.action_mask is not None
    trained = [int(t) for t, m in zip(exp.response_tokens, exp.action_mask, strict=True) if m]
    assert decode(trained) == ('\n<tool_call>\n{"name": "calculator", "arguments": {"a": 3}}\n</tool_call>'
                               "<|im_end|>\n7<|im_end|>\n")


def test_format_chat_template_wins_over_the_model_template() -> None:
    row = {"message": CONVERSATION}
    fmt = FormatConfig(enable_concatenated_multi_turn=True)
    with pytest.raises(FormatError, match="the chat template cannot mask assistant turns"):
        format_sft(row, fmt, tiny_tokenizer(), chat_template=CHATML_HIDING_EARLIER_TURNS)
    fmt.chat_template = tiny_tokenizer().chat_template
    exp = format_sft(row, fmt, tiny_tokenizer(), chat_template=CHATML_HIDING_EARLIER_TURNS)
    assert "7<|im_end|>" in decode(exp.tokens)


def test_a_template_that_cannot_mask_is_reported_with_the_record() -> None:
    fmt = FormatConfig(enable_concatenated_multi_turn=True, chat_template=CHATML_HIDING_EARLIER_TURNS)
    with pytest.raises(FormatError) as caught:
        format_sft({"message": CONVERSATION}, fmt, tiny_tokenizer(), index=7, name="chat")
    assert str(caught.value).startswith("chat: record 7: the chat template cannot mask assistant turns: ")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("value", "expected"), [
    ("[{not json", "chat: record 0: 'message' (format.messages_key) is a string but not JSON (Expecting property "
                   "name enclosed in double quotes at column 3); store a list of messages or its JSON"),
    ({"role": "user"}, "chat: record 0: 'message' (format.messages_key) holds dict, not a list of messages with a "
                       "'role'; fix the data or set format.messages_key"),
])
def test_malformed_messages(value: Any, expected: str) -> None:
    with pytest.raises(FormatError) as caught:
        format_sft({"message": value}, FormatConfig(), tiny_tokenizer(), name="chat")
    assert str(caught.value) == expected


def test_malformed_tools() -> None:
    with pytest.raises(FormatError, match=r"^chat: record 0: 'tools' \(format.tools_key\) is not valid JSON"):
        format_sft({"message": CONVERSATION, "tools": "{"}, FormatConfig(), tiny_tokenizer(), name="chat")


# ---- DPO


def test_dpo_plaintext_pairs_share_the_prompt() -> None:
    fmt = FormatConfig(prompt_type="plaintext", system_prompt="be brief")
    exp = format_dpo({"prompt": "What is 2 plus 2?", "chosen": "4", "rejected": "5"}, fmt, tiny_tokenizer())
    assert exp.rejected_tokens is not None
    prompt = ("<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nWhat is 2 plus 2?<|im_end|>\n"
              "<|im_start|>assistant\n")
    assert prompt_and_response(exp) == (prompt, "4<|im_end|>\n")
    assert decode(exp.rejected_tokens[: exp.prompt_length]) == prompt
    assert decode(exp.rejected_tokens[exp.prompt_length :]) == "5<|im_end|>\n"
    assert exp.action_mask is not None and exp.action_mask.all()


def test_dpo_messages() -> None:
    row = {"messages": [{"role": "user", "content": "say yes"}],
           "chosen": [{"role": "assistant", "content": "yes"}],
           "rejected": json.dumps([{"role": "assistant", "content": "no"}])}
    exp = format_dpo(row, FormatConfig(messages_key="messages"), tiny_tokenizer())
    assert exp.rejected_tokens is not None
    assert prompt_and_response(exp) == ("<|im_start|>user\nsay yes<|im_end|>\n<|im_start|>assistant\n",
                                        "yes<|im_end|>\n")
    assert decode(exp.rejected_tokens[exp.prompt_length :]) == "no<|im_end|>\n"


def test_dpo_missing_key() -> None:
    with pytest.raises(FormatError) as caught:
        format_dpo({"prompt": "p", "chosen": "c"}, FormatConfig(prompt_type="plaintext"), tiny_tokenizer(),
                   index=1, name="prefs")
    assert str(caught.value) == ("prefs: record 1 has no key 'rejected' (format.rejected_key); its keys: prompt, "
                                 "chosen; set format.rejected_key to the key that holds it, or fix the data")


# ---- the repository's example data sets


@pytest.mark.parametrize(("folder", "schema", "fmt"), [
    ("sft/messages", "sft", FormatConfig(messages_key="messages")),
    ("sft/messages", "sft", FormatConfig(messages_key="messages", enable_concatenated_multi_turn=True)),
    ("sft/tools", "sft", FormatConfig(messages_key="messages", enable_concatenated_multi_turn=True,
                                      chat_template=CHATML_TOOLS)),
    ("sft/plaintext", "sft", FormatConfig(prompt_type="plaintext")),
    ("dpo/plaintext", "dpo", FormatConfig(prompt_type="plaintext")),
    ("dpo/messages", "dpo", FormatConfig(messages_key="messages")),
])
def test_example_data_sets_format(folder: str, schema: str, fmt: FormatConfig, tmp_path: Path) -> None:
    rows = list(load_split(folder, str(EXAMPLES / folder), cache_dir=str(tmp_path)))
    assert 6 <= len(rows) <= 40
    assert set(required_keys(fmt, schema).values()) <= set(rows[0])
    experiences = format_records(rows, schema, fmt, tiny_tokenizer(), name=folder)
    assert len(experiences) == len(rows)
    longest = max(len(e.tokens) for e in experiences)
    assert longest <= (512 if folder == "sft/tools" else 128)  # compact with the tiny tokenizer (tools: JSON schema)
    for exp in experiences:
        assert exp.action_mask is not None and exp.action_mask.any()
        if schema == "dpo":
            assert exp.rejected_tokens is not None
            assert exp.rejected_tokens[: exp.prompt_length].tolist() == exp.tokens[: exp.prompt_length].tolist()


def test_example_tool_conversations_train_on_their_tool_calls(tmp_path: Path) -> None:
    rows = list(load_split("tools", str(EXAMPLES / "sft" / "tools"), cache_dir=str(tmp_path)))
    fmt = FormatConfig(messages_key="messages", enable_concatenated_multi_turn=True, chat_template=CHATML_TOOLS)
    exp = format_sft(rows[0], fmt, tiny_tokenizer())
    assert exp.action_mask is not None
    trained = decode([int(t) for t, m in zip(exp.response_tokens, exp.action_mask, strict=True) if m])
    assert trained.startswith('\n<tool_call>\n{"name": "calculator"')
    assert "<tool_response>" not in trained and "<tool_response>" in decode(exp.response_tokens)


def test_example_math_answers_are_gsm8k_style(tmp_path: Path) -> None:
    fmt = FormatConfig(prompt_key="question", response_key="answer")
    for split, count in (("train", 32), ("test", 8)):
        rows = load_split("math", str(EXAMPLES / "math"), split, cache_dir=str(tmp_path))
        assert len(rows) == count
        for index, row in enumerate(rows):
            task = format_task(row, fmt, index=index, name="math")
            final = task["answer"].rsplit("####", 1)[1].strip()
            assert final.isdigit() and final in task["answer"].split("\n")[0]
