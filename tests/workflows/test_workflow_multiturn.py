"""Multi-turn rollouts: token layout and masks against the chat template, the guess game, the tiny model."""

from __future__ import annotations

import re

import pytest
import torch

from tests.workflows.scripted import ScriptedEngine, cycling
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import HFEngine
from trinity.common.workflows import (
    Environment,
    EnvStep,
    GuessNumberEnv,
    GuessNumberWorkflow,
    MultiTurnWorkflow,
    Task,
    WorkflowError,
    env_token_ids,
)


def bisecting_player(prompt: str) -> str:
    """Play the guessing game perfectly from the transcript in ``prompt`` (1..16)."""
    low, high = 1, 16
    turns = re.findall(r"<\|im_start\|>assistant\n(\d+)<\|im_end\|>\n<\|im_start\|>user\n(Higher|Lower)", prompt)
    for guess, hint in turns:
        if hint == "Higher":
            low = int(guess) + 1
        else:
            high = int(guess) - 1
    return str((low + high) // 2)


def test_tokens_are_the_rendered_conversation_with_replies_masked(shared_engine: HFEngine) -> None:
    tok = shared_engine.tokenizer
    engine = ScriptedEngine(tok, bisecting_player, version=2)
    task = Task(prompt="", answer=11, repeat_times=2, workflow="guess_number", index=3)
    experiences = GuessNumberWorkflow(max_turns=6).run(engine, task)
    assert len(experiences) == 2 and [e.run_id for e in experiences] == [0, 1]
    # 8 -> Higher, 12 -> Lower, 10 -> Higher, 11: solved
    assert engine.calls[0][1] == 2 and len(engine.calls) == 4  # both episodes in one call per turn
    for e in experiences:
        messages = e.info["messages"]
        assert [m["content"] for m in messages if m["role"] == "assistant"] == ["8", "12", "10", "11"]
        assert [m["content"] for m in messages[2::2]] == ["Higher.", "Lower.", "Higher."]
        assert e.reward == 1.0 and e.info["solved"] and e.info["turns"] == 4 and e.info["stop"] == "env"
        assert e.model_version == 2 and e.group_id == task.group_id
        rendered = tok.apply_chat_template(messages, tokenize=False)
        assert tok.decode(e.tokens.tolist()) == rendered.removesuffix("\n")  # the last reply ends at EOS
        assert tok.decode(e.tokens[: e.prompt_length].tolist()) == tok.apply_chat_template(
            messages[:1], tokenize=False, add_generation_prompt=True)
        response = e.response_tokens.tolist()
        mask = e.action_mask.tolist()
        replies = [t for t, m in zip(response, mask, strict=True) if m]
        assert tok.decode(replies) == "<|im_end|>".join(["8", "12", "10", "11"]) + "<|im_end|>"
        env = tok.decode([t for t, m in zip(response, mask, strict=True) if not m])
        assert env == "".join(f"\n<|im_start|>user\n{h}<|im_end|>\n<|im_start|>assistant\n"
                              for h in ("Higher.", "Lower.", "Higher."))
        assert torch.equal(e.logprobs[~e.action_mask], torch.zeros(int((~e.action_mask).sum())))
        assert bool((e.logprobs[e.action_mask] == -0.5).all())


def test_unsolved_games_get_the_closeness_reward_and_hints(shared_engine: HFEngine) -> None:
    engine = ScriptedEngine(shared_engine.tokenizer, cycling(["banana", "3", "30"]))
    task = Task(prompt="", answer=5, repeat_times=1, workflow="guess_number")
    [e] = GuessNumberWorkflow(max_turns=3, low=1, high=9).run(engine, task)
    assert e.info["guesses"] == [None, 3, 30] and not e.info["solved"]
    assert [m["content"] for m in e.info["messages"][2::2]] == ["Answer with one number from 1 to 9.", "Higher."]
    assert e.info["turns"] == 3 and e.info["stop"] == "turns"
    assert e.reward == pytest.approx(0.5 * (1 - 2 / 8))
    env = GuessNumberEnv(5, 1, 9)
    assert env.step("7").observation == "Lower." and env.step("5").done and env.finish() == 0.0
    with pytest.raises(WorkflowError, match="integer answer"):
        GuessNumberWorkflow().run(engine, Task(prompt="", answer="five"))


def test_env_tokens_drop_the_eos_the_reply_already_has(shared_engine: HFEngine) -> None:
    tok = shared_engine.tokenizer
    history = [{"role": "user", "content": "hi"}]
    with_eos = env_token_ids(tok, history, "more", reply_ended_with_eos=True)
    without = env_token_ids(tok, history, "more", reply_ended_with_eos=False)
    assert without == [tok.eos_token_id, *with_eos]
    assert tok.decode(with_eos) == "\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n"


class Echo(Environment):
    """Says "again" forever."""

    def reset(self) -> list[dict[str, str]]:
        return [{"role": "user", "content": "Say something."}]

    def step(self, reply: str) -> EnvStep:
        return EnvStep("again", reward=0.25)


class EchoWorkflow(MultiTurnWorkflow):
    def make_env(self, task: Task, run_id: int) -> Environment:
        return Echo()


def test_tiny_model_episodes_are_scored_in_the_context_they_were_sampled_in(shared_engine: HFEngine) -> None:
    workflow = EchoWorkflow(SamplingParams(temperature=1.0, max_tokens=6), max_turns=3, max_total_tokens=200)
    experiences = workflow.run(shared_engine, Task(prompt="", repeat_times=3))
    for e in experiences:
        assert e.info["turns"] == 3 and e.reward == pytest.approx(0.75)
        assert 3 <= int(e.action_mask.sum()) <= 18
        with torch.no_grad():
            logits = shared_engine.model(e.tokens[None]).logits[0, e.prompt_length - 1 : -1].float()
        recomputed = torch.log_softmax(logits, -1).gather(1, e.response_tokens[:, None]).squeeze(1)
        mask = e.action_mask
        torch.testing.assert_close(e.logprobs[mask], recomputed[mask], atol=2e-4, rtol=1e-4)
        assert bool((e.logprobs[~mask] == 0).all())
    # a token budget ends episodes early, before the engine would have to truncate
    short = EchoWorkflow(SamplingParams(temperature=1.0, max_tokens=6), max_turns=10, max_total_tokens=40)
    for e in short.run(shared_engine, Task(prompt="", repeat_times=2)):
        assert len(e.tokens) <= 40 and e.info["stop"] == "context" and e.info["turns"] < 10
