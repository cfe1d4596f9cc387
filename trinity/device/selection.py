"""Choosing the backend for this run.

1. An explicit choice (argument/config, or ``TRINITY_DEVICE``) wins and is
   validated: unknown, broken or unavailable is an error, never a fallback.
2. ``auto`` takes the available backend with the highest priority (CPU last);
   a tie is broken by name and warned about.
3. With Ray cluster resources given and no local accelerator, the cluster
   decides: an installed backend whose resource key the cluster offers.
4. A choice handed down by the driver (``TRINITY_DEVICE_RESOLVED=1``) is
   trusted by workers without probing again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from trinity.device.backend import DEFAULT_PROBE_TIMEOUT_S, Backend
from trinity.device.errors import (
    BackendLoadError,
    BackendUnavailableError,
    ConflictingChoiceError,
    UnknownBackendError,
)
from trinity.device.loader import BackendRecord

logger = logging.getLogger("trinity.device")

#: Environment variable holding an explicit backend name (or ``auto``).
DEVICE_ENV = "TRINITY_DEVICE"
#: Set to ``1`` by the driver for its workers: trust ``TRINITY_DEVICE`` as decided.
RESOLVED_ENV = "TRINITY_DEVICE_RESOLVED"
#: Seconds a probe may take (float); default 10.
PROBE_TIMEOUT_ENV = "TRINITY_PROBE_TIMEOUT"

#: Backends we publish ourselves, and the pip command that adds each.
KNOWN_BACKEND_EXTRAS = {
    "cuda": "pip install 'trinity-rft[cuda]'",
    "npu": "pip install 'trinity-rft[npu]'",
}
#: Common spellings users type for a backend name.
ALIASES = {"gpu": "cuda", "nvidia": "cuda", "ascend": "npu"}

Source = Literal["argument", "environment", "driver", "auto", "cluster"]


@dataclass(frozen=True)
class Selection:
    """The chosen backend and why it was chosen."""

    #: The backend every device question goes to.
    backend: Backend
    #: Where the decision came from.
    source: Source
    #: One sentence for logs and ``trinity backends list``.
    reason: str

    @property
    def name(self) -> str:
        """Name of the chosen backend."""
        return self.backend.name


def probe_timeout(environ: Mapping[str, str]) -> float:
    """Return the probe time limit from ``TRINITY_PROBE_TIMEOUT``, validated."""
    raw = environ.get(PROBE_TIMEOUT_ENV, "")
    if not raw:
        return DEFAULT_PROBE_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        from trinity.device.errors import InvalidDeviceRequestError

        raise InvalidDeviceRequestError(
            f"{PROBE_TIMEOUT_ENV}={raw!r} is not a positive number of seconds; unset it or set e.g. 10"
        )
    return value


def normalise_choice(choice: str | None) -> str | None:
    """Return the backend name in ``choice``, or None for ``auto``/empty."""
    if choice is None:
        return None
    name = choice.strip().lower()
    if name in ("", "auto"):
        return None
    return ALIASES.get(name, name)


def select(
    records: Mapping[str, BackendRecord],
    choice: str | None = None,
    environ: Mapping[str, str] | None = None,
    cluster_resources: Mapping[str, float] | None = None,
) -> Selection:
    """Return the backend to use, by the rules in this module's docstring.

    ``choice`` is the explicit argument or config value (``None``/``"auto"``
    for none); ``environ`` defaults to ``os.environ``; ``cluster_resources`` is
    ``ray.cluster_resources()`` when the driver is connected to Ray.
    Raises :class:`UnknownBackendError`, :class:`BackendLoadError`,
    :class:`BackendUnavailableError` or :class:`ConflictingChoiceError`.
    """
    env = os.environ if environ is None else environ
    timeout_s = probe_timeout(env)
    from_argument = normalise_choice(choice)
    from_env = normalise_choice(env.get(DEVICE_ENV))
    if from_argument and from_env and from_argument != from_env:
        raise ConflictingChoiceError(
            f"the device is set twice and the values disagree: {from_argument!r} in the config/argument "
            f"and {DEVICE_ENV}={env.get(DEVICE_ENV)!r}; remove one of them"
        )
    if from_argument:
        return _explicit(records, from_argument, "argument", timeout_s, cluster_resources)
    if from_env:
        if env.get(RESOLVED_ENV) == "1":
            backend = _installed(records, from_env, f"{DEVICE_ENV}={env.get(DEVICE_ENV)}")
            return Selection(backend, "driver", f"{DEVICE_ENV}={from_env} handed down by the driver")
        return _explicit(records, from_env, "environment", timeout_s, cluster_resources)
    return _auto(records, timeout_s, cluster_resources)


def _installed(records: Mapping[str, BackendRecord], name: str, where: str) -> Backend:
    record = records.get(name)
    if record is None:
        installed = ", ".join(sorted(r.name for r in records.values() if r.status == "ok"))
        hint = KNOWN_BACKEND_EXTRAS.get(name)
        fix = f"install it with: {hint}" if hint else "install the package that provides it, or pick an installed one"
        raise UnknownBackendError(
            f"unknown device backend {name!r} ({where}); installed: {installed}; {fix}"
        )
    if record.status != "ok" or record.backend is None:
        raise BackendLoadError(
            f"device backend {name!r} ({where}) from {record.distribution} is installed but broken: {record.error}"
        )
    return record.backend


def _explicit(
    records: Mapping[str, BackendRecord],
    name: str,
    source: Source,
    timeout_s: float,
    cluster_resources: Mapping[str, float] | None,
) -> Selection:
    where = "argument/config" if source == "argument" else f"{DEVICE_ENV} environment variable"
    backend = _installed(records, name, where)
    probe = backend.probe(timeout_s)
    if probe.available:
        return Selection(backend, source, f"{name} requested by the {where}")
    key = backend.info.ray_resource_key
    if cluster_resources and key and cluster_resources.get(key, 0) > 0:
        return Selection(
            backend,
            source,
            f"{name} requested by the {where}; not usable on this node ({probe.reason}) "
            f"but the Ray cluster offers {key}: {cluster_resources[key]:g}",
        )
    offer = ""
    if cluster_resources is not None and key:
        offer = f"; nor does the Ray cluster offer any {key} (`ray status` lists what its nodes offer)"
    raise BackendUnavailableError(
        f"device backend {name!r} was requested by the {where} but is not available: {probe.reason}{offer}"
    )


def slow_probe_remedy(distribution: str) -> str:
    """Return what a user does about a probe of ``distribution`` that is cut off by the time limit."""
    return (f"name the device you use ({DEVICE_ENV}=..., or cluster.device) so no other backend is probed, fix or "
            f"uninstall {distribution}, or lower {PROBE_TIMEOUT_ENV}")


def slow_probe_advice(name: str, distribution: str, timeout_s: float) -> str:
    """Return the line saying that backend ``name``'s probe was cut off, what that costs, and what to do."""
    return (
        f"device backend {name!r} ({distribution}): its probe did not answer within {timeout_s:g} s, and every "
        f"`trinity backends list` and auto device selection waits that long for it; {slow_probe_remedy(distribution)}"
    )


