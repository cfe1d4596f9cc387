"""Backend selection rules (DESIGN §4) on real plugin objects."""

from __future__ import annotations

import logging

import pytest

from tests.device import plugins
from trinity.device.errors import (
    BackendLoadError,
    BackendUnavailableError,
    ConflictingChoiceError,
    InvalidDeviceRequestError,
    UnknownBackendError,
)
from trinity.device.loader import BackendRecord, builtin_records, load_plugin
from trinity.device.selection import select, worker_environment


def ok(plugin: plugins.FakeAccel) -> BackendRecord:
    backend = load_plugin(plugin, expected_name=plugin.trinity_backend_info().name)
    return BackendRecord(backend.name, f"trinity-backend-{backend.name}", "1.0", "x", "ok", backend)


def records(*plugin_list: plugins.FakeAccel, broken: dict[str, str] | None = None) -> dict[str, BackendRecord]:
    found = {r.name: r for r in builtin_records()}
    for plugin in plugin_list:
        record = ok(plugin)
        found[record.name] = record
    for name, error in (broken or {}).items():
        found[name] = BackendRecord(name, f"trinity-backend-{name}", "1.0", "x", "broken", None, error)
    return found


def test_auto_takes_highest_priority_available() -> None:
    found = records(plugins.FakeAccel("low", 5), plugins.FakeAccel("high", 50), plugins.FakeAccel("off", 99, False))
    chosen = select(found, environ={})
    assert chosen.name == "high" and chosen.source == "auto"
    assert "unavailable: off" in chosen.reason


def test_auto_falls_back_to_cpu_when_nothing_else_runs() -> None:
    chosen = select(records(plugins.FakeAccel("off", 99, False)), environ={})
    assert chosen.name == "cpu" and chosen.source == "auto"


def test_tie_is_broken_by_name_and_warned(caplog: pytest.LogCaptureFixture) -> None:
    found = records(plugins.FakeAccel("zeta", 50), plugins.FakeAccel("alpha", 50))
    with caplog.at_level(logging.WARNING, logger="trinity.device"):
        chosen = select(found, environ={})
    assert chosen.name == "alpha"
    assert "share priority 50" in caplog.text and "TRINITY_DEVICE" in caplog.text


def test_broken_backends_are_warned_about_in_auto(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="trinity.device"):
        chosen = select(records(broken={"npu": "import failed"}), environ={})
    assert chosen.name == "cpu"
    assert "broken: npu" in caplog.text


def test_explicit_argument_wins_over_priority() -> None:
    found = records(plugins.FakeAccel("high", 50), plugins.FakeAccel("low", 5))
    chosen = select(found, choice="low", environ={})
    assert chosen.name == "low" and chosen.source == "argument"


def test_environment_choice_and_aliases() -> None:
    found = records(plugins.FakeAccel("cuda", 50))
    chosen = select(found, environ={"TRINITY_DEVICE": " GPU "})
    assert chosen.name == "cuda" and chosen.source == "environment"


def test_auto_in_environment_means_automatic() -> None:
    chosen = select(records(plugins.FakeAccel("high", 50)), choice="auto", environ={"TRINITY_DEVICE": "auto"})
    assert chosen.source == "auto" and chosen.name == "high"


def test_unknown_name_lists_installed_and_the_extra() -> None:
    with pytest.raises(UnknownBackendError) as caught:
        select(records(plugins.FakeAccel("acme", 50)), environ={"TRINITY_DEVICE": "npu"})
    message = str(caught.value)
    assert "'npu'" in message and "acme, cpu" in message
    assert "pip install 'trinity-rft[npu]'" in message


def test_unknown_vendor_name_says_how_to_fix() -> None:
    with pytest.raises(UnknownBackendError, match="install the package that provides it"):
        select(records(), choice="tpu9000", environ={})


def test_explicit_broken_backend_reports_its_error() -> None:
    with pytest.raises(BackendLoadError, match=r"installed but broken: import failed: libhccl\.so"):
        select(records(broken={"npu": "import failed: libhccl.so"}), choice="npu", environ={})


def test_explicit_unavailable_backend_reports_probe_reason() -> None:
    with pytest.raises(BackendUnavailableError, match="no off device files found under /dev"):
        select(records(plugins.FakeAccel("off", 50, False)), environ={"TRINITY_DEVICE": "off"})


