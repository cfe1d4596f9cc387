"""The reusable pytest suite every device backend must pass."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from importlib.metadata import entry_points
from typing import ClassVar

import pytest

from trinity.device import facade
from trinity.device.backend import Backend
from trinity.device.loader import load_plugin
from trinity.device.selection import DEVICE_ENV, RESOLVED_ENV
from trinity.device.spec import ENTRY_POINT_GROUP, MIN_SPEC_VERSION, SPEC_VERSION
from trinity.device.types import AttentionChoice, CompileSupport, DoctorCheck, DtypeSupport, MemoryStats, ProbeResult

_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def _fresh_backend(name: str) -> Backend:
    """Load the installed backend ``name`` anew, so no earlier probe result is reused."""
    if name == "cpu":
        from trinity.device.backends import cpu

        return load_plugin(cpu, expected_name="cpu")
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    assert matches, f"no entry point named {name!r} in group {ENTRY_POINT_GROUP!r}: is the package installed?"
    return load_plugin(matches[0].load(), expected_name=name)


class BackendConformance:
    """Contract checks for one backend; subclass it and set ``backend_name``."""

    #: Name of the backend under test (its entry point's name).
    backend_name: ClassVar[str] = ""
    #: Modules that loading the plugin, its info and its probe must not import
    #: (the vendor runtime). ``torch`` is always checked.
    heavy_modules: ClassVar[tuple[str, ...]] = ()
    #: Extra environment for the fresh interpreter that checks the probe's
    #: promise not to import heavy modules (e.g. a double on ``PYTHONPATH``).
    probe_subprocess_env: ClassVar[Mapping[str, str]] = {}

    @pytest.fixture
    def device_runtime(self) -> Iterator[None]:
        """Make the device present. Default: the real machine. Override to install a test double."""
        yield

    @pytest.fixture
    def backend(self, device_runtime: None) -> Backend:
        """The backend under test, loaded fresh inside ``device_runtime``."""
        return _fresh_backend(self.backend_name)

    @pytest.fixture
    def available_backend(self, backend: Backend) -> Backend:
        """The backend, which must probe as available inside ``device_runtime``."""
        probe = backend.probe()
        assert probe.available, (
            f"{self.backend_name} probes unavailable ({probe.reason}); run the kit on the device or "
            "override the device_runtime fixture with a double of the vendor runtime"
        )
        return backend

    @pytest.fixture
    def selected(self, available_backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Iterator[Backend]:
        """The backend selected through ``TRINITY_DEVICE``, façade bound to it."""
        monkeypatch.setenv(DEVICE_ENV, self.backend_name)
        monkeypatch.delenv(RESOLVED_ENV, raising=False)
        facade.reset()
        try:
            selection = facade.select_backend()
            yield selection.backend
        finally:
            facade.reset()

    # --- registration and facts --------------------------------------------------------

    def test_registered_and_valid(self) -> None:
        if self.backend_name == "cpu":
            return
        records = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
        assert self.backend_name in records, f"{self.backend_name!r} is not registered under {ENTRY_POINT_GROUP}"
        facade.reset()
        try:
            record = facade.get_backend_record(self.backend_name)
            assert record is not None
            assert record.status == "ok", record.error
        finally:
            facade.reset()

    def test_info_is_well_formed(self, backend: Backend) -> None:
        info = backend.info
        assert info.name == self.backend_name
        assert MIN_SPEC_VERSION <= info.spec_version <= SPEC_VERSION
        assert re.fullmatch(r"[a-z][a-z0-9_]*", info.device_type), info.device_type
        assert info.collective_backend and info.collective_backend.islower()
        assert isinstance(info.priority, int)
        if info.visible_devices_env is not None:
            assert _ENV_NAME.match(info.visible_devices_env), info.visible_devices_env
        if info.ray_resource_key is not None:
            assert info.ray_resource_key and info.ray_resource_key != "CPU"
        for prefix in info.worker_env_prefixes:
            assert _ENV_NAME.match(prefix.rstrip("_") or "X"), prefix

    def test_probe_without_device_explains_itself(self) -> None:
        probe = _fresh_backend(self.backend_name).probe()
        assert isinstance(probe, ProbeResult)
        if probe.available:
            assert probe.device_count >= 1
        else:
            assert probe.device_count == 0
            assert len(probe.reason) > 10, "an unavailable probe must tell the user why"

    def test_probe_imports_no_runtime(self) -> None:
        forbidden = ("torch", *self.heavy_modules)
        code = textwrap.dedent(
            f"""
            import json, sys
            from trinity.device.testing.conformance import _fresh_backend
            backend = _fresh_backend({self.backend_name!r})
            backend.info
            backend.probe()
            backend.compile_support()
            print(json.dumps(sorted(m for m in {forbidden!r} if m in sys.modules)))
            """
        )
        env = {**os.environ, **self.probe_subprocess_env}
        env.pop(DEVICE_ENV, None)
        done = subprocess.run(
            [sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == 0, done.stderr
        imported = json.loads(done.stdout.strip().splitlines()[-1])
        assert imported == [], f"loading/probing {self.backend_name} imported {imported}"

    def test_probe_reports_devices(self, available_backend: Backend) -> None:
        probe = available_backend.probe()
        assert probe.device_count >= 1

    # --- behaviour on the device ---------------------------------------------------------

    def test_set_device_makes_it_current(self, available_backend: Backend) -> None:
        count = available_backend.probe().device_count
        if self.backend_name == "cpu":
            available_backend.set_device(0)
            assert available_backend.current_device_index() == 0
            return
        for index in reversed(range(min(count, 2))):
            available_backend.set_device(index)
            assert available_backend.current_device_index() == index

    def test_synchronize_and_empty_cache(self, available_backend: Backend) -> None:
        available_backend.set_device(0)
        available_backend.synchronize()
        available_backend.empty_cache()
        available_backend.synchronize()

    def test_memory_stats(self, available_backend: Backend) -> None:
        stats = available_backend.memory_stats()
        assert isinstance(stats, MemoryStats)
        for value in (stats.allocated, stats.reserved, stats.total, stats.free):
            assert isinstance(value, int) and value >= 0
        if stats.total:
            assert stats.free <= stats.total

    def test_manual_seed_makes_torch_reproducible(self, available_backend: Backend) -> None:
        import torch

        available_backend.manual_seed(1234)
        first = torch.rand(4)
        available_backend.manual_seed(1234)
        assert torch.equal(first, torch.rand(4))

    def test_device_module(self, available_backend: Backend) -> None:
        module = available_backend.device_module()
        for name in ("synchronize", "device_count", "set_device", "current_device"):
            assert callable(getattr(module, name, None)), f"device module lacks {name}()"

    def test_compile_support(self, backend: Backend) -> None:
        support = backend.compile_support()
        assert isinstance(support, CompileSupport)
        if not support.supported:
            assert support.reason, "an unsupported torch.compile must say why"

    def test_visible_devices_env(self, backend: Backend) -> None:
        env = backend.visible_devices_env([1, 0])
        var = backend.info.visible_devices_env
        if var is None:
            assert env == {}
            return
        assert set(env) == {var}
        assert sorted(int(i) for i in env[var].split(",")) == [0, 1]

    def test_worker_env(self, backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
        info = backend.info
        for prefix in info.worker_env_prefixes:
            monkeypatch.setenv(f"{prefix}CONFORMANCE_PROBE", "1")
        if info.visible_devices_env:
            monkeypatch.setenv(info.visible_devices_env, "0")
        env = backend.worker_env(False)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        for prefix in info.worker_env_prefixes:
            assert env.get(f"{prefix}CONFORMANCE_PROBE") == "1", f"{prefix}* is not forwarded to workers"
        if info.visible_devices_env:
            assert info.visible_devices_env not in env, "Ray owns the visible-devices variable"
            managed = backend.worker_env(True)
            assert managed.get(f"RAY_EXPERIMENTAL_NOSET_{info.visible_devices_env}") == "1"

    def test_doctor(self, backend: Backend) -> None:
        checks = backend.doctor()
        assert checks and all(isinstance(c, DoctorCheck) for c in checks)
        for check in checks:
            assert check.status in ("ok", "warn", "fail")
            if check.status == "fail":
                assert check.fix, f"failing check {check.name!r} must say how to fix it"

    # --- through the façade ------------------------------------------------------------------

    def test_selected_through_environment(self, selected: Backend) -> None:
        info = selected.info
        assert facade.current_backend().name == self.backend_name
        assert facade.get_device_type() == info.device_type
        assert facade.get_collective_backend() == info.collective_backend
        assert facade.get_ray_resource_key() == info.ray_resource_key
        pg = facade.get_process_group_backend()
        if info.device_type == "cpu":
            assert pg == f"cpu:{info.collective_backend}"
        else:
            assert pg == f"cpu:gloo,{info.device_type}:{info.collective_backend}"
        env = facade.worker_env()
        assert env[DEVICE_ENV] == self.backend_name and env[RESOLVED_ENV] == "1"
        facade.synchronize()
        assert facade.get_device_id() >= 0

    # --- model dtypes and attention --------------------------------------------------------------

    def test_supported_dtypes(self, backend: Backend) -> None:
        import torch

        support = backend.supported_dtypes()
        assert isinstance(support, DtypeSupport)
        for name in support.supported:
            assert isinstance(getattr(torch, name, None), torch.dtype), (
                f"trinity_supported_dtypes names {name!r}, which is not a torch dtype name (e.g. 'bfloat16')"
            )
        for name, reason in support.unsupported.items():
            assert name not in support.supported, f"{name} is both supported and unsupported"
            assert reason, f"trinity_supported_dtypes must say why {name} is unsupported"
        assert backend.resolve_dtype("auto") == support.preferred

    def test_attention_implementation(self, backend: Backend) -> None:
        for dtype in backend.supported_dtypes().supported:
            choice = backend.attention_implementation(dtype)
            assert isinstance(choice, AttentionChoice)
            assert choice.implementation and choice.implementation.strip() == choice.implementation, (
                f"trinity_attention_implementation({dtype!r}) must name transformers' attn_implementation"
            )

    def test_dtype_answers_import_no_runtime(self) -> None:
        forbidden = ("torch", *self.heavy_modules)
        code = textwrap.dedent(
            f"""
            import json, sys
            from trinity.device.testing.conformance import _fresh_backend
            backend = _fresh_backend({self.backend_name!r})
            backend.attention_implementation(backend.supported_dtypes().preferred)
            print(json.dumps(sorted(m for m in {forbidden!r} if m in sys.modules)))
            """
        )
        env = {**os.environ, **self.probe_subprocess_env}
        env.pop(DEVICE_ENV, None)
        done = subprocess.run(
            [sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == 0, done.stderr
        imported = json.loads(done.stdout.strip().splitlines()[-1])
        assert imported == [], (
            f"trinity_supported_dtypes / trinity_attention_implementation of {self.backend_name} imported "
            f"{imported}: they are asked while a run is planned, where no device runtime may load"
        )
