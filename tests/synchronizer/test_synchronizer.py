"""The synchronizer: online, checkpoint and memory syncs into engines, timed, bounded by sync_timeout."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.plans import make_plan
from tests.trainer.support import EngineDouble, TrainerStub
from trinity.common.config.plan.run import SyncPlan
from trinity.common.constants import SyncMethod
from trinity.common.models.checksum import state_dict_checksum
from trinity.synchronizer.checkpoint_sync import load_weights
from trinity.synchronizer.synchronizer import SyncError, Synchronizer, SyncTimeoutError
from trinity.weight_transport.buckets import state_dict_bytes


def sync_plan(**settings: Any) -> SyncPlan:
    """The resolved ``synchronizer`` section of a run with these ``synchronizer.*`` settings."""
    return make_plan({f"synchronizer.{key}": value for key, value in settings.items()}).sync


@pytest.fixture
def engines(peers: list[Any]) -> list[Any]:
    return peers


@pytest.fixture
def trainer(tiny_path: Path) -> TrainerStub:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_path), dtype=torch.float32)
    return TrainerStub(model.state_dict())


def test_three_methods_in_turn_bring_every_engine_to_the_trainer_weights(
    ray_local: Any, engines: list[Any], trainer: TrainerStub, tmp_path: Path
) -> None:
    config = sync_plan(bucket_size_mb=1, sync_timeout=60)
    expected_bytes = state_dict_bytes(trainer.state)
    for version, method in enumerate(["online", "checkpoint", "memory", "gloo"], start=1):
        trainer.perturb(0.01 * version)
        sync = Synchronizer(SyncMethod.parse(method, "gloo"), [trainer], engines, config,
                            checkpoint_path=tmp_path / "sync")
        report = sync.sync(version)
        assert report.bytes == expected_bytes and report.engines == 2 and report.version == version
        assert report.seconds >= report.transfer_seconds > 0
        assert ray_local.get([e.model_version.remote() for e in engines]) == [version, version]
        assert ray_local.get([e.state_dict_checksum.remote() for e in engines]) == [trainer.checksum()] * 2
        assert report.metrics()["sync/bytes"] == float(expected_bytes)
        if method == "online":
            assert report.setup_seconds > 0
            trainer.perturb(1.0)  # a second sync reuses the group
            again = sync.sync(version + 100)
            assert again.setup_seconds == 0.0
            assert ray_local.get([e.state_dict_checksum.remote() for e in engines]) == [trainer.checksum()] * 2
        sync.close()
        assert trainer.group is None


def test_in_process_engines_work_too(trainer: TrainerStub, tiny_path: Path) -> None:
    local = [EngineDouble(str(tiny_path)), EngineDouble(str(tiny_path))]
    trainer.perturb(0.5)
    for method in ("online", "memory"):
        sync = Synchronizer(SyncMethod.parse(method, "gloo"), trainer, local, sync_plan(sync_timeout=60))
        sync.sync(7)
        sync.close()
        assert [e.state_dict_checksum() for e in local] == [trainer.checksum()] * 2
        assert [e.model_version() for e in local] == [7, 7]


def test_a_sync_past_the_timeout_is_one_clear_error(trainer: TrainerStub, tmp_path: Path) -> None:
    slow = EngineDouble()
    slow.set_delay(30.0)
    sync = Synchronizer(SyncMethod.parse("checkpoint"), trainer, [slow], sync_plan(sync_timeout=1.0),
                        checkpoint_path=tmp_path / "sync")
    try:
        with pytest.raises(SyncTimeoutError) as caught:
            sync.sync(3)
        message = str(caught.value)
        assert "weight sync (checkpoint) of version 3" in message
        assert "sync_timeout = 1 s" in message and "engines loading the weights" in message
        assert "\n" not in message
    finally:
        slow.release.set()
        sync.close()


def test_without_engines_only_the_checkpoint_method_does_something(trainer: TrainerStub, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="checkpoint_path"):
        Synchronizer("checkpoint", trainer, [], sync_plan())
    report = Synchronizer("memory", trainer, [], sync_plan()).sync(1)
    assert report.bytes == 0 and report.engines == 0
    publisher = Synchronizer("checkpoint", trainer, [], sync_plan(), checkpoint_path=tmp_path / "pub")
    published = publisher.sync(4)  # a trainer publishing for an explorer of another job
    state, version = load_weights(tmp_path / "pub")
    assert version == 4 and published.bytes == state_dict_bytes(trainer.state)
    assert state_dict_checksum(state) == trainer.checksum()


def test_a_failed_online_sync_leaves_no_participant_waiting_in_its_collective(
    ray_local: Any, engines: list[Any], trainer: TrainerStub
) -> None:
    """Engine 1 fails before it takes part: the sender and engine 0 are left in the broadcast, for the group's
    timeout (60 s) unless the synchronizer gives the group up. Each is free within seconds, and the next sync
    (a new group) brings both engines to the trainer's weights."""
    config = sync_plan(bucket_size_mb=1, sync_timeout=60)
    sync = Synchronizer(SyncMethod.parse("online", "gloo"), [trainer], engines, config)
    try:
        sync.sync(1)
        ray_local.get(engines[1].refuse_next_receive.remote())
        trainer.perturb(0.5)
        with pytest.raises(SyncError, match="receive refused by the test"):
            sync.sync(2)
        freed = time.monotonic()
        assert ray_local.get(engines[0].model_version.remote(), timeout=10) in (1, 2)
        assert time.monotonic() - freed < 5, "engine 0 left the broadcast nobody completes"
        report = sync.sync(3)
        assert report.setup_seconds > 0, "a new group"
        assert ray_local.get([e.state_dict_checksum.remote() for e in engines]) == [trainer.checksum()] * 2
        assert time.monotonic() - freed < 30
    finally:
        sync.close()


