"""The agent recipes under examples/agents run GRPO steps end to end: engine API, agent, history, trainer.

The random tiny model never calls a tool, so a second ReAct run uses a copy
taught to call the calculator and then answer (tests/models/teach.py): the
tool calls, the tool results and the rewards then really flow through a
``trinity run`` (engine actor with its HTTP server, runner threads with
``openai`` clients, multi-step GRPO on the recorded calls).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.models.teach import teach_replies
from trinity.common.config import load_config
from trinity.common.models.tiny import build_tiny_model
from trinity.common.workflows.agent import AgentWorkflow, Episode
from trinity.common.workflows.catalog import WORKFLOWS
from trinity.common.workflows.react import SYSTEM_PROMPT, TOOLS
from trinity.launcher import run_plan
from trinity.planner.run import resolve_run

REPO = Path(__file__).resolve().parents[2]
STEPS = 2


def run_recipe(recipe: str, root: Path, monkeypatch: pytest.MonkeyPatch, **overrides: Any) -> list[dict[str, Any]]:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(root))
    config = load_config(REPO / "examples" / "agents" / recipe, {
        "trainer.total_steps": STEPS, "buffer.total_steps": STEPS, "monitor.progress": False,
        "monitor.plot": False, "monitor.monitor_type": "none", "cluster.cpus_per_bundle": 0.5, **overrides,
    })
    plan = resolve_run(config)
    assert run_plan(plan) == 0
    lines = (plan.run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def phase(records: list[dict[str, Any]], name: str) -> list[dict[str, float]]:
    chosen = [r for r in records if r["phase"] == name]
    assert [r["step"] for r in chosen] == list(range(1, STEPS + 1))
    return [r["metrics"] for r in chosen]


def test_react_agent_with_the_random_model(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = run_recipe("react/react.yaml", root, monkeypatch)
    for metrics in phase(records, "train"):
        assert math.isfinite(metrics["loss"])
    for metrics in phase(records, "explore"):
        # 2 tasks x 4 episodes, at least one call each (more when a reply happens to parse as a call)
        assert metrics["explore/stored_experiences"] >= 8
        assert metrics["explore/answered/mean"] + metrics["explore/tool_calls/mean"] > 0


def test_react_agent_on_one_device_in_mode_colocate(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's OpenAI client talks to the colocated engine, whose weights come through the shared file."""
    records = run_recipe("react/react.yaml", root, monkeypatch, **{
        "mode": "colocate", "cluster.gpu_per_node": 1, "name": "react-colocate",
        "synchronizer.verify_checksums": True,
    })
    for metrics in phase(records, "train"):
        assert math.isfinite(metrics["loss"]) and metrics["sync/checksum_match"] == 1.0
    for metrics in phase(records, "explore"):
        assert metrics["explore/stored_experiences"] >= 8


def test_react_agent_that_calls_the_calculator(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = [json.loads(line) for line in (REPO / "examples/agents/react/tasks.jsonl").read_text().splitlines()]
    chats = []
    for task in tasks[:2]:  # the first step's tasks
        a, op, b = task["question"].removeprefix("What is ").removesuffix("?").split()
        expression = f"{a} {'+' if op == 'plus' else '-' if op == 'minus' else '*'} {b}"
        ask = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task["question"]}]
        call = json.dumps({"name": "calculator", "arguments": {"expression": expression}})
        chats.append((ask, f"<tool_call>\n{call}\n</tool_call>"))
        answered = [*ask, {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "calculator", "arguments": {"expression": expression}}}]},
            {"role": "tool", "content": task["answer"]}]
        chats.append((answered, f"The answer is {task['answer']}."))
    base = build_tiny_model(root / "agents" / "tiny-model")
    taught = teach_replies(base, root / "react-taught", chats, tools=TOOLS, steps=300)
    records = run_recipe("react/react.yaml", root, monkeypatch, **{
        "model.model_path": str(taught), "name": "react-taught",
        "buffer.explorer_input.taskset.rollout_args.temperature": 0.7,
    })
    first = phase(records, "explore")[0]
    assert first["explore/tool_calls/mean"] > 0.5  # the taught model calls the calculator
    assert first["explore/tool_errors/mean"] < 0.5  # with expressions the calculator can evaluate
    assert first["explore/accuracy/mean"] > 0.5  # and answers with the tool's result
    assert first["explore/reward_mean"] == pytest.approx(first["explore/accuracy/mean"])
    assert first["explore/stored_experiences"] >= 12  # most of the 8 episodes: a call, then the answer
    for metrics in phase(records, "train"):
        assert math.isfinite(metrics["loss"])


