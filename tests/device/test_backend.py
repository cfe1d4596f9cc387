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


def test_defaults_match_the_spec_exactly() -> None:
    import pluggy

    from trinity.device import spec
    from trinity.device.defaults import DefaultHooks

    manager = pluggy.PluginManager(spec.PROJECT_NAME)
    manager.add_hookspecs(spec)
    defaults = DefaultHooks(plugins.info("x"))
    manager.register(defaults)
    manager.check_pending()
    for hook_name in spec.SINGLE_ANSWER_HOOKS[2:]:
        impls = getattr(manager.hook, hook_name).get_hookimpls()
        assert impls, f"no default for {hook_name}"
        caller = getattr(manager.hook, hook_name)
        assert tuple(impls[0].argnames) == tuple(caller.spec.argnames), hook_name


def test_defaults_use_the_backends_own_device_module() -> None:
    import types

    calls: list[str] = []
    module = types.ModuleType("fake_device_module")
    module.synchronize = lambda: calls.append("sync")  # type: ignore[attr-defined]
    module.set_device = lambda i: calls.append(f"set {i}")  # type: ignore[attr-defined]

    class VendorModule(plugins.FakeAccel):
        @plugins.hookimpl
        def trinity_device_module(self) -> types.ModuleType:
            calls.append("import vendor extension")
            return module

    class OnlyModule:
        inner = VendorModule("vendor")
        trinity_backend_info = inner.trinity_backend_info
        trinity_probe = inner.trinity_probe
        trinity_device_module = inner.trinity_device_module

    backend = load_plugin(OnlyModule(), expected_name="vendor")
    backend.set_device(1)
    backend.synchronize()
    assert calls == ["import vendor extension", "set 1", "sync"]


def test_timed_out_probe_verdict_sticks() -> None:
    hanging = plugins.HangingProbe("stuck")
    backend = load_plugin(hanging, expected_name="stuck")
    try:
        assert "within 0.1 s" in backend.probe(0.1).reason
        hanging.release.set()
        assert "within 0.1 s" in backend.probe(5).reason
    finally:
        hanging.release.set()
