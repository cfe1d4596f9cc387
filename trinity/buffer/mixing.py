"""The ``mix`` sample strategy: each training batch mixes rollouts with expert rows from an SFT data set.

Upstream's ``mix`` / ``mix_chord`` algorithms train on rollouts (PPO-style)
and on expert demonstrations (SFT) in the same step. Of a step's
``train_batch_size`` rows, ``ceil(expert_data_ratio * train_batch_size)`` come
from the auxiliary SFT data set named ``sft_dataset_name`` (marked
``is_expert``, with reward, log-probs and advantages 0 as upstream does) and
the rest are whole groups of rollouts from the experience buffer.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from trinity.common.experience import Experience


def expert_rows(train_batch_size: int, expert_data_ratio: float) -> int:
    """Return the expert rows of a training batch: ``ceil(ratio * train_batch_size)``; raises ValueError."""
    if not 0.0 <= expert_data_ratio <= 1.0:
        raise ValueError(f"expert_data_ratio must be in [0, 1], got {expert_data_ratio}")
    return math.ceil(expert_data_ratio * train_batch_size)


def as_expert(experience: Experience) -> Experience:
    """Return ``experience`` marked as an expert row: reward 0, zero log-probs and advantages, ``is_expert``."""
    zeros = torch.zeros(experience.response_length, dtype=torch.float32)
    return dataclasses.replace(experience, reward=0.0, logprobs=zeros, advantages=zeros.clone(), is_expert=True)


class MixStrategy:
    """Rollout groups from a sample strategy plus expert rows from a data set, per training step."""

    def __init__(self, usual: Any, expert: Any) -> None:
        """``usual`` samples rollout groups (a :class:`~trinity.buffer.sampling.SampleStrategy`); ``expert`` is a
        :class:`~trinity.buffer.dataset_source.DatasetSource` serving the expert rows of one step per call."""
        self.usual = usual
        self.expert = expert
        #: Rollout groups per step (the expert rows come on top).
        self.batch_size: int = usual.batch_size
        #: Rollout experiences per step, in whole groups (None: ``batch_size`` groups).
        self.batch_rows: int | None = getattr(usual, "batch_rows", None)

    def sample(self, trainer_version: int, timeout: float | None = None, groups: int | None = None) -> list[Experience]:
        """Return the step's rollouts (not expert) followed by its expert rows.

        Raises what either source raises: a timeout of the buffer, or
        BufferExhaustedError once the expert data set has served its epochs.
        """
        usual = [dataclasses.replace(e, is_expert=False)
                 for e in self.usual.sample(trainer_version, timeout=timeout, groups=groups)]
        expert = [as_expert(e) for e in self.expert.sample(trainer_version)]  # after the buffer: a timeout loses none
        return usual + expert

    def describe(self) -> str:
        """Return what this strategy reads, for messages."""
        return f"{self.usual.describe()} mixed with {self.expert.describe()}"

    def state_dict(self) -> dict[str, Any]:
        """Return both read positions."""
        return {"usual": self.usual.state_dict(), "expert": self.expert.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore both read positions."""
        self.usual.load_state_dict(state["usual"])
        self.expert.load_state_dict(state["expert"])
