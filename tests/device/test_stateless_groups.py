"""trinity_stateless_process_group: torch's public routes, a backend's own route, and the refusal naming the hook."""

from __future__ import annotations

import dataclasses
import datetime
import threading
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.distributed import HashStore

from tests.device import plugins
from trinity.device import CollectiveGroup, CollectiveGroupError, facade, hookimpl
from trinity.device.backends import cpu
from trinity.device.loader import BackendRecord, load_plugin
from trinity.device.testing.conformance import broadcast_through_stateless_group
from trinity.weight_transport import (
    WeightSyncError,
    WeightSyncGroup,
    WeightSyncGroupInfo,
    find_free_port,
    state_dict_metas,
)

TIMEOUT = datetime.timedelta(seconds=30)


def test_default_gloo_group_broadcasts_with_no_default_process_group() -> None:
    backend = load_plugin(cpu, expected_name="cpu")
    outcomes = broadcast_through_stateless_group(backend, "gloo", 3, timeout_s=30)
    for rank in range(3):
        outcome = outcomes[rank]
        assert not isinstance(outcome, BaseException), outcome
        group, received = outcome
        assert isinstance(group, CollectiveGroup) and (group.collective, group.device_type) == ("gloo", "cpu")
        assert received == [float(i) for i in range(8)]
    assert not dist.is_initialized()


def test_a_spec_1_backend_still_loads_and_gets_the_default() -> None:
    backend = load_plugin(plugins.FakeAccel(spec_version=1), expected_name="accel")
    assert not backend.implements("trinity_stateless_process_group")
    group = backend.stateless_process_group("gloo", HashStore(), rank=0, world_size=1, timeout=TIMEOUT, group_name="g")
    tensor = torch.ones(2)
    group.process_group.broadcast(tensor, 0).wait()
    assert group.collective == "gloo" and torch.equal(tensor, torch.ones(2))


def test_default_nccl_route_without_nccl_in_torch_names_the_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dist, "is_nccl_available", lambda: False)
    backend = load_plugin(plugins.FakeAccel(), expected_name="accel")
    with pytest.raises(CollectiveGroupError, match=r"has no NCCL.*implement the trinity_stateless_process_group hook"):
        backend.stateless_process_group("nccl", HashStore(), rank=0, world_size=1, timeout=TIMEOUT, group_name="g")


class _RecordingNccl:
    """Test double of ``torch.distributed.ProcessGroupNCCL``: records how it was built (this torch has no NCCL)."""

    class Options:
        def __init__(self, is_high_priority_stream: bool = False) -> None:
            self.is_high_priority_stream = is_high_priority_stream
            self._timeout = datetime.timedelta(minutes=10)
            self.group_name = ""

    built: list[tuple[Any, int, int, Any]] = []

    def __init__(self, store: Any, rank: int, size: int, options: Any) -> None:
        type(self).built.append((store, rank, size, options))


def test_default_nccl_route_builds_torchs_public_class(monkeypatch: pytest.MonkeyPatch) -> None:
    _RecordingNccl.built = []
    monkeypatch.setattr(dist, "ProcessGroupNCCL", _RecordingNccl, raising=False)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    backend = load_plugin(plugins.FakeAccel(), expected_name="accel")
    store = HashStore()
    timeout = datetime.timedelta(seconds=7)
    group = backend.stateless_process_group("nccl", store, rank=1, world_size=3, timeout=timeout, group_name="wsync")
    assert isinstance(group.process_group, _RecordingNccl)
    assert (group.collective, group.device_type) == ("nccl", backend.info.device_type)
    [(used_store, rank, size, options)] = _RecordingNccl.built
    assert (used_store, rank, size) == (store, 1, 3)
    assert isinstance(options, _RecordingNccl.Options)
    assert (options._timeout, options.group_name, options.is_high_priority_stream) == (timeout, "wsync", False)


def test_unknown_collective_error_names_the_backend_and_the_hook() -> None:
    backend = load_plugin(plugins.FakeAccel(), expected_name="accel")
    with pytest.raises(CollectiveGroupError) as caught:
        backend.stateless_process_group("xccl", HashStore(), rank=0, world_size=1, timeout=TIMEOUT, group_name="g")
    message = str(caught.value)
    assert "'xccl'" in message and "backend 'accel'" in message and "trinity_stateless_process_group" in message
    assert "\n" not in message


class OwnCollective(plugins.FakeAccel):
    """A backend whose collective ``zccl`` only it can build (on top of gloo, for the test); records each call."""

    def __init__(self) -> None:
        super().__init__("zeta", key="ZETA")
        self._info = dataclasses.replace(self._info, collective_backend="zccl")
        self.calls: list[tuple[str, int, int, str]] = []
        self._lock = threading.Lock()

    @hookimpl
    def trinity_stateless_process_group(  # noqa: PLR0917 - pluggy passes arguments by name
        self, collective: str, store: Any, rank: int, world_size: int, timeout: datetime.timedelta, group_name: str
    ) -> CollectiveGroup:
        from trinity.device.collectives import gloo_group

        with self._lock:
            self.calls.append((collective, rank, world_size, group_name))
        built = gloo_group(store, rank, world_size, timeout)
        return CollectiveGroup(built.process_group, "cpu", collective)


def _select(plugin: OwnCollective, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = load_plugin(plugin, expected_name="zeta")
    record = BackendRecord("zeta", "test", "0", "tests", "ok", backend)
    monkeypatch.setattr(facade, "_records", {"zeta": record})
    facade.select_backend("zeta")


def test_the_weight_sync_group_is_built_by_the_selected_backends_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = OwnCollective()
    _select(plugin, monkeypatch)
    info = WeightSyncGroupInfo("127.0.0.1", find_free_port("127.0.0.1"), 2, 1, "override", "zccl", 30.0)
    state = {"w": torch.randn(5, 3), "b": torch.arange(4, dtype=torch.int64)}
    received: dict[str, Any] = {}

    sent_metas = state_dict_metas(state)

    def engine() -> None:
        with WeightSyncGroup.join(info, 1) as group:
            received.update(group.receive_state_dict(sent_metas, 1 << 10))

    thread = threading.Thread(target=engine, daemon=True)
    thread.start()
    with WeightSyncGroup.create(info) as trainer:
        trainer.broadcast_state_dict(state, 1 << 10)
    thread.join(60)
    assert sorted(plugin.calls) == [("zccl", 0, 2, "override"), ("zccl", 1, 2, "override")]
    assert set(received) == set(state) and all(torch.equal(received[k], state[k]) for k in state)


def test_weight_sync_group_refusal_is_one_line_naming_group_and_hook() -> None:
    facade.select_backend("cpu")
    info = WeightSyncGroupInfo("127.0.0.1", find_free_port("127.0.0.1"), 1, 1, "nowhere", "xccl", 5.0)
    with pytest.raises(WeightSyncError) as caught:
        WeightSyncGroup.create(info)
    message = str(caught.value)
    assert message.startswith("weight-sync group 'nowhere': ") and "trinity_stateless_process_group" in message
    assert "\n" not in message