def probe_all(backends: list[Backend], timeout_s: float) -> None:
    """Probe ``backends`` concurrently, under one shared deadline of ``timeout_s``."""
    for backend in backends:
        backend.start_probe()
    for backend in backends:
        backend.probe(timeout_s)


def _auto(
    records: Mapping[str, BackendRecord], timeout_s: float, cluster_resources: Mapping[str, float] | None
) -> Selection:
    backends = [r.backend for r in records.values() if r.status == "ok" and r.backend is not None]
    probe_all(backends, timeout_s)
    for record in records.values():
        if record.backend is not None and record.backend.probe_cut_off:
            logger.warning("%s", slow_probe_advice(record.name, record.distribution, timeout_s))
    broken = sorted(name for name, r in records.items() if r.status != "ok")
    if broken:
        logger.warning(
            "device backends skipped because they are broken: %s (see `trinity backends list`)", ", ".join(broken)
        )
    available = [b for b in backends if b.probe(timeout_s).available]
    accelerators = [b for b in available if b.info.ray_resource_key]
    if not accelerators and cluster_resources:
        offered = [
            b for b in backends if b.info.ray_resource_key and cluster_resources.get(b.info.ray_resource_key, 0) > 0
        ]
        if offered:
            chosen = _highest(offered, "in the Ray cluster")
            key = chosen.info.ray_resource_key
            return Selection(
                chosen,
                "cluster",
                f"no accelerator on this node, and the Ray cluster offers {key}: "
                f"{cluster_resources[key or '']:g} (priority {chosen.info.priority})",
            )
    chosen = _highest(available, "on this node")
    others = [b.name for b in backends if b is not chosen and not b.probe(timeout_s).available]
    note = f"; unavailable: {', '.join(sorted(others))}" if others else ""
    probe = chosen.probe(timeout_s)
    return Selection(
        chosen,
        "auto",
        f"highest-priority available backend (priority {chosen.info.priority}, "
        f"{probe.device_count} device(s)){note}",
    )


def _highest(candidates: list[Backend], where: str) -> Backend:
    if not candidates:
        raise BackendUnavailableError(
            f"no device backend is available {where}, not even the built-in CPU one; "
            f"see `trinity backends list` for each probe's reason"
        )
    top = max(b.info.priority for b in candidates)
    tied = sorted((b for b in candidates if b.info.priority == top), key=lambda b: b.name)
    if len(tied) > 1:
        logger.warning(
            "device backends %s share priority %d %s; choosing %r by name. Set TRINITY_DEVICE to choose.",
            ", ".join(b.name for b in tied), top, where, tied[0].name,
        )
    return tied[0]


def worker_environment(selection: Selection, self_managed_devices: bool = False) -> dict[str, str]:
    """Return the environment that hands ``selection`` down to a Ray worker.

    The worker inherits the decision (no re-detection in device-masked actors)
    and whatever environment the backend says its workers need.
    """
    env = dict(selection.backend.worker_env(self_managed_devices))
    env[DEVICE_ENV] = selection.name
    env[RESOLVED_ENV] = "1"
    return env
