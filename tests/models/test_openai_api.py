"""The hf engine's OpenAI-compatible API, driven by the real ``openai`` client over HTTP.

The engine runs in this process (its server in a thread, on a free loopback
port). Tool calls come from a copy of the tiny model taught to write them
(tests/models/teach.py), so the parser sees real generated text.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.models.teach import teach_replies
from trinity.common.models.client import EngineClient
from trinity.common.models.hf_engine import HFEngine
from trinity.common.workflows.history import episode_experiences

TOOLS = [{"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
}}]
QUESTION = [{"role": "user", "content": "What is 2 plus 3?"}]
CALL_TEXT = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2 + 3"}}\n</tool_call>'
AFTER_CALL = [*QUESTION, {"role": "assistant", "content": "", "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "2 + 3"}'}}
]}, {"role": "tool", "tool_call_id": "call_1", "content": "5"}]


def api_options(path: Path, **changes: Any) -> dict[str, Any]:
    return {"host": "127.0.0.1", "port": 0, "model_names": [str(path), "rollout"], "max_prompt_tokens": 1024,
            "context_length": 2048, "default_max_tokens": 24, "auto_tool_choice": True,
            "tool_call_parser": "hermes", "log_requests": False, "history": True, **changes}


@pytest.fixture(scope="module")
def taught(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return teach_replies(tiny_model, tmp_path_factory.getbasetemp() / "tiny-tool-caller",
                         [(QUESTION, CALL_TEXT), (AFTER_CALL, "The answer is 5.")], tools=TOOLS)


@pytest.fixture(scope="module")
def engine(taught: Path) -> Iterator[HFEngine]:
    served = HFEngine(str(taught), max_batch_size=16, torch_threads=1, max_prompt_tokens=1024,
                      openai_api=api_options(taught))
    yield served
    served.shutdown()


@pytest.fixture
def client(engine: HFEngine) -> EngineClient:
    return EngineClient(engine).bind(None)


def post(url: str, body: Any, raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def recompute_logprobs(model_dir: Path, prompt: list[int], response: list[int], temperature: float) -> torch.Tensor:
    """What a trainer computes: one forward over prompt + response, log-softmax of the logits / T, gathered."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1]
    scaled = torch.log_softmax(logits / (temperature if temperature > 0 else 1.0), dim=-1)
    return scaled.gather(1, torch.tensor(response).view(-1, 1)).squeeze(1)


def test_chat_completions_are_recorded_with_the_tokens_and_logprobs_a_trainer_recomputes(
        client: EngineClient, engine: HFEngine, taught: Path) -> None:
    openai_client = client.get_openai_client()
    messages = [{"role": "user", "content": "say yes or no"}]
    response = openai_client.chat.completions.create(
        model=openai_client.model_path, messages=messages, n=3, temperature=0.8, top_p=0.95, max_tokens=10,
        logprobs=True, seed=11)
    assert [c.index for c in response.choices] == [0, 1, 2]
    prompt = engine.chat_prompt_tokens(messages)
    assert response.model_extra["prompt_token_ids"] == prompt
    assert response.usage.prompt_tokens == len(prompt)
    records = client.history()
    assert len(records) == 3 and client.history() == []  # taken once
    for choice, record in zip(response.choices, records, strict=True):
        ids = choice.model_extra["token_ids"]
        assert record.prompt_tokens.tolist() == prompt and record.response_tokens.tolist() == ids
        sent = [entry.logprob for entry in choice.logprobs.content]
        assert torch.allclose(record.logprobs, torch.tensor(sent), atol=1e-6)
        assert response.usage.completion_tokens >= len(ids)
        recomputed = recompute_logprobs(taught, prompt, ids, 0.8)
        assert torch.allclose(record.logprobs, recomputed, atol=1e-4), (record.logprobs, recomputed)
        assert choice.finish_reason == record.finish_reason in ("stop", "length")
        assert record.model_version == engine.model_version()


