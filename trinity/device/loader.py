"""Discovery and validation of backends published under ``trinity.backends``.

Each entry point is loaded and validated on its own: a backend that fails to
import, breaks the spec or clashes with another is recorded with its error and
skipped, and never takes the others down. The built-in CPU backend is always
present and cannot be shadowed.
"""

from __future__ import annotations

import difflib
import inspect
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Literal

import pluggy

from trinity.device import spec
from trinity.device.backend import Backend
from trinity.device.types import BackendInfo

BUILTIN_DISTRIBUTION = "trinity-rft"
#: What a backend name may look like: users type it in configs and TRINITY_DEVICE.
BACKEND_NAME = re.compile(r"[a-z][a-z0-9_-]*")


class PluginRejected(Exception):
    """Internal: why a plugin object was not accepted. Ends up in its record."""


@dataclass(frozen=True)
class BackendRecord:
    """What was found under one backend name: a loaded backend or the reason it was not."""

    #: Backend name (the entry point's name).
    name: str
    #: Distribution that provides it, e.g. ``trinity-backend-npu``; on a name clash every
    #: clashing distribution with its version, comma-separated (``version`` is then "").
    distribution: str
    #: That distribution's version ("" when unknown).
    version: str
    #: The entry point's value, e.g. ``trinity_backend_npu.plugin``.
    target: str
    #: ``ok`` when loaded and validated; ``broken`` otherwise.
    status: Literal["ok", "broken"]
    #: The loaded backend when ``status == "ok"``.
    backend: Backend | None = None
    #: Why it is broken: one line a user can act on.
    error: str = ""


class _TrinityPluginManager(pluggy.PluginManager):
    """A PluginManager that only inspects ``trinity_*`` names.

    pluggy inspects every attribute of a plugin statically; backends are
    modules with many unrelated names, and discovery runs at every start-up.
    """

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> pluggy.HookimplOpts | None:
        if not name.startswith(_HOOK_PREFIX):
            return None
        return super().parse_hookimpl_opts(plugin, name)

    def parse_hookspec_opts(self, module_or_class: Any, name: str) -> pluggy.HookspecOpts | None:
        if not name.startswith(_HOOK_PREFIX):
            return None
        return super().parse_hookspec_opts(module_or_class, name)


_HOOK_PREFIX = f"{spec.PROJECT_NAME}_"


def new_manager() -> pluggy.PluginManager:
    """Return a plugin manager that knows the DeviceBackend spec; one serves a whole discovery."""
    manager = _TrinityPluginManager(spec.PROJECT_NAME)
    manager.add_hookspecs(spec)
    return manager


def load_plugin(
    plugin: object, expected_name: str | None = None, manager: pluggy.PluginManager | None = None
) -> Backend:
    """Validate ``plugin`` against the spec and return it as a :class:`Backend`.

    ``manager`` (from :func:`new_manager`) may be shared by the backends of one
    discovery; each backend only ever answers with its own implementations.
    Raises :class:`PluginRejected` with a one-line reason when the plugin
    implements an unknown hook, uses an argument the spec does not declare,
    lacks a required hook, targets an unsupported spec version, or reports
    a name other than ``expected_name``; a rejected plugin is unregistered.
    """
    if inspect.isclass(plugin):
        cls = plugin
        try:
            plugin = cls()
        except Exception as exc:
            raise PluginRejected(f"instantiating {cls.__name__} raised {type(exc).__name__}: {exc}") from exc
    _reject_unmarked_hooks(plugin)
    manager = manager or new_manager()
    try:
        manager.register(plugin, name=f"backend-{id(plugin)}")
    except pluggy.PluginValidationError as exc:
        detail = _undeclared_arguments(plugin, manager, expected_name) or _first_line(exc)
        raise PluginRejected(f"does not match the DeviceBackend spec: {detail}") from exc
    except ValueError as exc:  # pluggy: this very object is registered already
        raise PluginRejected(f"is already loaded under another backend name ({exc})") from exc
    try:
        return _validated(plugin, expected_name, manager)
    except PluginRejected:
        manager.unregister(plugin)
        raise


