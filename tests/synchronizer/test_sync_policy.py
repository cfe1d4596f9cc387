"""sync_interval and sync_offset: which steps sync, which weights each explorer step may use."""

from __future__ import annotations

import pytest

from tests.plans import make_plan
from trinity.synchronizer.policy import SyncPolicy


def test_strictly_on_policy_by_default() -> None:
    policy = SyncPolicy.from_config(make_plan().sync)
    assert policy.sync_steps(4) == [1, 2, 3, 4]
    assert [policy.required_version(k) for k in range(1, 5)] == [0, 1, 2, 3]
    assert policy.can_explore(3, synced_version=2) and not policy.can_explore(3, synced_version=1)
    assert policy.max_lead == 1


def test_interval_syncs_every_n_steps_and_explorer_waits_at_the_boundary() -> None:
    policy = SyncPolicy(interval=3)
    assert policy.sync_steps(10) == [3, 6, 9]
    assert not policy.should_sync(0) and not policy.should_sync(2) and policy.should_sync(6)
    assert [policy.required_version(k) for k in range(1, 8)] == [0, 0, 0, 3, 3, 3, 6]
    assert policy.can_explore(3, synced_version=0) and not policy.can_explore(4, synced_version=0)
    assert policy.max_lead == 3


def test_offset_lets_the_explorer_run_ahead() -> None:
    policy = SyncPolicy(interval=1, offset=2)
    assert [policy.required_version(k) for k in range(1, 7)] == [0, 0, 0, 1, 2, 3]
    assert policy.can_explore(3, synced_version=0) and not policy.can_explore(4, synced_version=0)
    assert policy.staleness(3, synced_version=0) == 2
    assert policy.max_lead == 3
    combined = SyncPolicy(interval=2, offset=1)
    assert [combined.required_version(k) for k in range(1, 8)] == [0, 0, 0, 2, 2, 4, 4]


def test_newer_weights_never_block() -> None:
    policy = SyncPolicy(interval=2, offset=1)
    assert all(policy.can_explore(k, synced_version=k) for k in range(1, 10))


@pytest.mark.parametrize(("interval", "offset", "match"), [(0, 0, "sync_interval"), (1, -1, "sync_offset")])
def test_bad_values_are_refused(interval: int, offset: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SyncPolicy(interval=interval, offset=offset)