def test_a_tool_call_is_parsed_and_the_two_turns_join_into_one_episode(client: EngineClient) -> None:
    openai_client = client.get_openai_client()
    first = openai_client.chat.completions.create(model="rollout", messages=QUESTION, tools=TOOLS,
                                                  temperature=0, max_tokens=80)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.function.name == "calculator" and json.loads(call.function.arguments) == {"expression": "2 + 3"}
    second = openai_client.chat.completions.create(
        model="rollout", tools=TOOLS, temperature=0, max_tokens=80,
        messages=[*QUESTION, choice.message.model_dump(exclude_none=True),
                  {"role": "tool", "tool_call_id": call.id, "content": "5"}])
    assert second.choices[0].message.content == "The answer is 5."
    records = client.history()
    assert [r.finish_reason for r in records] == ["tool_calls", "stop"]
    assert records[0].tool_calls[0]["function"]["name"] == "calculator" and records[0].tool_call_error is None
    (episode,) = episode_experiences(records)
    assert episode.info["turns"] == 2
    tokens, start = episode.tokens, episode.prompt_length
    assert torch.equal(tokens[: start], records[0].prompt_tokens)
    assert torch.equal(tokens[-len(records[1].response_tokens):], records[1].response_tokens)
    mask, logprobs = episode.action_mask, episode.logprobs
    assert mask is not None and logprobs is not None
    first_reply = len(records[0].response_tokens)
    glue = len(records[1].prompt_tokens) - len(records[0].prompt_tokens) - first_reply
    assert glue > 0  # the tool's answer and the template between the replies
    assert mask.tolist() == [True] * first_reply + [False] * glue + [True] * len(records[1].response_tokens)
    assert torch.equal(logprobs[mask], torch.cat([records[0].logprobs, records[1].logprobs]))
    assert not logprobs[~mask].any()


def test_tool_choice_required_is_answered_as_auto(client: EngineClient) -> None:
    """AgentScope asks for structured answers with ``required``: the call is parsed (nothing forces one)."""
    reply = client.get_openai_client().chat.completions.create(
        model="rollout", messages=QUESTION, tools=TOOLS, tool_choice="required", temperature=0, max_tokens=80)
    (call,) = reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "tool_calls" and call.function.name == "calculator"
    client.drop_history()


def test_a_reply_that_is_not_a_readable_tool_call_comes_back_as_text_and_is_flagged(
        client: EngineClient, engine: HFEngine) -> None:
    prompt = engine.chat_prompt_tokens(QUESTION, tools=TOOLS)
    status, body = post(f"{client.openai_api()['url']}/v1/completions",
                        {"model": "rollout", "prompt": prompt, "max_tokens": 12, "temperature": 0})
    assert status == 200 and body["choices"][0]["text"].startswith("<tool_call>")  # cut short: not JSON yet
    from trinity.common.models.openai_api.tool_calls import parse_hermes

    parsed = parse_hermes(body["choices"][0]["text"])
    assert parsed.tool_calls == [] and parsed.error is not None and "not JSON" in parsed.error
    openai_client = client.get_openai_client()
    response = openai_client.chat.completions.create(model="rollout", messages=QUESTION, tools=TOOLS,
                                                     temperature=0, max_tokens=12)
    choice = response.choices[0]
    assert choice.finish_reason == "length" and choice.message.tool_calls is None
    assert choice.message.content == body["choices"][0]["text"]
    assert "not JSON" in choice.model_extra["tool_call_error"]
    (experience,) = client.extract_experience_from_history()
    assert experience.info["tool_call_error"] == choice.model_extra["tool_call_error"]
    assert experience.action_mask is not None and bool(experience.action_mask.all())


def test_streaming_sends_what_the_plain_response_holds(client: EngineClient) -> None:
    openai_client = client.get_openai_client()
    kwargs: dict[str, Any] = {"model": "rollout", "messages": [{"role": "user", "content": "count to three"}],
                              "temperature": 1.0, "max_tokens": 16, "seed": 5, "logprobs": True}
    plain = openai_client.chat.completions.create(**kwargs)
    pieces, logprobs, finish, usage = [], [], None, None
    for chunk in openai_client.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                                       **kwargs):
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            if choice.logprobs is not None and choice.logprobs.content:
                logprobs += [entry.logprob for entry in choice.logprobs.content]
            finish = choice.finish_reason or finish
    assert "".join(pieces) == plain.choices[0].message.content
    assert logprobs == [entry.logprob for entry in plain.choices[0].logprobs.content]
    assert finish == plain.choices[0].finish_reason
    assert usage is not None and usage.completion_tokens == plain.usage.completion_tokens
    assert len(client.history()) == 2


def test_completions_take_token_ids_and_give_top_logprobs(client: EngineClient, engine: HFEngine) -> None:
    prompt = engine.tokenizer("What is 4 plus 4?", add_special_tokens=False)["input_ids"]
    status, body = post(f"{client.openai_api()['url']}/v1/completions",
                        {"model": "rollout", "prompt": [prompt, prompt], "max_tokens": 6, "temperature": 0,
                         "logprobs": 3})
    assert status == 200 and len(body["choices"]) == 2
    for choice in body["choices"]:
        assert choice["prompt_token_ids"] == prompt
        lp = choice["logprobs"]
        assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(choice["token_ids"])
        for sampled, top in zip(lp["token_logprobs"], lp["top_logprobs"], strict=True):
            assert len(top) == 3
            assert max(top.values()) == pytest.approx(sampled, abs=1e-5)  # greedy takes the likeliest token
    assert body["usage"]["prompt_tokens"] == 2 * len(prompt)


