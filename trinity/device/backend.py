"""A loaded, validated backend: its hooks resolved to direct callables.

pluggy checks the plugin against the spec when it is registered; after that
this class looks up, once, which implementation answers each hook (the
backend's or the default) and stores it as an attribute. Calling
``backend.synchronize()`` is then a plain function call with no dispatch.
"""

from __future__ import annotations

import datetime
import queue
import threading
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, TypeVar, cast, final

import pluggy

from trinity.device import spec
from trinity.device.defaults import DefaultHooks
from trinity.device.types import (
    AttentionChoice,
    BackendInfo,
    CollectiveGroup,
    CompileSupport,
    DoctorCheck,
    DtypeSupport,
    MemoryStats,
    OffloadSupport,
    ProbeResult,
)

_T = TypeVar("_T")

#: The config value that leaves the model dtype to the backend (its preferred dtype).
AUTO_DTYPE = "auto"
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


class _ProbeWorkers:
    """A few daemon threads that run probes, so probing 50 backends costs no 50 thread starts.

    Daemon threads, so a hung probe cannot keep the interpreter alive at exit;
    a hung probe holds one worker, and the others carry on with the queue.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)
        with self._lock:
            alive = [t for t in self._threads if t.is_alive()]
            if len(alive) < self._size:
                thread = threading.Thread(target=self._work, name=f"trinity-probe-{len(alive)}", daemon=True)
                thread.start()
                alive.append(thread)
            self._threads = alive

    def _work(self) -> None:
        while True:
            self._jobs.get()()


_PROBE_WORKERS = _ProbeWorkers(size=8)


def _spec_argnames(caller: pluggy.HookCaller) -> tuple[str, ...]:
    assert caller.spec is not None, f"{caller.name} has no specification"
    return tuple(caller.spec.argnames)


@final
class Backend:
    """One device backend, validated and ready to answer device questions.

    Each hook is answered by the backend's implementation when it has one,
    else by :class:`~trinity.device.defaults.DefaultHooks`. Construct through
    :func:`trinity.device.loader.load_plugin`; the
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
        self._defaults = DefaultHooks(info)
        self._probe: ProbeResult | None = None
        self._probe_lock = threading.Lock()
        self._probe_done: threading.Event | None = None
        self._probe_started = 0.0
        self._probe_cut_off = False
        self._resolved: dict[str, Callable[..., Any]] = {}
        for hook_name in spec.SINGLE_ANSWER_HOOKS:
            self._resolved[hook_name] = self._resolve(hook_name)
        if self.implements("trinity_device_module"):
            self._defaults.use_device_module(self._resolved["trinity_device_module"])
        self.set_device = self._resolved["trinity_set_device"]
        self.synchronize = self._resolved["trinity_synchronize"]
        self.current_device_index = self._resolved["trinity_current_device_index"]
        self.empty_cache = self._resolved["trinity_empty_cache"]
        self.manual_seed = self._resolved["trinity_manual_seed"]

    def _resolve(self, hook_name: str) -> Callable[..., Any]:
        """Return the backend's implementation of ``hook_name``, else the default's."""
        caller = getattr(self._manager.hook, hook_name)
        impls = self._own_impls(caller)
        if impls:
            # pluggy orders implementations so the last one is called first.
            return _adapt(impls[-1], _spec_argnames(caller))
        return cast(Callable[..., Any], getattr(self._defaults, hook_name))

    @property
    def name(self) -> str:
        """The backend's name (the entry point's name)."""
        return self.info.name

    def implements(self, hook_name: str) -> bool:
        """Return whether the backend itself (not the default) implements ``hook_name``."""
        caller = getattr(self._manager.hook, hook_name, None)
        return caller is not None and bool(self._own_impls(caller))

    def _own_impls(self, caller: pluggy.HookCaller) -> list[pluggy.HookImpl]:
        """This backend's implementations of one hook (the manager may hold other backends)."""
        return [impl for impl in caller.get_hookimpls() if impl.plugin is self.plugin]

    def start_probe(self) -> None:
        """Queue the probe on the background probe workers (no-op when queued already); see :meth:`probe`."""
        with self._probe_lock:
            if self._probe_done is None:
                self._probe_done = threading.Event()
                self._probe_started = time.monotonic()
                _PROBE_WORKERS.submit(self._run_probe)

    def probe(self, timeout_s: float = DEFAULT_PROBE_TIMEOUT_S) -> ProbeResult:
        """Return the probe's answer, computed once per process and bounded by ``timeout_s``.

        The limit counts from :meth:`start_probe`, so probes started together
        share one deadline. A probe that raises, returns the wrong type or
        does not answer in time yields an unavailable result that says so;
        this never raises.
        """
        self.start_probe()
        with self._probe_lock:
            if self._probe is not None:  # answered, or already cut off: a verdict is never waited for again
                return self._probe
        done = self._probe_done
        if done is not None:
            done.wait(max(0.0, self._probe_started + timeout_s - time.monotonic()))
        with self._probe_lock:
            if self._probe is None:
                # The verdict sticks: a late answer must not change what was already decided.
                self._probe = ProbeResult.unavailable(f"probe did not answer within {timeout_s:g} s")
                self._probe_cut_off = True
            return self._probe

    @property
    def probe_cut_off(self) -> bool:
        """Whether the probe was cut off by its time limit (the backend cost every caller that wait)."""
        return self._probe_cut_off

    def _run_probe(self) -> None:
        try:
            result = self._resolved["trinity_probe"]()
        except BaseException as exc:  # noqa: BLE001 - a plugin's fault must not escape
            result = ProbeResult.unavailable(f"probe raised {type(exc).__name__}: {exc}")
        if not isinstance(result, ProbeResult):
            result = ProbeResult.unavailable(
                f"probe returned {type(result).__name__}, expected ProbeResult (backend bug)"
            )
        with self._probe_lock:
            if self._probe is None:
                self._probe = result
        if self._probe_done is not None:
            self._probe_done.set()

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

    def stateless_process_group(
        self, collective: str, store: Any, *, rank: int, world_size: int, timeout: datetime.timedelta, group_name: str
    ) -> CollectiveGroup:
        """Return a ``collective`` group over ``store`` that needs no default process group (a rendezvous).

        Raises :class:`~trinity.device.errors.CollectiveGroupError` when the
        backend has no route for ``collective``, and whatever the collective
        raises when the members do not meet within ``timeout``.
        """
        return self._expect(
            "trinity_stateless_process_group", CollectiveGroup, collective, store, rank, world_size, timeout, group_name
        )

    def supported_dtypes(self) -> DtypeSupport:
        """Return the dtypes models compute in on this backend's device, the preferred one first."""
        support = self._expect("trinity_supported_dtypes", DtypeSupport)
        if not support.supported or not all(isinstance(d, str) and d for d in support.supported):
            from trinity.device.errors import DeviceError

            raise DeviceError(
                f"backend {self.name!r}: hook trinity_supported_dtypes returned no dtype names "
                f"({support.supported!r}); this is a bug in the backend package"
            )
        return support

    def resolve_dtype(self, requested: str) -> str:
        """Return the dtype models are loaded in for the config value ``requested``.

        ``"auto"`` becomes the backend's preferred dtype; any other name is
        returned when the device supports it. Raises
        :class:`~trinity.device.errors.UnsupportedDtypeError` with the
        backend's reason otherwise.
        """
        support = self.supported_dtypes()
        if requested == AUTO_DTYPE:
            return support.preferred
        if requested in support.supported:
            return requested
        from trinity.device.errors import UnsupportedDtypeError

        raise UnsupportedDtypeError(
            f"dtype {requested} is not supported on the {self.name} backend: {support.reason(requested)}; "
            f"use one of {', '.join(support.supported)} (or auto: {support.preferred})"
        )

    def attention_implementation(self, dtype: str) -> AttentionChoice:
        """Return the attention kernel (``attn_implementation``) to load models with in ``dtype``."""
        return self._expect("trinity_attention_implementation", AttentionChoice, dtype)

    def offload_support(self) -> OffloadSupport:
        """Return whether parameters and optimizer state may be offloaded to host memory, and how."""
        return self._expect("trinity_offload_support", OffloadSupport)

    def doctor(self) -> list[DoctorCheck]:
        """Run the backend's checks, then the core's; a raising or malformed check becomes a ``fail``."""
        checks: list[DoctorCheck] = []
        caller = self._manager.hook.trinity_doctor
        answers: list[tuple[str, Callable[[], Any]]] = [
            ("backend", _adapt(impl, _spec_argnames(caller))) for impl in reversed(self._own_impls(caller))
        ]
        answers.append(("core", self._defaults.trinity_doctor))
        for owner, run_checks in answers:
            try:
                found = run_checks()
                if not isinstance(found, list) or not all(isinstance(c, DoctorCheck) for c in found):
                    raise TypeError(f"trinity_doctor returned {type(found).__name__}, expected list[DoctorCheck]")
            except Exception as exc:  # noqa: BLE001 - report, never crash the doctor
                checks.append(
                    DoctorCheck(
                        f"{owner} doctor",
                        "fail",
                        f"check raised {type(exc).__name__}: {exc}",
                        fix=f"report this to the maintainers of the {self.name!r} backend",
                    )
                )
                continue
            checks.extend(found)
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
