"""Dropping the groups GRPO's std_threshold skips (upstream removes them from the batch)."""

from __future__ import annotations

import torch

from trinity.algorithm.group_filter import kept_rows, skipped_groups

# group 0: 1, 1 (std 0); group 1: 2, 0 (std sqrt 2); group 2: 5 alone; group 3: 3, 1 (std sqrt 2)
REWARDS = torch.tensor([1.0, 1.0, 2.0, 0.0, 5.0, 3.0, 1.0])
GROUPS = torch.tensor([0, 0, 1, 1, 2, 3, 3])


def test_groups_of_one_or_flat_rewards_are_skipped() -> None:
    assert skipped_groups(REWARDS, GROUPS, 0.1).tolist() == [True, True, False, False, True, False, False]
    assert kept_rows(REWARDS, GROUPS, std_threshold=0.1).tolist() == [2, 3, 5, 6]
    # a threshold above sqrt 2 skips everything
    assert kept_rows(REWARDS, GROUPS, std_threshold=2.0).tolist() == []


def test_duplicates_refill_one_kept_group_per_skipped_group() -> None:
    generator = torch.Generator().manual_seed(0)
    rows = kept_rows(REWARDS, GROUPS, std_threshold=0.1, duplicate_experiences=True, generator=generator).tolist()
    assert rows[:4] == [2, 3, 5, 6]
    extra = rows[4:]
    assert len(extra) == 4  # two skipped groups -> two whole kept groups appended
    assert all(pair in ([2, 3], [5, 6]) for pair in (extra[:2], extra[2:]))
    assert kept_rows(REWARDS, GROUPS, std_threshold=2.0, duplicate_experiences=True).tolist() == []


def test_episodes_are_scored_by_their_last_step() -> None:
    # group 0: episode 0 = rows 0, 1 (last reward 1), episode 1 = row 2 (0): std 0.707 -> kept
    # group 1: one episode (rows 3, 4) -> skipped, although its two rows have different rewards
    rewards = torch.tensor([99.0, 1.0, 0.0, 7.0, 2.0])
    groups = torch.tensor([0, 0, 0, 1, 1])
    runs = torch.tensor([0, 0, 1, 2, 2])
    assert kept_rows(rewards, groups, std_threshold=0.1, run_index=runs).tolist() == [0, 1, 2]
    assert kept_rows(rewards, groups, std_threshold=0.1).tolist() == [0, 1, 2, 3, 4]
