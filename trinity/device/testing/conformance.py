"""The reusable pytest suite every device backend must pass."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import entry_points
from typing import Any, ClassVar, TypeVar

import pytest

from trinity.device import facade
from trinity.device.backend import Backend
from trinity.device.loader import load_plugin
from trinity.device.selection import DEVICE_ENV, RESOLVED_ENV
from trinity.device.spec import (
    ENTRY_POINT_GROUP,
    FIRST_CORE_BY_SPEC,
    MIN_SPEC_VERSION,
    SPEC_VERSION,
    core_requirement,
)
from trinity.device.types import (
    AttentionChoice,
    CollectiveGroup,
    CompileSupport,
    DoctorCheck,
    DtypeSupport,
    MemoryStats,
    OffloadSupport,
    ProbeResult,
)

_T = TypeVar("_T")

_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")

#: The vendor guide, relative to the repository root; each failure message points at a section of it.
GUIDE = "docs/backends.md"
_NEEDS = "the-hooks-your-device-needs"
_REQUIRED = "required-trinity_backend_info-and-trinity_probe"
_OPTIONAL = "optional-hooks-and-their-defaults"
_OWN_TYPE = "your-own-torch-device-type"
_NO_INIT = "the-no-initialisation-rule"
_ENTRY_POINT = "the-entry-point"
_BROKEN = "when-a-backend-is-broken"
_GROUPS = "weight-sync-groups"
_DTYPES = "optional-hooks-and-their-defaults"
_SPECS = "spec-versions"


def fix(what: str, section: str) -> str:
    """Return ``"<what> (see docs/backends.md#<section>)"``: the tail of every kit failure message."""
    return f"{what} (see {GUIDE}#{section})"


def _call(hooks: str, section: str, function: Callable[..., _T], *args: Any) -> _T:
    """Call ``function``; if it raises, fail saying which hook to implement or fix, and where the guide says how."""
    try:
        return function(*args)
    except Exception as exc:  # noqa: BLE001 - turned into a failure that names the hook
        pytest.fail(f"{type(exc).__name__}: {exc}; " + fix(f"implement or fix {hooks}", section))


def core_requirement_problem(requires: list[str] | None, spec_version: int) -> str | None:
    """Return what is wrong with a backend distribution's requirement on trinity-rft for ``spec_version``, or None.

    A backend written for spec N must let pip refuse every trinity-rft that
    does not speak N (those before ``FIRST_CORE_BY_SPEC[N]``) and accept the
    core it is tested with.
    """
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from trinity import __version__ as core_version

    found = [Requirement(line) for line in requires or ()]
    on_core = [r for r in found if canonicalize_name(r.name) == "trinity-rft" and r.marker is None]
    if not on_core:
        return "the distribution does not depend on trinity-rft, so pip cannot keep it off a core too old for it"
    specifier = on_core[0].specifier
    older = [f"{FIRST_CORE_BY_SPEC[v]}.0" for v in FIRST_CORE_BY_SPEC if v < spec_version]
    admitted = [v for v in older if specifier.contains(v, prereleases=True)]
    if admitted:
        return (f"it is written for spec {spec_version}, but its requirement {on_core[0]} admits trinity-rft "
                f"{', '.join(admitted)}, which does not speak spec {spec_version}")
    if not specifier.contains(core_version, prereleases=True):
        return f"its requirement {on_core[0]} excludes the trinity-rft {core_version} it is being tested with"
    return None


def _fresh_backend(name: str) -> Backend:
    """Load the installed backend ``name`` anew, so no earlier probe result is reused."""
    if name == "cpu":
        from trinity.device.backends import cpu

        return load_plugin(cpu, expected_name="cpu")
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    assert matches, f"no entry point named {name!r} in group {ENTRY_POINT_GROUP!r}: " + fix(
        "install the package (pip install -e .) and declare the entry point", _ENTRY_POINT)
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
        assert probe.available, f"{self.backend_name} probes unavailable ({probe.reason}); " + fix(
            "run the kit on the device, or override the device_runtime fixture with a double of the vendor "
            "runtime that trinity_probe sees", "testing-with-the-conformance-kit")
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
        assert self.backend_name in records, f"{self.backend_name!r} is not under {ENTRY_POINT_GROUP}; " + fix(
            "declare the entry point in pyproject.toml and install the package", _ENTRY_POINT)
        facade.reset()
        try:
            record = facade.get_backend_record(self.backend_name)
            assert record is not None, fix(f"the loader found no backend {self.backend_name!r}", _ENTRY_POINT)
            assert record.status == "ok", f"the backend is broken: {record.error}; " + fix(
                "fix what the error names", _BROKEN)
        finally:
            facade.reset()

    def test_info_is_well_formed(self, backend: Backend) -> None:
        info = backend.info

        def bad(field: str, value: object, expected: str) -> str:
            return f"BackendInfo.{field} is {value!r}, expected {expected}; " + fix(
                "return it from trinity_backend_info", _REQUIRED)

        assert info.name == self.backend_name, bad("name", info.name, f"{self.backend_name!r}, the entry point's name")
        assert MIN_SPEC_VERSION <= info.spec_version <= SPEC_VERSION, bad(
            "spec_version", info.spec_version, f"{MIN_SPEC_VERSION}..{SPEC_VERSION}")
        assert re.fullmatch(r"[a-z][a-z0-9_]*", info.device_type), bad(
            "device_type", info.device_type, "a torch device type such as 'cuda' or 'npu'")
        assert info.collective_backend and info.collective_backend.islower(), bad(
            "collective_backend", info.collective_backend, "a lower-case torch.distributed backend ('nccl', 'gloo')")
        assert isinstance(info.priority, int), bad("priority", info.priority, "an int")
        if info.visible_devices_env is not None:
            assert _ENV_NAME.match(info.visible_devices_env), bad(
                "visible_devices_env", info.visible_devices_env, "an environment variable name or None")
        if info.ray_resource_key is not None:
            assert info.ray_resource_key and info.ray_resource_key != "CPU", bad(
                "ray_resource_key", info.ray_resource_key, "the key one device is scheduled by (not 'CPU'), or None")
        for prefix in info.worker_env_prefixes:
            assert _ENV_NAME.match(prefix.rstrip("_") or "X"), bad(
                "worker_env_prefixes", prefix, "environment variable prefixes such as 'HCCL_'")

    def test_requires_the_core_that_speaks_its_spec(self, backend: Backend) -> None:
        if self.backend_name == "cpu":
            return  # shipped inside trinity-rft
        (point,) = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == self.backend_name]
        requires = point.dist.requires if point.dist is not None else None
        problem = core_requirement_problem(requires, backend.info.spec_version)
        assert problem is None, problem + "; " + fix(
            f"declare {core_requirement(backend.info.spec_version)} in pyproject.toml's dependencies", _SPECS)

    def test_probe_without_device_explains_itself(self) -> None:
        probe = _fresh_backend(self.backend_name).probe()
        assert isinstance(probe, ProbeResult), fix("return a ProbeResult from trinity_probe", _REQUIRED)
        if probe.available:
            assert probe.device_count >= 1, f"trinity_probe says available with {probe.device_count} devices; " + fix(
                "count the devices this process may use", _REQUIRED)
        else:
            assert probe.device_count == 0, f"an unavailable probe reports {probe.device_count} devices; " + fix(
                "return ProbeResult.unavailable(reason) from trinity_probe", _REQUIRED)
            assert len(probe.reason) > 10, f"an unavailable probe must tell the user why, got {probe.reason!r}; " + fix(
                "give trinity_probe's reason: what is missing and what to install or set", _REQUIRED)

    def _heavy_imports_after(self, calls: str) -> tuple[str | None, list[str]]:
        """Run ``calls`` on a freshly loaded backend in a new interpreter; return (its error, heavy modules imported).

        ``calls`` is Python with ``backend`` in scope. The error is the
        interpreter's stderr when it failed, else None.
        """
        forbidden = ("torch", *self.heavy_modules)
        code = "\n".join([
            "import json, sys",
            "from trinity.device.testing.conformance import _fresh_backend",
            f"backend = _fresh_backend({self.backend_name!r})",
            *textwrap.dedent(calls).strip().splitlines(),
            f"print(json.dumps(sorted(m for m in {forbidden!r} if m in sys.modules)))",
        ])
        env = {**os.environ, **self.probe_subprocess_env}
        env.pop(DEVICE_ENV, None)
        done = subprocess.run(
            [sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=120
        )
        if done.returncode != 0:
            return done.stderr, []
        return None, json.loads(done.stdout.strip().splitlines()[-1])

    def test_probe_imports_no_runtime(self) -> None:
        error, imported = self._heavy_imports_after("backend.info\nbackend.probe()\nbackend.compile_support()")
        assert error is None, f"loading and probing in a fresh interpreter failed: {error}; " + fix(
            "make the plugin module, trinity_backend_info and trinity_probe work without the device runtime", _NO_INIT)
        assert imported == [], f"loading/probing {self.backend_name} imported {imported}; " + fix(
            "import them only inside trinity_device_module and the hooks that use the device, never at module "
            "import, in trinity_backend_info or in trinity_probe", _NO_INIT)

    def test_probe_reports_devices(self, available_backend: Backend) -> None:
        probe = available_backend.probe()
        assert probe.device_count >= 1, fix("make trinity_probe count the devices it found", _REQUIRED)

    # --- behaviour on the device ---------------------------------------------------------

    def test_set_device_makes_it_current(self, available_backend: Backend) -> None:
        count = available_backend.probe().device_count
        indices = [0] if self.backend_name == "cpu" else list(reversed(range(min(count, 2))))
        hooks = "trinity_set_device and trinity_current_device_index"
        for index in indices:
            _call("trinity_set_device", _NEEDS, available_backend.set_device, index)
            current = _call("trinity_current_device_index", _NEEDS, available_backend.current_device_index)
            assert current == index, (
                f"after set_device({index}), current_device_index() is {current!r}: the device module "
                f"({available_backend.info.device_type!r}) does not track your device index; " + fix(
                    f"implement {hooks} (needed when the device computes through a torch device type that is "
                    "not its own, such as 'cpu')", _NEEDS)
            )

    def test_synchronize_and_empty_cache(self, available_backend: Backend) -> None:
        _call("trinity_set_device", _NEEDS, available_backend.set_device, 0)
        _call("trinity_synchronize (or trinity_device_module)", _OPTIONAL, available_backend.synchronize)
        _call("trinity_empty_cache (or trinity_device_module)", _OPTIONAL, available_backend.empty_cache)
        _call("trinity_synchronize (or trinity_device_module)", _OPTIONAL, available_backend.synchronize)

    def test_memory_stats(self, available_backend: Backend) -> None:
        stats = _call("trinity_memory_stats", _OPTIONAL, available_backend.memory_stats)
        assert isinstance(stats, MemoryStats), fix("return a MemoryStats from trinity_memory_stats", _OPTIONAL)
        for value in (stats.allocated, stats.reserved, stats.total, stats.free):
            assert isinstance(value, int) and value >= 0, f"memory figure {value!r} is not a byte count; " + fix(
                "implement trinity_memory_stats returning non-negative ints", _OPTIONAL)
        if stats.total:
            assert stats.free <= stats.total, f"free {stats.free} > total {stats.total}; " + fix(
                "fix trinity_memory_stats", _OPTIONAL)

    def test_manual_seed_makes_torch_reproducible(self, available_backend: Backend) -> None:
        import torch

        _call("trinity_manual_seed", _OPTIONAL, available_backend.manual_seed, 1234)
        first = torch.rand(4)
        available_backend.manual_seed(1234)
        assert torch.equal(first, torch.rand(4)), "seeding twice gave different numbers; " + fix(
            "implement trinity_manual_seed so it also seeds torch's CPU generator", _OPTIONAL)

    def test_device_module(self, available_backend: Backend) -> None:
        module = _call("trinity_device_module", _OWN_TYPE, available_backend.device_module)
        for name in ("synchronize", "device_count", "set_device", "current_device"):
            assert callable(getattr(module, name, None)), f"device module {module.__name__} lacks {name}(); " + fix(
                "implement trinity_device_module returning your torch extension's device module", _OWN_TYPE)

    def test_compile_support(self, backend: Backend) -> None:
        support = _call("trinity_torch_compile_support", _OPTIONAL, backend.compile_support)
        assert isinstance(support, CompileSupport), fix(
            "return a CompileSupport from trinity_torch_compile_support", _OPTIONAL)
        if not support.supported:
            assert support.reason, "an unsupported torch.compile must say why; " + fix(
                "give CompileSupport a reason in trinity_torch_compile_support", _OPTIONAL)

    def test_visible_devices_env(self, backend: Backend) -> None:
        env = _call("trinity_visible_devices_env", _OPTIONAL, backend.visible_devices_env, [1, 0])
        var = backend.info.visible_devices_env
        if var is None:
            assert env == {}, f"no visible_devices_env in BackendInfo, yet the hook returned {env}; " + fix(
                "return {} from trinity_visible_devices_env", _OPTIONAL)
            return
        wrong = f"visible_devices_env([1, 0]) returned {env}; " + fix(
            f"return {{{var!r}: '0,1' or '1,0'}} from trinity_visible_devices_env", _OPTIONAL)
        assert set(env) == {var}, wrong
        assert sorted(int(i) for i in env[var].split(",")) == [0, 1], wrong

    def test_worker_env(self, backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
        info = backend.info
        for prefix in info.worker_env_prefixes:
            monkeypatch.setenv(f"{prefix}CONFORMANCE_PROBE", "1")
        if info.visible_devices_env:
            monkeypatch.setenv(info.visible_devices_env, "0")
        env = _call("trinity_worker_env", _OPTIONAL, backend.worker_env, False)
        hint = "build trinity_worker_env on trinity.device.defaults.forwarded_env"
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()), fix(
            f"return str -> str from trinity_worker_env; {hint}", _OPTIONAL)
        for prefix in info.worker_env_prefixes:
            assert env.get(f"{prefix}CONFORMANCE_PROBE") == "1", f"{prefix}* is not forwarded to workers; " + fix(
                hint, _OPTIONAL)
        if info.visible_devices_env:
            assert info.visible_devices_env not in env, "Ray owns the visible-devices variable; " + fix(
                f"leave {info.visible_devices_env} out of trinity_worker_env; {hint}", _OPTIONAL)
            managed = backend.worker_env(True)
            assert managed.get(f"RAY_EXPERIMENTAL_NOSET_{info.visible_devices_env}") == "1", fix(
                f"with self_managed_devices, set RAY_EXPERIMENTAL_NOSET_{info.visible_devices_env}=1; {hint}",
                _OPTIONAL)

    def test_doctor(self, backend: Backend) -> None:
        checks = backend.doctor()
        assert checks and all(isinstance(c, DoctorCheck) for c in checks), fix(
            "return a list of DoctorCheck from trinity_doctor", _OPTIONAL)
        for check in checks:
            assert check.status in ("ok", "warn", "fail"), f"check {check.name!r} has status {check.status!r}; " + fix(
                "use 'ok', 'warn' or 'fail' in trinity_doctor", _OPTIONAL)
            if check.status == "fail":
                assert check.fix, f"failing check {check.name!r} must say how to fix it; " + fix(
                    "give every failing DoctorCheck a fix in trinity_doctor", _OPTIONAL)

    # --- through the façade ------------------------------------------------------------------

    def test_selected_through_environment(self, selected: Backend) -> None:
        info = selected.info
        where = fix("the façade must answer from your BackendInfo; check trinity_backend_info", _REQUIRED)
        assert facade.current_backend().name == self.backend_name, where
        assert facade.get_device_type() == info.device_type, where
        assert facade.get_collective_backend() == info.collective_backend, where
        assert facade.get_ray_resource_key() == info.ray_resource_key, where
        pg = facade.get_process_group_backend()
        if info.device_type == "cpu":
            assert pg == f"cpu:{info.collective_backend}", where
        else:
            assert pg == f"cpu:gloo,{info.device_type}:{info.collective_backend}", where
        env = _call("trinity_worker_env", _OPTIONAL, facade.worker_env)
        assert env[DEVICE_ENV] == self.backend_name and env[RESOLVED_ENV] == "1", fix(
            "keep TRINITY_DEVICE and TRINITY_DEVICE_RESOLVED out of trinity_worker_env", _OPTIONAL)
        _call("trinity_synchronize", _OPTIONAL, facade.synchronize)
        device_id = _call("trinity_current_device_index", _NEEDS, facade.get_device_id)
        assert device_id >= 0, f"get_device_id() is {device_id}; " + fix(
            "return the current index from trinity_current_device_index", _NEEDS)

    # --- stateless collective groups (trinity_stateless_process_group) ----------------------

    #: Device type of the tensors the kit broadcasts through the backend's own collective;
    #: None: the group's ``device_type``. A suite whose collective is a test double that moves
    #: CPU tensors sets ``"cpu"``.
    collective_tensor_device: ClassVar[str | None] = None

    def _stateless_collectives(self, backend: Backend) -> list[tuple[str, int, str | None]]:
        """``(collective, world size, tensor device type)`` to try: gloo, and the backend's own on its devices."""
        info = backend.info
        tried: list[tuple[str, int, str | None]] = [("gloo", 2, None)]
        if info.collective_backend != "gloo":
            # One rank per device, as device collectives require.
            world = max(1, min(2, backend.probe().device_count))
            tried.append((info.collective_backend, world, self.collective_tensor_device))
        return tried

    def test_stateless_group_broadcasts(self, available_backend: Backend) -> None:
        for collective, world, tensor_device in self._stateless_collectives(available_backend):
            outcomes = broadcast_through_stateless_group(available_backend, collective, world, tensor_device)
            for rank in range(world):
                outcome = outcomes.get(rank)
                assert not isinstance(outcome, BaseException), (
                    f"trinity_stateless_process_group({collective!r}) rank {rank} of {world} failed: "
                    f"{type(outcome).__name__}: {outcome}; " + fix("implement or fix trinity_stateless_process_group",
                                                                    _GROUPS)
                )
                assert outcome is not None, f"rank {rank} of the {collective!r} group did not finish in time; " + fix(
                    "trinity_stateless_process_group must build a group every rank can join", _GROUPS)
                group, received = outcome
                expected_type = "cpu" if collective == "gloo" else available_backend.info.device_type
                assert group.collective == collective and group.device_type == expected_type, f"{group}; " + fix(
                    "return a CollectiveGroup naming the collective asked for and its tensors' device type", _GROUPS)
                assert received == [float(i) for i in range(8)], f"rank {rank} received {received}; " + fix(
                    "the group returned by trinity_stateless_process_group must broadcast from rank 0", _GROUPS)

    def test_stateless_group_refuses_unknown_collective(self, backend: Backend) -> None:
        import datetime

        from torch.distributed import HashStore  # type: ignore[attr-defined]

        from trinity.device.errors import CollectiveGroupError

        with pytest.raises(CollectiveGroupError, match="trinity_stateless_process_group"):
            backend.stateless_process_group(
                "no-such-collective", HashStore(), rank=0, world_size=1,
                timeout=datetime.timedelta(seconds=5), group_name="kit-unknown",
            )


    # --- model dtypes and attention --------------------------------------------------------------

    def test_supported_dtypes(self, backend: Backend) -> None:
        import torch

        support = backend.supported_dtypes()
        assert isinstance(support, DtypeSupport), fix("return a DtypeSupport from trinity_supported_dtypes", _DTYPES)
        for name in support.supported:
            assert isinstance(getattr(torch, name, None), torch.dtype), (
                f"trinity_supported_dtypes names {name!r}, which is not a torch dtype name (e.g. 'bfloat16'); "
                + fix("name dtypes as torch does", _DTYPES)
            )
        for name, reason in support.unsupported.items():
            assert name not in support.supported, f"{name} is both supported and unsupported; " + fix(
                "list a dtype in one of trinity_supported_dtypes' fields only", _DTYPES)
            assert reason, fix(f"trinity_supported_dtypes must say why {name} is unsupported", _DTYPES)
        assert backend.resolve_dtype("auto") == support.preferred, fix(
            "the first supported dtype is what auto becomes", _DTYPES)

    def test_attention_implementation(self, backend: Backend) -> None:
        for dtype in backend.supported_dtypes().supported:
            choice = backend.attention_implementation(dtype)
            assert isinstance(choice, AttentionChoice), fix(
                "return an AttentionChoice from trinity_attention_implementation", _DTYPES)
            assert choice.implementation and choice.implementation.strip() == choice.implementation, fix(
                f"trinity_attention_implementation({dtype!r}) must name transformers' attn_implementation", _DTYPES)

    def test_offload_support(self, backend: Backend) -> None:
        support = backend.offload_support()
        assert isinstance(support, OffloadSupport), fix(
            "return an OffloadSupport from trinity_offload_support", _DTYPES)
        if not support.supported:
            assert support.reason.strip(), fix(
                "trinity_offload_support must say why offload is not supported (users see it when refused)", _DTYPES)

    def test_dtype_answers_import_no_runtime(self) -> None:
        error, imported = self._heavy_imports_after(
            "backend.attention_implementation(backend.supported_dtypes().preferred); backend.offload_support()")
        assert error is None, f"{error}; " + fix(
            "trinity_supported_dtypes and trinity_attention_implementation must answer without the device", _NO_INIT)
        assert imported == [], (
            f"trinity_supported_dtypes / trinity_attention_implementation of {self.backend_name} imported "
            f"{imported}: they are asked while a run is planned, where no device runtime may load; "
            + fix("import the device runtime only inside the hooks that need the device", _NO_INIT)
        )


