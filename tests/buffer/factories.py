"""Small builders shared by the buffer tests."""

from __future__ import annotations

from typing import Any

from trinity.common.config.plan.data import StoragePlan
from trinity.common.experience import Experience


def storage_plan(**settings: Any) -> StoragePlan:
    """Return the resolved ``buffer.trainer_input.experience_buffer`` with these settings (upstream's keys:
    ``name``, ``storage_type`` queue|sql|file, ``path``, ``capacity``, ``max_read_timeout``), as mode train reads it."""
    from tests.plans import make_plan

    plan = make_plan({"mode": "train", "buffer.trainer_input.experience_buffer": dict(settings)})
    assert plan.buffer.experience is not None
    return plan.buffer.experience


def make_exp(group: str = "g0", run: int = 0, reward: float | None = 1.0, *, version: int = 0,
             prompt: int = 3, response: int = 4, **info: object) -> Experience:
    """Return an experience with ``prompt`` + ``response`` tokens whose values encode group and run."""
    base = (sum(map(ord, group)) * 7 + run) % 300
    tokens = [base + i for i in range(prompt + response)]
    return Experience(
        tokens=tokens, prompt_length=prompt, logprobs=[-0.5] * response, reward=reward, group_id=group,
        run_id=run, model_version=version, info=dict(info),
    )


def make_group(group: str, size: int, version: int = 0, rewards: list[float] | None = None) -> list[Experience]:
    """Return ``size`` experiences of one group (rewards 0, 1, 2, ... unless given)."""
    rewards = rewards if rewards is not None else [float(i) for i in range(size)]
    return [make_exp(group, run=i, reward=rewards[i], version=version) for i in range(size)]


def ids(experiences: list[Experience]) -> list[tuple[str, int]]:
    """Return ``(group_id, run_id)`` of each experience, in order."""
    return [(e.group_id, e.run_id) for e in experiences]
