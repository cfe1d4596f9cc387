"""SyncMethod resolves 'online' through the selected device backend, never a hard-coded collective."""

from __future__ import annotations

import pytest

from tests.device import plugins
from trinity import device
from trinity.common.constants import SyncMethod, SyncMethodError


def test_online_is_the_selected_backends_collective_on_cpu() -> None:
    assert SyncMethod.parse("online") == SyncMethod("collective", "gloo")
    assert str(SyncMethod.default()) == "gloo"


@pytest.mark.parametrize(("collective", "expected"), [("nccl", "nccl"), ("hccl", "hccl"), ("gloo", "gloo")])
def test_online_follows_the_collective(collective: str, expected: str) -> None:
    method = SyncMethod.parse("ONLINE", collective=collective)
    assert method.kind == "collective" and str(method) == expected
    assert SyncMethod.parse(collective, collective=collective) == method


def test_offline_and_memory() -> None:
    assert SyncMethod.parse("offline", collective="hccl").kind == "checkpoint"
    assert str(SyncMethod.parse("checkpoint", collective="hccl")) == "checkpoint"
    assert SyncMethod.parse("memory", collective="hccl").kind == "memory"


def test_another_devices_collective_is_refused() -> None:
    with pytest.raises(SyncMethodError, match="whose collective is 'hccl'; use one of: online"):
        SyncMethod.parse("nccl", collective="hccl")


def test_online_asks_the_facade_for_a_selected_vendor_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = plugins.FakeAccel("vendor", 50)
    plugin._info = plugins.info("vendor", 50)
    from trinity.device.loader import BackendRecord, load_plugin

    backend = load_plugin(plugin, expected_name="vendor")
    record = BackendRecord("vendor", "trinity-backend-vendor", "1", "x", "ok", backend)
    monkeypatch.setattr(device.facade, "_records", {"vendor": record, **device.facade._discovered()})
    device.select_backend("vendor")
    assert SyncMethod.parse("online") == SyncMethod("collective", backend.info.collective_backend)