@pytest.mark.parametrize(("body", "status", "param", "needle"), [
    ({"model": "rollout"}, 400, "messages", "messages must be a non-empty list"),
    ({"model": "gpt-4", "messages": QUESTION}, 404, "model", "'gpt-4' is not served here"),
    ({"messages": QUESTION}, 400, "model", "model is required"),
    ({"model": "rollout", "messages": QUESTION, "temperature": 3}, 400, "temperature", "must be in [0, 2]"),
    ({"model": "rollout", "messages": QUESTION, "n": "2"}, 400, "n", "n must be an integer"),
    ({"model": "rollout", "messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role", "robot"),
    ({"model": "rollout", "messages": QUESTION, "tools": TOOLS,
      "tool_choice": {"type": "function", "function": {"name": "add"}}}, 400, "tool_choice", "cannot force a call"),
    ({"model": "rollout", "messages": QUESTION, "max_tokens": 5000}, 400, "max_tokens", "context length is 2048"),
    ({"model": "rollout", "messages": [{"role": "user", "content": "word " * 2000}]}, 400, "messages",
     "more than this engine's 1024 prompt tokens"),
    ({"model": "rollout", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
     "messages[0].content", "only text parts"),
])
def test_bad_requests_get_an_openai_error_object(client: EngineClient, body: dict[str, Any], status: int,
                                                 param: str, needle: str) -> None:
    got, answer = post(f"{client.openai_api()['url']}/v1/chat/completions", body)
    assert got == status
    error = answer["error"]
    assert error["param"] == param and needle in error["message"] and "Traceback" not in error["message"]
    assert error["type"] == "invalid_request_error"


def test_a_body_that_is_not_json_is_a_400(client: EngineClient) -> None:
    status, answer = post(f"{client.openai_api()['url']}/v1/chat/completions", None, raw=b"{not json")
    assert status == 400 and "not valid JSON" in answer["error"]["message"]


def test_models_lists_the_folder_and_the_group_name(client: EngineClient, taught: Path) -> None:
    models = client.get_openai_client().models.list()
    assert [m.id for m in models.data] == [str(taught), "rollout"]
    assert {(m.model_extra["model_version"], m.model_extra["weights"]) for m in models.data} == {
        (0, f"the model folder {taught}")}


def test_models_and_health_name_the_weights_served(client: EngineClient, engine: HFEngine) -> None:
    version = engine.model_version()
    what = "checkpoint step-6 (/runs/r/checkpoints/step-6)"
    engine.mark_served_weights(version, what)
    try:
        models = client.get_openai_client().models.list()
        assert {m.model_extra["weights"] for m in models.data} == {what}
        with urllib.request.urlopen(f"{client.openai_api()['url']}/health", timeout=10) as response:
            health = json.loads(response.read())
        assert (health["model_version"], health["weights"]) == (version, what)
        engine.mark_served_weights(version + 1, "a description of other weights")  # not the version loaded
        (first, _) = client.get_openai_client().models.list().data
        assert first.model_extra["weights"] == f"the model folder {engine.model_path}"
    finally:
        engine._served_weights = None


def test_forks_record_apart_and_dropping_the_client_drops_them_all(engine: HFEngine) -> None:
    client = EngineClient(engine).bind(None)
    forks = [client.fork() for _ in range(3)]
    for number, fork in enumerate(forks):
        fork.get_openai_client().chat.completions.create(
            model="rollout", messages=[{"role": "user", "content": f"say {number}"}], max_tokens=2, n=number + 1)
    assert [len(engine.take_history(f.session, clear=False)[0]) for f in forks] == [1, 2, 3]
    client.drop_history()  # what the scheduler does when an attempt ends
    assert [engine.take_history(f.session)[0] for f in forks] == [[], [], []]


def test_without_history_nothing_is_recorded_and_shutdown_frees_the_port(tiny_model: Path) -> None:
    engine = HFEngine(str(tiny_model), torch_threads=1, openai_api=api_options(tiny_model, history=False))
    client = EngineClient(engine).bind(None)
    openai_client = client.get_openai_client()
    assert "X-Trinity-Session" not in openai_client.default_headers
    openai_client.chat.completions.create(model="rollout", messages=QUESTION, max_tokens=3)
    with pytest.raises(RuntimeError, match="enable_history: true"):
        client.history()
    port = int(client.openai_api()["url"].rsplit(":", 1)[1])
    engine.shutdown()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    with socket.socket() as again:  # a new server can take the port (connections of the old one may linger)
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
        again.listen(1)
