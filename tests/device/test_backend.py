"""Behaviour of a loaded Backend: probe isolation, doctor isolation, defaults."""

from __future__ import annotations

from tests.device import plugins
from trinity.device.backends import cpu
from trinity.device.loader import load_plugin


def test_probe_result_is_computed_once() -> None:
    plugin = plugins.FakeAccel()
    backend = load_plugin(plugin, expected_name="accel")
    backend.probe()
    backend.probe()
    assert plugin.probes == 1


def test_probe_returning_wrong_type_is_reported() -> None:
    class WrongType(plugins.FakeAccel):
        @plugins.hookimpl
        def trinity_probe(self) -> object:  # type: ignore[override]
            return True

    probe = load_plugin(WrongType(), expected_name="accel").probe()
    assert not probe.available and "returned bool, expected ProbeResult" in probe.reason


def test_failing_doctor_check_becomes_a_fail_with_fix() -> None:
    checks = load_plugin(plugins.BrokenDoctor(), expected_name="accel").doctor()
    failing = [c for c in checks if c.status == "fail"]
    assert failing and "cannot read driver version" in failing[0].detail and failing[0].fix
    assert any(c.name == "torch" for c in checks), "the core's own checks still run"


def test_defaults_cover_unimplemented_hooks() -> None:
    backend = load_plugin(plugins.FakeAccel("acc"), expected_name="acc")
    assert backend.visible_devices_env([2, 0]) == {"ACC_VISIBLE_DEVICES": "2,0"}
    assert backend.compile_support().supported
    assert backend.device_module().__name__ == "torch.cpu"


def test_cpu_backend_answers_without_torch_device_calls() -> None:
    backend = load_plugin(cpu, expected_name="cpu")
    stats = backend.memory_stats()
    assert stats.allocated > 0 and stats.total >= stats.free > 0
    assert backend.visible_devices_env([0, 1]) == {}
    assert backend.implements("trinity_synchronize")
