"""A loaded, validated backend: its hooks resolved to direct callables.

pluggy checks the plugin against the spec when it is registered; after that
this class looks up, once, which implementation answers each hook (the
backend's or the default) and stores it as an attribute. Calling
``backend.synchronize()`` is then a plain function call with no dispatch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, TypeVar, cast, final

import pluggy

from trinity.device import spec
from trinity.device.types import BackendInfo, CompileSupport, DoctorCheck, MemoryStats, ProbeResult

_T = TypeVar("_T")

#: Seconds a probe may take before the backend is reported unavailable.
DEFAULT_PROBE_TIMEOUT_S = 10.0


def _adapt(impl: pluggy.HookImpl, spec_argnames: tuple[str, ...]) -> Callable[..., Any]:
    """Return ``impl``'s function callable with the spec's positional arguments."""
    function = impl.function
    if tuple(impl.argnames) == spec_argnames:
        return function
    positions = [spec_argnames.index(name) for name in impl.argnames]

    def call_with_subset(*args: Any) -> Any:
        return function(*(args[i] for i in positions))

    call_with_subset.__doc__ = function.__doc__
    return call_with_subset


@final
class Backend:
    """One device backend, validated and ready to answer device questions.

    Construct through :func:`trinity.device.loader.load_backend`; the
    attributes ``set_device``, ``synchronize`` and friends are the resolved
    implementations and may be called directly.
    """

    set_device: Callable[[int], None]
    synchronize: Callable[[], None]
    current_device_index: Callable[[], int]
    empty_cache: Callable[[], None]
    manual_seed: Callable[[int], None]

    def __init__(self, plugin: object, manager: pluggy.PluginManager, info: BackendInfo) -> None:
        self.plugin = plugin
        self.info = info
        self._manager = manager
        self._probe: ProbeResult | None = None
        self._probe_lock = threading.Lock()
        self._resolved: dict[str, Callable[..., Any]] = {}
        for hook_name in spec.SINGLE_ANSWER_HOOKS:
            caller = getattr(manager.hook, hook_name)
            impls = caller.get_hookimpls()
            # pluggy orders implementations so the last one is called first.
            self._resolved[hook_name] = _adapt(impls[-1], tuple(caller.spec.argnames))
        self.set_device = self._resolved["trinity_set_device"]
        self.synchronize = self._resolved["trinity_synchronize"]
        self.current_device_index = self._resolved["trinity_current_device_index"]
        self.empty_cache = self._resolved["trinity_empty_cache"]
        self.manual_seed = self._resolved["trinity_manual_seed"]

    @property
    def name(self) -> str:
        """The backend's name (the entry point's name)."""
        return self.info.name

    def implements(self, hook_name: str) -> bool:
        """Return whether the backend itself (not the default) implements ``hook_name``."""
        impls = getattr(self._manager.hook, hook_name).get_hookimpls()
        return any(impl.plugin is self.plugin for impl in impls)

    def probe(self, timeout_s: float = DEFAULT_PROBE_TIMEOUT_S) -> ProbeResult:
        """Return the probe's answer, computed once per process and bounded by ``timeout_s``.

        A probe that raises, returns the wrong type or does not answer in time
        yields an unavailable result that says so; it never raises.
        """
        with self._probe_lock:
            if self._probe is None:
                self._probe = self._run_probe(timeout_s)
            return self._probe

    def _run_probe(self, timeout_s: float) -> ProbeResult:
        outcome: list[ProbeResult] = []

        def target() -> None:
            try:
                result = self._resolved["trinity_probe"]()
            except BaseException as exc:  # noqa: BLE001 - a plugin's fault must not escape
                outcome.append(ProbeResult.unavailable(f"probe raised {type(exc).__name__}: {exc}"))
                return
            if not isinstance(result, ProbeResult):
                result = ProbeResult.unavailable(
                    f"probe returned {type(result).__name__}, expected ProbeResult (backend bug)"
                )
            outcome.append(result)

        # A daemon thread, so a hung probe cannot keep the interpreter alive at exit.
        worker = threading.Thread(target=target, name=f"trinity-probe-{self.name}", daemon=True)
        worker.start()
        worker.join(timeout_s)
        if not outcome:
            return ProbeResult.unavailable(f"probe did not answer within {timeout_s:g} s")
        return outcome[0]

    def compile_support(self) -> CompileSupport:
        """Return whether ``torch.compile`` works on this backend's device."""
        return self._expect("trinity_torch_compile_support", CompileSupport)

    def device_module(self) -> ModuleType:
        """Return the torch device module (imports the vendor extension if needed)."""
        return self._expect("trinity_device_module", ModuleType)

    def memory_stats(self) -> MemoryStats:
        """Return memory figures of the current device."""
        return self._expect("trinity_memory_stats", MemoryStats)

    def visible_devices_env(self, device_ids: Sequence[int]) -> dict[str, str]:
        """Return the environment restricting a process to ``device_ids``."""
        return cast(dict[str, str], self._expect("trinity_visible_devices_env", dict, list(device_ids)))

    def worker_env(self, self_managed_devices: bool = False) -> dict[str, str]:
        """Return the environment a Ray worker of this backend must be started with."""
        return cast(dict[str, str], self._expect("trinity_worker_env", dict, self_managed_devices))

    def doctor(self) -> list[DoctorCheck]:
        """Run every doctor check (default's and backend's); a raising check becomes a ``fail``."""
        checks: list[DoctorCheck] = []
        for impl in reversed(self._manager.hook.trinity_doctor.get_hookimpls()):
            owner = "backend" if impl.plugin is self.plugin else "core"
            try:
                found = impl.function()
            except Exception as exc:  # noqa: BLE001 - report, never crash the doctor
                checks.append(
                    DoctorCheck(f"{owner} doctor", "fail", f"check raised {type(exc).__name__}: {exc}",
                                fix=f"report this to the maintainers of the {self.name!r} backend")
                )
                continue
            checks.extend(check for check in cast(list[object], found or []) if isinstance(check, DoctorCheck))
        return checks

    def _expect(self, hook_name: str, kind: type[_T], *args: Any) -> _T:
        result = self._resolved[hook_name](*args)
        if not isinstance(result, kind):
            from trinity.device.errors import DeviceError

            raise DeviceError(
                f"backend {self.name!r}: hook {hook_name} returned {type(result).__name__}, "
                f"expected {kind.__name__}; this is a bug in the backend package"
            )
        return result

    def __repr__(self) -> str:
        return f"<Backend {self.name!r} device_type={self.info.device_type!r} priority={self.info.priority}>"