def test_a_one_rank_online_sync_after_the_first_sends_the_known_plan_in_one_call(
    ray_local: Any, engines: list[Any], trainer: TrainerStub
) -> None:
    """The first sync asks the rank for its weight plan; later ones send it with the engines already receiving."""
    sync = Synchronizer(SyncMethod.parse("online", "gloo"), [trainer], engines, sync_plan(sync_timeout=60))
    try:
        first = sync.sync(1)
        assert trainer.sends == 0 and first.gather_seconds > 0
        for version in (2, 3):
            trainer.perturb(0.25)
            report = sync.sync(version)
            assert report.gather_seconds == 0.0 and report.bytes == state_dict_bytes(trainer.state)
            assert ray_local.get([e.state_dict_checksum.remote() for e in engines]) == [trainer.checksum()] * 2
            assert ray_local.get([e.model_version.remote() for e in engines]) == [version, version]
        assert trainer.sends == 2
    finally:
        sync.close()


def test_weights_that_changed_plan_fail_the_sync_at_once_and_the_next_sync_asks_again(
    ray_local: Any, engines: list[Any], trainer: TrainerStub
) -> None:
    """A cached plan that no longer holds: the rank sends the true header, every receiver refuses it within
    seconds (not the 60 s group timeout), the sync fails with the reason, and the next sync reads the plan anew."""
    sync = Synchronizer(SyncMethod.parse("online", "gloo"), [trainer], engines, sync_plan(sync_timeout=60))
    try:
        sync.sync(1)
        name = next(iter(trainer.state))
        trainer.state[name] = trainer.state[name].double()  # a dtype the plan of the first sync does not have
        started = time.monotonic()
        with pytest.raises(SyncError, match=r"no longer match|the sender broadcasts"):
            sync.sync(2)
        assert time.monotonic() - started < 10
        assert ray_local.get([e.model_version.remote() for e in engines], timeout=10) == [1, 1]
        report = sync.sync(3)
        assert report.gather_seconds > 0, "the plan was read again"
        assert ray_local.get([e.state_dict_checksum.remote() for e in engines]) == [trainer.checksum()] * 2
        assert trainer.sends == 1
    finally:
        sync.close()