def broadcast_through_stateless_group(
    backend: Backend, collective: str, world_size: int, tensor_device: str | None = None, timeout_s: float = 60.0
) -> dict[int, tuple[CollectiveGroup, list[float]] | BaseException]:
    """Build a ``collective`` group of ``world_size`` threads over one in-process store; rank 0 broadcasts 0..7.

    Returns, per rank, ``(CollectiveGroup, received values)`` or the exception
    that rank raised; a rank missing from the answer did not finish within
    ``timeout_s``. Each rank of a device collective first makes device
    ``rank`` current. No default process group is created.
    """
    import datetime
    import threading

    import torch
    from torch.distributed import HashStore, PrefixStore  # type: ignore[attr-defined]

    store = HashStore()
    name = f"kit-{collective}-{world_size}"
    outcomes: dict[int, tuple[CollectiveGroup, list[float]] | BaseException] = {}

    def member(rank: int) -> None:
        try:
            on_device = collective != "gloo" and backend.info.device_type != "cpu"
            if on_device:
                backend.set_device(rank)
            group = backend.stateless_process_group(
                collective, PrefixStore(name, store), rank=rank, world_size=world_size,
                timeout=datetime.timedelta(seconds=timeout_s), group_name=name,
            )
            device_type = tensor_device or group.device_type
            device = torch.device(device_type, rank) if device_type != "cpu" else torch.device("cpu")
            tensor = torch.arange(8, dtype=torch.float32, device=device)
            if rank != 0:
                tensor.zero_()
            group.process_group.broadcast(tensor, 0).wait()
            outcomes[rank] = (group, tensor.cpu().tolist())
            shutdown = getattr(group.process_group, "shutdown", None)
            if shutdown is not None:
                shutdown()
        except BaseException as exc:  # noqa: BLE001 - handed to the test, which reports it
            outcomes[rank] = exc

    threads = [threading.Thread(target=member, args=(rank,), daemon=True) for rank in range(world_size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s + 30)
    return outcomes