def test_frozen_lake_agent(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = run_recipe("frozen_lake/frozen_lake.yaml", root, monkeypatch)
    for metrics in phase(records, "train"):
        assert math.isfinite(metrics["loss"])
    for metrics in phase(records, "explore"):
        assert metrics["explore/stored_experiences"] >= 8  # one per move, at least one move per episode
        assert 1 <= metrics["explore/replies/mean"] <= 3


def test_an_external_judge_scores_the_answers_and_is_not_trained_on(root: Path, monkeypatch: pytest.MonkeyPatch
                                                                     ) -> None:
    """The judge is an OpenAI endpoint outside the run (here an hf engine's server in this process)."""
    from trinity.common.models.hf_engine import HFEngine

    base = build_tiny_model(root / "agents" / "tiny-model")
    judge = HFEngine(str(base), torch_threads=1, openai_api={
        "host": "127.0.0.1", "port": 0, "model_names": ["judge-model"], "max_prompt_tokens": 1024,
        "context_length": 2048, "default_max_tokens": 8, "history": True})
    try:
        monkeypatch.setenv("JUDGE_URL", judge.openai_api()["base_url"])
        records = run_recipe("react/react.yaml", root, monkeypatch, **{
            "name": "react-judged",
            "explorer.auxiliary_models": [{"name": "judge", "engine_type": "external", "external_model_config": {
                "base_url_env": "JUDGE_URL", "model_name": "judge-model"}}],
            "buffer.explorer_input.taskset.workflow_args": {"max_env_steps": 2, "judge": "judge"},
        })
        served = judge._api_server.served
        assert judge.take_history("any")[0] == [] and len(judge._api_history) == 0  # nothing of it recorded
    finally:
        judge.shutdown()
    explore = phase(records, "explore")
    assert served == STEPS * 2 * 4  # one verdict per episode: 2 tasks x 4 episodes a step
    for metrics in explore:
        assert metrics["explore/reward_mean"] == pytest.approx(metrics["explore/accuracy/mean"])
    assert explore[0]["explore/stored_experiences"] >= 8  # the rollout model's calls only


class GuessNumber(AgentWorkflow):
    """docs/agents.md's loop as a user writes it: guess a number from 1 to 9, "No. Try again." up to 3 calls."""

    def run_episode(self, client: Any, model: str, task: Any, episode: int) -> Episode:
        secret = 1 + (task.index * 7 + episode) % 9
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Guess my number from 1 to 9."}]
        for _ in range(self.max_env_steps):
            reply = client.chat.completions.create(
                model=model, messages=messages, **self.request_options(task)).choices[0].message
            messages.append(reply.model_dump(exclude_none=True))
            if str(secret) in (reply.content or ""):
                return Episode(reward=1.0)
            messages.append({"role": "user", "content": "No. Try again."})
        return Episode(reward=0.0)


WORKFLOWS.add("guess_number_for_tests", GuessNumber)


def guess_run(root: Path, monkeypatch: pytest.MonkeyPatch, name: str, **overrides: Any) -> list[dict[str, Any]]:
    return run_recipe("react/react.yaml", root, monkeypatch, **{
        "name": name, "synchronizer.sync_offset": 0,
        "buffer.explorer_input.taskset.default_workflow_type": "guess_number_for_tests",
        "buffer.explorer_input.taskset.rollout_args.max_tokens": 6,
        "buffer.explorer_input.taskset.workflow_args": {"max_env_steps": 3}, **overrides})


def test_a_multi_step_agent_trains_every_experience_of_its_tasks_in_their_step(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """4 episodes of 1-3 calls per task: a task is one group whatever its count (it was chunks of 4)."""
    records = guess_run(root, monkeypatch, "guess-steps")
    explore, train = phase(records, "explore"), phase(records, "train")
    for explored, trained in zip(explore, train, strict=True):
        assert explored["explore/stored_experiences"] > 8  # some episodes took more than one call
        assert trained["rows"] == explored["explore/stored_experiences"]  # sync_offset 0: the step trains it all


def test_a_multi_step_agent_with_a_batch_counted_in_experiences(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = guess_run(root, monkeypatch, "guess-rows", **{"buffer.train_batch_size": 12,
                                                            "trainer.total_steps": 3})
    stored = sum(m["explore/stored_experiences"] for m in phase(records, "explore"))
    trained = [r["metrics"]["rows"] for r in records if r["phase"] == "train"]
    assert len(trained) == 3 and all(rows <= 12 for rows in trained)  # whole tasks (4-12 each) up to 12
    assert sum(trained) <= stored


def test_the_documented_agent_in_episode_mode_is_one_experience_per_episode(
        root: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    records = guess_run(root, monkeypatch, "guess-episodes", **{
        "algorithm.algorithm_type": "grpo",
        "buffer.explorer_input.taskset.workflow_args": {"max_env_steps": 3, "experience_mode": "episode"}})
    for explored, trained in zip(phase(records, "explore"), phase(records, "train"), strict=True):
        assert explored["explore/stored_experiences"] == 8  # 2 tasks x 4 episodes, each joined whole
        assert trained["rows"] == 8
    assert "split into several experiences" not in caplog.text
