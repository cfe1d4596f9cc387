"""Upstream's AgentScope ReAct recipe runs here: AgentScope 1.x's ReActAgent on the engine's OpenAI API.

The agent is the real library (``trinity-rft[agentscope]``); it asks for its
structured answer with ``tool_choice: required`` and a ``generate_response``
tool. A random tiny model never calls it, so after a first episode against
the real engine records the exact prompt AgentScope sends, a copy of the
model is taught to answer it with a ``<think>`` block and the call
(tests/models/teach.py); ``trinity run`` of examples/agents/agentscope_react
then rewards the right answers and trains on every recorded call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.models.teach import teach_token_replies
from trinity.common.config import load_config
from trinity.common.models.client import EngineClient
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import HFEngine
from trinity.common.models.tiny import build_tiny_model
from trinity.common.workflows.base import Task
from trinity.common.workflows.catalog import WORKFLOWS
from trinity.launcher import run_plan
from trinity.planner.run import resolve_run

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "examples" / "agents" / "agentscope_react" / "gsm8k.yaml"
TASKS = [json.loads(line) for line in RECIPE.with_name("tasks.jsonl").read_text().splitlines()]
STEPS = 2


def api_options(model: Path) -> dict[str, Any]:
    return {"host": "127.0.0.1", "port": 0, "model_names": [str(model), "rollout"], "max_prompt_tokens": 1792,
            "context_length": 2048, "default_max_tokens": 128, "auto_tool_choice": True,
            "tool_call_parser": "hermes", "reasoning_parser": "deepseek_r1", "log_requests": False, "history": True}


def answer_reply(answer: str) -> str:
    """The reply the taught model gives: a short thought, then AgentScope's structured-answer call."""
    call = json.dumps({"name": "generate_response", "arguments": {"result": "\\boxed{" + answer + "}"}})
    return f"<think>\nWork it out.\n</think>\n\n<tool_call>\n{call}\n</tool_call>"


def final_answer(record: dict[str, Any]) -> str:
    return record["answer"].rsplit("####", 1)[1].strip()


def test_the_agentscope_react_recipe_trains_and_rewards_right_answers(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = build_tiny_model(root / "agentscope-tiny")
    workflow = WORKFLOWS.get("agentscope_react_workflow")(SamplingParams(max_tokens=128), type="gsm8k", max_iters=1)
    engine = HFEngine(str(base), torch_threads=1, max_prompt_tokens=1792, openai_api=api_options(base))
    prompts = []
    try:
        for index, record in enumerate(TASKS[:STEPS * 2]):  # the tasks of the run's steps (batch size 2)
            task = Task(prompt=record["question"], answer=record["answer"], raw=record, index=index, repeat_times=2,
                        workflow="agentscope_react_workflow")
            experiences = workflow.run(EngineClient(engine).bind(None), task)
            assert len(experiences) >= 2 and {e.run_id for e in experiences} == {0, 1}
            assert all(e.reward == 0.0 for e in experiences)  # the random model never answers
            assert experiences[0].info["metrics"]["react_memory_length"] >= 2
            first = experiences[0]
            prompts.append(first.tokens[: first.prompt_length].tolist())
    finally:
        engine.shutdown()
    assert len({tuple(p) for p in prompts}) == len(prompts)  # each question's own prompt
    replies = [answer_reply(final_answer(r)) for r in TASKS[:STEPS * 2]]
    taught = teach_token_replies(base, root / "agentscope-taught", list(zip(prompts, replies, strict=True)))

    monkeypatch.chdir(REPO)
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(root))
    monkeypatch.setenv("TRINITY_MODEL_PATH", str(taught))
    config = load_config(RECIPE, {
        "buffer.total_steps": STEPS, "monitor.progress": False, "monitor.monitor_type": "none",
        "cluster.cpus_per_bundle": 0.5, "buffer.explorer_input.taskset.rollout_args.temperature": 0.3,
    })
    plan = resolve_run(config)
    assert run_plan(plan) == 0
    rows = [json.loads(line) for line in (plan.run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    explore = [r["metrics"] for r in rows if r["phase"] == "explore"]
    train = [r["metrics"] for r in rows if r["phase"] == "train"]
    assert len(explore) == len(train) == STEPS
    assert all(m["explore/failed"] == 0 for m in explore)
    assert max(m["explore/accuracy/mean"] for m in explore) > 0  # taught answers reach the reward
    assert all(m["explore/stored_experiences"] >= 2 * 4 for m in explore)  # 2 tasks x 4 episodes, 1+ call each
    assert any(m["loss"] != 0 for m in train)  # rewards differ within a group: there is a gradient
