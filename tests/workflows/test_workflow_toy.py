"""The toy_repeat task: its task files, its reward on the tiny model, and that GRPO learns it."""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from trinity.common.experience import Experience, make_batch
from trinity.common.models.engine import SamplingParams
from trinity.common.models.hf_engine import HFEngine
from trinity.common.rewards import toy_repeat_reward
from trinity.common.workflows import Task, ToyRepeatWorkflow, toy_tasks, write_quickstart_tasks, write_toy_tasks

REPO = Path(__file__).resolve().parents[2]


def test_task_sets_are_balanced_and_deterministic(tmp_path: Path) -> None:
    records = toy_tasks(12, letters="abc", seed=3)
    assert Counter(r["answer"] for r in records) == {"a": 4, "b": 4, "c": 4}
    assert all(r["question"] == f"Repeat the letter {r['answer']}." for r in records)
    assert toy_tasks(12, letters="abc", seed=3) == records != toy_tasks(12, letters="abc", seed=4)
    first = write_toy_tasks(tmp_path / "a" / "t.jsonl", 10).read_bytes()
    assert write_toy_tasks(tmp_path / "b.jsonl", 10).read_bytes() == first
    assert [json.loads(line) for line in first.decode().splitlines()] == toy_tasks(10)


def test_shipped_quickstart_tasks_are_the_generators_output(tmp_path: Path) -> None:
    train, evaluation = write_quickstart_tasks(tmp_path)
    shipped = REPO / "examples" / "quickstart" / "tasks"
    assert (shipped / "train.jsonl").read_bytes() == train.read_bytes()
    assert (shipped / "eval.jsonl").read_bytes() == evaluation.read_bytes()
    assert len(train.read_text().splitlines()) == 64 and len(evaluation.read_text().splitlines()) == 16


def test_a_random_policy_scores_little_but_not_nothing(shared_engine: HFEngine) -> None:
    workflow = ToyRepeatWorkflow(SamplingParams(temperature=1.0, max_tokens=8))
    rewards = []
    for letter in "abcd":
        task = Task(prompt=f"Repeat the letter {letter}.", answer=letter, repeat_times=16, workflow="toy_repeat")
        for e in workflow.run(shared_engine, task):
            assert e.reward == toy_repeat_reward(e.info["response"], letter)
            assert e.info["reward_parts"] == {"toy_repeat": e.reward}
            rewards.append(e.reward)
    mean = statistics.mean(rewards)
    assert 0.0 < mean < 0.15, mean
    assert sum(r > 0 for r in rewards) >= 8  # graded: many rollouts earn something


def grpo_update(policy, optimizer, experiences: list[Experience], pad_id: int) -> float:  # type: ignore[no-untyped-def]
    """One plain GRPO step (group-normalised rewards, token-mean policy gradient); returns the on-policy gap."""
    groups: dict[str, list[Experience]] = defaultdict(list)
    for e in experiences:
        groups[e.group_id].append(e)
    for members in groups.values():
        rewards = torch.tensor([float(m.reward or 0.0) for m in members])
        advantages = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
        for member, advantage in zip(members, advantages, strict=True):
            member.advantages = torch.full((member.response_length,), float(advantage))
    batch = make_batch(experiences, pad_id)
    logits = policy(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()
    logprobs = torch.log_softmax(logits, -1).gather(2, batch.input_ids[:, 1:, None]).squeeze(2)
    mask = batch.response_mask
    gap = float(((logprobs.detach() - batch.old_logprobs).abs() * mask).max())
    loss = -(logprobs * batch.advantages * mask).sum() / mask.sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return gap


def test_grpo_learns_the_toy_task(tiny_model: Path) -> None:
    engine = HFEngine(str(tiny_model), torch_threads=1, seed=0)
    policy = AutoModelForCausalLM.from_pretrained(str(tiny_model))
    optimizer = torch.optim.AdamW(policy.parameters(), lr=6e-3, weight_decay=0.0)
    workflow = ToyRepeatWorkflow(SamplingParams(temperature=1.0, max_tokens=8))
    curve = []
    for step in range(30):
        tasks = [Task(prompt="Repeat the letter a.", answer="a", repeat_times=8, index=i, step=step,
                      workflow="toy_repeat") for i in range(4)]
        experiences = [e for task in tasks for e in workflow.run(engine, task)]
        assert all(e.model_version == step for e in experiences)
        curve.append(statistics.mean(float(e.reward or 0.0) for e in experiences))
        gap = grpo_update(policy, optimizer, experiences, engine.tokenizer.pad_token_id)
        assert gap < 1e-3, "the engine's log-probs are not the trainer's log-probs of the same tokens"
        engine.load_state_dict(policy.state_dict(), version=step + 1)
    start, end = statistics.mean(curve[:4]), statistics.mean(curve[-4:])
    assert end > start + 0.3, curve