def test_disagreeing_choices_are_refused() -> None:
    found = records(plugins.FakeAccel("a", 5), plugins.FakeAccel("b", 5))
    with pytest.raises(ConflictingChoiceError, match="remove one of them"):
        select(found, choice="a", environ={"TRINITY_DEVICE": "b"})


def test_agreeing_choices_are_fine() -> None:
    found = records(plugins.FakeAccel("a", 5))
    assert select(found, choice="a", environ={"TRINITY_DEVICE": "A"}).name == "a"


def test_cpu_head_node_selects_from_cluster_resources() -> None:
    npu = plugins.FakeAccel("npu", 100, available=False, key="NPU")
    found = records(npu, plugins.FakeAccel("cuda", 100, available=False, key="GPU"))
    chosen = select(found, environ={}, cluster_resources={"CPU": 64.0, "NPU": 16.0})
    assert chosen.name == "npu" and chosen.source == "cluster"
    assert "NPU: 16" in chosen.reason


def test_local_accelerator_beats_cluster_resources() -> None:
    found = records(plugins.FakeAccel("cuda", 100, available=True, key="GPU"),
                    plugins.FakeAccel("npu", 100, available=False, key="NPU"))
    chosen = select(found, environ={}, cluster_resources={"NPU": 8.0, "GPU": 8.0})
    assert chosen.name == "cuda" and chosen.source == "auto"


def test_explicit_choice_is_satisfied_by_the_cluster() -> None:
    found = records(plugins.FakeAccel("npu", 100, available=False, key="NPU"))
    chosen = select(found, choice="npu", environ={}, cluster_resources={"NPU": 8.0})
    assert chosen.name == "npu" and "Ray cluster offers NPU: 8" in chosen.reason
    with pytest.raises(BackendUnavailableError, match=r"nor does the Ray cluster offer any NPU"):
        select(found, choice="npu", environ={}, cluster_resources={"GPU": 8.0})
    with pytest.raises(BackendUnavailableError) as no_cluster:  # no cluster read: nothing said about one
        select(found, choice="npu", environ={})
    assert "Ray cluster" not in str(no_cluster.value)


def test_cpu_only_cluster_selects_cpu() -> None:
    found = records(plugins.FakeAccel("npu", 100, available=False, key="NPU"))
    assert select(found, environ={}, cluster_resources={"CPU": 8.0}).name == "cpu"


def test_worker_trusts_the_driver_without_probing() -> None:
    npu = plugins.FakeAccel("npu", 100, available=False, key="NPU")
    found = records(npu)
    chosen = select(found, environ={"TRINITY_DEVICE": "npu", "TRINITY_DEVICE_RESOLVED": "1"})
    assert chosen.name == "npu" and chosen.source == "driver"
    assert npu.probes == 0


def test_worker_environment_hands_the_decision_down(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPU_LOG_LEVEL", "3")
    monkeypatch.setenv("NPU_VISIBLE_DEVICES", "0,1")
    found = records(plugins.FakeAccel("npu", 100, key="NPU"))
    env = worker_environment(select(found, environ={}), self_managed_devices=True)
    assert env["TRINITY_DEVICE"] == "npu" and env["TRINITY_DEVICE_RESOLVED"] == "1"
    assert env["NPU_LOG_LEVEL"] == "3"
    assert "NPU_VISIBLE_DEVICES" not in env
    assert env["RAY_EXPERIMENTAL_NOSET_NPU_VISIBLE_DEVICES"] == "1"


def test_probe_that_raises_makes_the_backend_unavailable_not_fatal() -> None:
    found = records(plugins.RaisingProbe("flaky", 100))
    assert select(found, environ={}).name == "cpu"
    probe = found["flaky"].backend.probe()  # type: ignore[union-attr]
    assert not probe.available and "RuntimeError: driver query failed" in probe.reason


def test_probe_that_hangs_is_bounded() -> None:
    hanging = plugins.HangingProbe("stuck", 100)
    found = records(hanging)
    try:
        chosen = select(found, environ={"TRINITY_PROBE_TIMEOUT": "0.2"})
        assert chosen.name == "cpu"
        assert "did not answer within 0.2 s" in found["stuck"].backend.probe().reason  # type: ignore[union-attr]
    finally:
        hanging.release.set()


@pytest.mark.parametrize("raw", ["abc", "0", "-3"])
def test_bad_probe_timeout_is_refused(raw: str) -> None:
    with pytest.raises(InvalidDeviceRequestError, match="TRINITY_PROBE_TIMEOUT"):
        select(records(), environ={"TRINITY_PROBE_TIMEOUT": raw})