def _validated(plugin: object, expected_name: str | None, manager: pluggy.PluginManager) -> Backend:
    callers = manager.get_hookcallers(plugin) or []
    unknown = sorted(caller.name for caller in callers if not caller.has_spec())
    if unknown:
        raise PluginRejected(
            f"does not match the DeviceBackend spec: unknown hook(s) {', '.join(_with_suggestion(n) for n in unknown)} "
            f"(this trinity-rft speaks spec {spec.SPEC_VERSION}; see trinity/device/spec.py)"
        )
    own = {caller.name for caller in callers}
    missing = [hook for hook in spec.REQUIRED_HOOKS if hook not in own]
    if missing:
        raise PluginRejected(f"does not implement the required hook(s) {', '.join(missing)}")
    info_impls = [impl for impl in manager.hook.trinity_backend_info.get_hookimpls() if impl.plugin is plugin]
    try:
        info = info_impls[-1].function()
    except Exception as exc:
        raise PluginRejected(f"trinity_backend_info raised {type(exc).__name__}: {exc}") from exc
    return Backend(plugin, manager, _checked_info(info, expected_name))


def spec_hook_names() -> list[str]:
    """Return the name of every hook the DeviceBackend spec declares."""
    return sorted(name for name in dir(spec) if name.startswith(_HOOK_PREFIX) and callable(getattr(spec, name)))


def _with_suggestion(hook_name: str) -> str:
    """Return ``hook_name``, plus the spec hook it is most likely a misspelling of."""
    # Compared without the shared prefix, which would make every name look alike.
    stems = [name.removeprefix(_HOOK_PREFIX) for name in spec_hook_names()]
    close = difflib.get_close_matches(hook_name.removeprefix(_HOOK_PREFIX), stems, n=1, cutoff=0.7)
    return f"{hook_name} (did you mean {_HOOK_PREFIX}{close[0]}?)" if close else hook_name


def _plugin_module(plugin: object) -> str:
    """Return the module a plugin object comes from (its own name when it is a module)."""
    if inspect.ismodule(plugin):
        return plugin.__name__
    return type(plugin).__module__


def _undeclared_arguments(plugin: object, manager: pluggy.PluginManager, expected_name: str | None) -> str | None:
    """Say which hook of ``plugin`` takes an argument its spec does not declare; None when none does."""
    for attr in sorted(dir(plugin)):
        caller = getattr(manager.hook, attr, None) if attr.startswith(_HOOK_PREFIX) else None
        if caller is None or caller.spec is None:
            continue
        try:
            taken = [
                p.name for p in inspect.signature(getattr(plugin, attr)).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
            ]
        except (TypeError, ValueError):
            continue
        declared = tuple(caller.spec.argnames)
        extra = [name for name in taken if name not in declared]
        if extra:
            who = f"backend {expected_name!r}" if expected_name else "the backend"
            return (
                f"{attr}({', '.join(taken)}) of {who} (module {_plugin_module(plugin)}) takes argument(s) "
                f"{', '.join(extra)} that the spec does not declare; the spec's arguments are "
                f"({', '.join(declared)}): rename them, or drop them"
            )
    return None


def _reject_unmarked_hooks(plugin: object) -> None:
    marker = f"{spec.PROJECT_NAME}_impl"
    for attr in dir(plugin):
        if not attr.startswith("trinity_"):
            continue
        value = getattr(plugin, attr, None)
        if callable(value) and not hasattr(value, marker):
            raise PluginRejected(f"{attr} is not marked with @trinity.device.hookimpl, so it would be ignored")


def _checked_info(info: object, expected_name: str | None) -> BackendInfo:
    """Return ``info`` once it is a well-formed BackendInfo for ``expected_name``."""
    if not isinstance(info, BackendInfo):
        raise PluginRejected(f"trinity_backend_info returned {type(info).__name__}, expected BackendInfo")
    if expected_name is not None and info.name != expected_name:
        raise PluginRejected(
            f"reports name {info.name!r} but is registered as {expected_name!r}; the two must be equal"
        )
    if not (spec.MIN_SPEC_VERSION <= info.spec_version <= spec.SPEC_VERSION):
        if info.spec_version > spec.SPEC_VERSION:
            hint = "upgrade trinity-rft (pip install -U trinity-rft)"
        else:
            hint = "upgrade the backend package"
        raise PluginRejected(
            f"written for DeviceBackend spec {info.spec_version}, this trinity-rft supports "
            f"{spec.MIN_SPEC_VERSION}..{spec.SPEC_VERSION}; {hint}"
        )
    for field_name in ("name", "device_type", "collective_backend"):
        if not isinstance(getattr(info, field_name), str) or not getattr(info, field_name):
            raise PluginRejected(f"BackendInfo.{field_name} must be a non-empty string")
    if not BACKEND_NAME.fullmatch(info.name):
        raise PluginRejected(
            f"backend name {info.name!r} must be lower case letters, digits, '_' or '-' (users type it)"
        )
    if not isinstance(info.priority, int) or isinstance(info.priority, bool):
        raise PluginRejected("BackendInfo.priority must be an int")
    prefixes = info.worker_env_prefixes
    if not isinstance(prefixes, tuple) or not all(isinstance(p, str) and p for p in prefixes):
        raise PluginRejected("BackendInfo.worker_env_prefixes must be a tuple of non-empty strings")
    for field_name in ("ray_resource_key", "visible_devices_env"):
        value = getattr(info, field_name)
        if value is not None and (not isinstance(value, str) or not value):
            raise PluginRejected(f"BackendInfo.{field_name} must be None or a non-empty string")
    return info


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return " ".join(text.split())


def builtin_records(manager: pluggy.PluginManager | None = None) -> list[BackendRecord]:
    """Return the record of the built-in CPU backend."""
    from trinity import __version__
    from trinity.device.backends import cpu

    return [
        BackendRecord(
            name="cpu",
            distribution=BUILTIN_DISTRIBUTION,
            version=__version__,
            target=cpu.__name__,
            status="ok",
            backend=load_plugin(cpu, expected_name="cpu", manager=manager),
        )
    ]


def discover(entry_points_found: Iterable[EntryPoint] | None = None) -> dict[str, BackendRecord]:
    """Load every installed backend and return the records by name, built-ins included.

    ``entry_points_found`` replaces the installed entry points (for tests).
    """
    manager = new_manager()
    records = {record.name: record for record in builtin_records(manager)}
    found = list(entry_points(group=spec.ENTRY_POINT_GROUP) if entry_points_found is None else entry_points_found)
    by_name: dict[str, list[EntryPoint]] = defaultdict(list)
    seen: set[tuple[str, str, str]] = set()
    for ep in found:
        key = (ep.name, _dist_name(ep), ep.value)
        if key in seen:  # the same distribution visible twice on sys.path
            continue
        seen.add(key)
        by_name[ep.name].append(ep)

    for name, eps in sorted(by_name.items()):
        if name in records:
            ep = eps[0]
            records[f"{name}@{_dist_name(ep)}"] = _broken(
                ep, f"the name {name!r} is reserved for the built-in backend; rename the entry point"
            )
            continue
        if len(eps) > 1:
            each = sorted(f"{_dist_name(ep)} {_dist_version(ep)}".strip() for ep in eps)
            dists = " and ".join(sorted(f"{_dist_name(ep)} {_dist_version(ep)} ({ep.value})" for ep in eps))
            records[name] = _broken(
                eps[0],
                f"backend name {name!r} is registered by {dists}; uninstall one of them",
                distribution=", ".join(each),
                version="",
            )
            continue
        records[name] = _load_entry_point(eps[0], manager)
    return records


def _load_entry_point(ep: EntryPoint, manager: pluggy.PluginManager) -> BackendRecord:
    try:
        plugin = ep.load()
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return _broken(ep, f"import of {ep.value} failed: {type(exc).__name__}: {_first_line(exc)}")
    try:
        backend = load_plugin(plugin, expected_name=ep.name, manager=manager)
    except PluginRejected as exc:
        return _broken(ep, f"{ep.value} {exc}")
    return BackendRecord(
        name=ep.name,
        distribution=_dist_name(ep),
        version=_dist_version(ep),
        target=ep.value,
        status="ok",
        backend=backend,
    )


def _broken(ep: EntryPoint, error: str, distribution: str | None = None, version: str | None = None) -> BackendRecord:
    return BackendRecord(
        name=ep.name,
        distribution=distribution or _dist_name(ep),
        version=_dist_version(ep) if version is None else version,
        target=ep.value,
        status="broken",
        error=error,
    )


def _dist_name(ep: EntryPoint) -> str:
    return _dist_facts(ep)[0]


def _dist_version(ep: EntryPoint) -> str:
    return _dist_facts(ep)[1]


_dist_cache: dict[int, tuple[object, tuple[str, str]]] = {}


def _dist_facts(ep: EntryPoint) -> tuple[str, str]:
    """Return (name, version) of ``ep``'s distribution; each METADATA file is parsed once."""
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "?", ""
    cached = _dist_cache.get(id(dist))
    if cached is not None and cached[0] is dist:
        return cached[1]
    metadata = dist.metadata
    facts = (str(metadata["Name"]), str(metadata["Version"]))
    _dist_cache[id(dist)] = (dist, facts)
    return facts
