"""What ``trinity backends`` knows about the installed backends, as plain JSON-able data.

The same dictionaries feed ``--json`` and the human tables, so the two never
disagree. Gathering probes every loadable backend (concurrently, bounded by
``TRINITY_PROBE_TIMEOUT``) and runs the selection; nothing here imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypedDict

from trinity.cli.errors import EXIT_USAGE, CLIError

if TYPE_CHECKING:
    from trinity.cli.cluster_view import ClusterView, NodeCount
    from trinity.device.backend import Backend
    from trinity.device.errors import DeviceError
    from trinity.device.loader import BackendRecord
    from trinity.device.selection import Selection


class BackendRow(TypedDict):
    """One backend as ``trinity backends list --json`` prints it; null where a broken backend cannot tell."""

    #: Backend name (the entry point's name).
    name: str
    #: Distribution providing it (``trinity-backend-npu``); on a name clash each clashing one with
    #: its version, comma-separated (``version`` is then null).
    distribution: str
    #: That distribution's version; null when unknown.
    version: str | None
    #: The entry point's value (``trinity_backend_npu.plugin``).
    target: str
    #: ``ok`` (loaded and validated) or ``broken``.
    status: str
    #: Why it is broken, one line; null when ok.
    error: str | None
    #: Selection priority (higher wins in ``auto``).
    priority: int | None
    #: torch device type (``cuda``, ``npu``, ``cpu``).
    device_type: str | None
    #: One line about the hardware it drives.
    description: str | None
    #: DeviceBackend spec version the backend was written for.
    spec_version: int | None
    #: Whether the probe found a usable device in this process.
    available: bool | None
    #: Usable devices (after visible-device masking).
    device_count: int | None
    #: Why it is not available (or the probe's note); null when there is nothing to say.
    reason: str | None
    #: Whether the probe was cut off by ``TRINITY_PROBE_TIMEOUT`` (every auto selection waits for it).
    probe_cut_off: bool | None
    #: Ray resource that schedules one device (``GPU``, ``NPU``); null when none (CPU).
    ray_resource_key: str | None
    #: torch.distributed backend for device tensors (``nccl``, ``hccl``, ``gloo``).
    collective_backend: str | None
    #: Environment variable that masks the visible devices; null when none.
    visible_devices_env: str | None
    #: Whether torch.compile works on this device.
    compile_supported: bool | None
    #: Why torch.compile does not work (or a note); null when there is nothing to say.
    compile_reason: str | None
    #: Whether this is the backend the selection chose.
    selected: bool
    #: What the Ray cluster's nodes offer of ``ray_resource_key`` (``[]``: nothing); null when no
    #: cluster was read or the backend has no key.
    cluster_offer: list[NodeCount] | None


class SelectedJSON(TypedDict):
    """The selection as ``--json`` prints it."""

    #: Name of the chosen backend.
    name: str
    #: Where the decision came from (``auto``, ``environment``, ...).
    source: str
    #: One sentence saying why.
    reason: str


class ClusterJSON(TypedDict):
    """The Ray cluster as ``--json`` prints it (null in the documents when no address was given)."""

    #: The address as given (``host:port``, ``auto``, ``local``).
    requested: str
    #: Where it was given: ``--address`` or ``RAY_ADDRESS``.
    origin: str
    #: The address connected to; null when nothing was read (``local``, ``auto`` with no cluster).
    address: str | None
    #: Alive nodes.
    nodes: int
    #: Each schedulable resource (``CPU``, ``GPU``, ``NPU``, custom keys): amount per node, nodes offering it.
    offer: dict[str, list[NodeCount]]
    #: Why no cluster was read, when none was.
    note: str | None


class Listing(TypedDict):
    """The whole ``trinity backends list --json`` document."""

    #: The Ray cluster read with ``--address``/``RAY_ADDRESS`` (it took part in the selection); null without.
    cluster: ClusterJSON | None
    #: The chosen backend; null when the selection failed.
    selected: SelectedJSON | None
    #: The selection's error message, one line; null when it succeeded.
    selection_error: str | None
    #: Every discovered backend, built-in first, broken ones included.
    backends: list[BackendRow]


class BackendDetails(BackendRow):
    """One backend as ``trinity backends show --json`` prints it: the list row plus the rest."""

    #: Prefixes of environment variables a Ray worker inherits (``HCCL_``).
    worker_env_prefixes: list[str] | None
    #: ``init_process_group`` backend string (``cpu:gloo,npu:hccl``).
    process_group_backend: str | None
    #: Each hook and who answers it: ``backend``, ``default`` or, for ``trinity_doctor``, ``backend+default``.
    hooks: dict[str, str] | None
    #: The selection made in this process (whichever backend it chose); null when it failed.
    selection: SelectedJSON | None
    #: The selection's error message when it failed; null otherwise.
    selection_error: str | None
    #: The Ray cluster read with ``--address``/``RAY_ADDRESS``; null without.
    cluster: ClusterJSON | None
    #: The dtypes models compute in (spec 2's ``trinity_supported_dtypes``); null for a broken backend.
    dtypes: DtypesJSON | None
    #: The attention kernel for the preferred dtype (spec 2's ``trinity_attention_implementation``).
    attention: AttentionJSON | None
    #: Whether the trainer may offload to host memory (spec 3's ``trinity_offload_support``).
    offload: OffloadJSON | None
    #: Hooks added after the spec the backend was written for that it leaves to the core's defaults.
    newer_hooks_defaulted: list[str] | None


class DtypesJSON(TypedDict):
    """A backend's dtype answer as ``backends show --json`` prints it."""

    #: Dtypes models compute in, the preferred first; empty when the hook failed.
    supported: list[str]
    #: Why a dtype is not supported, by name.
    unsupported: dict[str, str]
    #: The backend's remark on how it answered, or the hook's error; empty when none.
    note: str
    #: Who answered: ``backend`` or ``default``.
    answered_by: str


class AttentionJSON(TypedDict):
    """A backend's attention answer for one dtype."""

    #: The dtype asked about (the preferred one).
    dtype: str
    #: ``attn_implementation`` models are loaded with; empty when the hook failed.
    implementation: str
    #: Why (or the hook's error).
    reason: str
    #: Who answered: ``backend`` or ``default``.
    answered_by: str


class OffloadJSON(TypedDict):
    """A backend's offload answer."""

    #: Whether parameters and optimizer state may wait in host memory.
    supported: bool
    #: Whether host copies are pinned.
    pin_memory: bool
    #: Why (or the hook's error).
    reason: str
    #: Who answered: ``backend`` or ``default``.
    answered_by: str


class CheckJSON(TypedDict):
    """One diagnostic finding as ``trinity backends check --json`` prints it."""

    #: What was checked.
    name: str
    #: ``ok``, ``warn`` or ``fail``.
    status: Literal["ok", "warn", "fail"]
    #: What was found.
    detail: str
    #: What to do about it; empty when nothing.
    fix: str
    #: Structured facts (versions, paths).
    facts: dict[str, str]


class CheckReport(TypedDict):
    """The whole ``trinity backends check --json`` document."""

    #: The backend whose checks ran.
    backend: str
    #: Its distribution and version (``trinity-rft 0.1.0``).
    distribution: str
    #: Every finding, the core's probe first.
    checks: list[CheckJSON]
    #: True when no check failed (the exit status is 0 exactly then).
    ok: bool


#: Seconds ``backends list`` waits for the other backends' probes when ``TRINITY_DEVICE`` names the device.
NAMED_DEVICE_GRACE_S = 1.0


@dataclass(frozen=True)
class Gathered:
    """Records, their probes and the selection, as found in this process."""

    #: Every discovered backend record, in listing order.
    records: list[BackendRecord]
    #: The selection, or None when it failed.
    selection: Selection | None
    #: Why the selection failed, or None.
    selection_error: DeviceError | None
    #: Seconds each probe was allowed.
    probe_timeout_s: float
    #: The Ray cluster read for the selection; None when no address was given.
    cluster: ClusterView | None = None
    #: The backend ``TRINITY_DEVICE`` names (the others' probes got :data:`NAMED_DEVICE_GRACE_S`); None: auto.
    named_device: str | None = None


def gather(address: str | None = None) -> Gathered:
    """Discover, probe every loadable backend concurrently, then select as ``trinity run`` would.

    ``address`` (else ``RAY_ADDRESS``) names a Ray cluster whose resources
    take part in the selection, as they do for ``trinity run``; without one
    Ray is not touched. A selection failure (unknown ``TRINITY_DEVICE``,
    unavailable forced backend, bad ``TRINITY_PROBE_TIMEOUT``) is kept, not
    raised: the listing is still worth printing. An invalid timeout falls back
    to the default for the probes here. Raises :class:`CLIError` when the
    cluster cannot be reached.
    """
    from trinity.cli.cluster_view import read_cluster
    from trinity.device import facade
    from trinity.device import selection as device_selection
    from trinity.device.backend import DEFAULT_PROBE_TIMEOUT_S
    from trinity.device.errors import DeviceError

    records = facade.list_backends()
    try:
        timeout_s = device_selection.probe_timeout(os.environ)
    except DeviceError:
        timeout_s = DEFAULT_PROBE_TIMEOUT_S  # select_backend() below reports the bad value
    loaded = [r.backend for r in records if r.backend is not None]
    for backend in loaded:
        backend.start_probe()  # the probes run while the cluster is read
    cluster = read_cluster(address)
    named = device_selection.normalise_choice(os.environ.get(device_selection.DEVICE_ENV))
    if named:  # the device is named: the others are shown, but not waited for beyond a short grace
        others = [b for b in loaded if b.name != named]
        device_selection.probe_all(others, min(timeout_s, NAMED_DEVICE_GRACE_S))
    else:
        device_selection.probe_all(loaded, timeout_s)
    resources = cluster.resources if cluster is not None and cluster.connected else None
    chosen: Selection | None = None
    error: DeviceError | None = None
    try:
        chosen = facade.select_backend(cluster_resources=resources)
    except DeviceError as exc:
        error = exc
    return Gathered(records, chosen, error, timeout_s, cluster, named)


def cluster_json(found: Gathered) -> ClusterJSON | None:
    """Return the cluster of ``found`` as JSON-able data, None when no address was given."""
    view = found.cluster
    if view is None:
        return None
    return {
        "requested": view.requested, "origin": view.origin, "address": view.address, "nodes": len(view.nodes),
        "offer": view.offers(), "note": view.note,
    }


def _cluster_offer(record_key: str | None, found: Gathered) -> list[NodeCount] | None:
    if found.cluster is None or not found.cluster.connected or not record_key:
        return None
    return found.cluster.offer(record_key)


def selected_json(found: Gathered) -> SelectedJSON | None:
    """Return the selection of ``found`` as JSON-able data, None when it failed."""
    if found.selection is None:
        return None
    return {"name": found.selection.name, "source": found.selection.source, "reason": found.selection.reason}


def listing(found: Gathered) -> Listing:
    """Return the ``trinity backends list --json`` document for ``found``."""
    return {
        "cluster": cluster_json(found),
        "selected": selected_json(found),
        "selection_error": _one_line(found.selection_error),
        "backends": [backend_row(record, found) for record in found.records],
    }


def _probe_reason(reason: str, cut_short: bool, found: Gathered) -> str | None:
    if cut_short and found.named_device:
        return (f"{reason} (not waited for longer: TRINITY_DEVICE={found.named_device} names the device; unset it to "
                f"give each probe {found.probe_timeout_s:g} s)")
    return reason or None


def backend_row(record: BackendRecord, found: Gathered) -> BackendRow:
    """Return what is known about ``record``: static facts, probe, compile support, selection."""
    backend = record.backend if record.status == "ok" else None
    if backend is None:
        return {
            "name": record.name, "distribution": record.distribution, "version": record.version or None,
            "target": record.target, "status": record.status, "error": record.error or "unknown error",
            "priority": None, "device_type": None, "description": None, "spec_version": None,
            "available": None, "device_count": None, "reason": None, "probe_cut_off": None, "ray_resource_key": None,
            "collective_backend": None, "visible_devices_env": None, "compile_supported": None,
            "compile_reason": None, "selected": False, "cluster_offer": None,
        }
    info = backend.info
    probe = backend.probe(found.probe_timeout_s)
    compile_supported, compile_reason = _compile_support(backend)
    return {
        "name": record.name,
        "distribution": record.distribution,
        "version": record.version or None,
        "target": record.target,
        "status": record.status,
        "error": None,
        "priority": info.priority,
        "device_type": info.device_type,
        "description": info.description or None,
        "spec_version": info.spec_version,
        "available": probe.available,
        "device_count": probe.device_count,
        "reason": _probe_reason(probe.reason, backend.probe_cut_off and record.name != found.named_device, found),
        "probe_cut_off": backend.probe_cut_off,
        "ray_resource_key": info.ray_resource_key,
        "collective_backend": info.collective_backend,
        "visible_devices_env": info.visible_devices_env,
        "compile_supported": compile_supported,
        "compile_reason": compile_reason,
        "selected": found.selection is not None and found.selection.backend is backend,
        "cluster_offer": _cluster_offer(info.ray_resource_key, found),
    }


def details(record: BackendRecord, found: Gathered) -> BackendDetails:
    """Return everything known about ``record``: its row plus env prefixes, process group and hook owners."""
    from trinity.device import spec
    from trinity.device.facade import process_group_backend_for

    backend = record.backend if record.status == "ok" else None
    prefixes: list[str] | None = None
    process_group: str | None = None
    hooks: dict[str, str] | None = None
    if backend is not None:
        hooks = {name: "backend" if backend.implements(name) else "default" for name in spec.SINGLE_ANSWER_HOOKS}
        hooks["trinity_doctor"] = "backend+default" if backend.implements("trinity_doctor") else "default"
        prefixes = list(backend.info.worker_env_prefixes)
        process_group = process_group_backend_for(backend)
    dtypes, attention = _precision_answers(backend, hooks) if backend is not None and hooks else (None, None)
    offload = _offload_answer(backend, hooks) if backend is not None and hooks else None
    return {
        **backend_row(record, found),
        "worker_env_prefixes": prefixes,
        "process_group_backend": process_group,
        "hooks": hooks,
        "selection": selected_json(found),
        "selection_error": _one_line(found.selection_error),
        "cluster": cluster_json(found),
        "dtypes": dtypes,
        "attention": attention,
        "offload": offload,
        "newer_hooks_defaulted": newer_hooks_defaulted(backend) if backend is not None else None,
    }


def newer_hooks_defaulted(backend: Backend) -> list[str]:
    """Return the hooks added after ``backend``'s spec version that it leaves to the core's defaults."""
    from trinity.device.spec import HOOKS_ADDED_IN

    return [name for name, since in HOOKS_ADDED_IN.items()
            if since > backend.info.spec_version and not backend.implements(name)]


def _precision_answers(backend: Backend, owners: dict[str, str]) -> tuple[DtypesJSON, AttentionJSON]:
    """Ask ``backend`` its dtypes and its attention kernel for the preferred dtype; a failing hook is shown.

    ``owners`` says who answers each hook (``backend`` or ``default``), as ``details`` found it.
    """
    owner = owners.__getitem__
    try:
        support = backend.supported_dtypes()
    except Exception as exc:  # noqa: BLE001 - a vendor hook's failure is what the user came to see
        failed = f"trinity_supported_dtypes raised {type(exc).__name__}: {_one_line(exc)}"
        dtypes: DtypesJSON = {"supported": [], "unsupported": {}, "note": failed,
                              "answered_by": owner("trinity_supported_dtypes")}
        preferred = "float32"
    else:
        dtypes = {"supported": list(support.supported), "unsupported": dict(support.unsupported),
                  "note": support.note, "answered_by": owner("trinity_supported_dtypes")}
        preferred = support.preferred
    attention: AttentionJSON = {"dtype": preferred, "implementation": "", "reason": "",
                                "answered_by": owner("trinity_attention_implementation")}
    try:
        choice = backend.attention_implementation(preferred)
    except Exception as exc:  # noqa: BLE001 - as above
        attention["reason"] = f"trinity_attention_implementation raised {type(exc).__name__}: {_one_line(exc)}"
    else:
        attention["implementation"], attention["reason"] = choice.implementation, choice.reason
    return dtypes, attention


def _offload_answer(backend: Backend, owners: dict[str, str]) -> OffloadJSON:
    """Ask ``backend`` whether the trainer may offload; a failing hook is shown as the reason."""
    answered_by = owners["trinity_offload_support"]
    try:
        support = backend.offload_support()
    except Exception as exc:  # noqa: BLE001 - a vendor hook's failure is what the user came to see
        return {"supported": False, "pin_memory": False, "answered_by": answered_by,
                "reason": f"trinity_offload_support raised {type(exc).__name__}: {_one_line(exc)}"}
    return {"supported": support.supported, "pin_memory": support.pin_memory, "reason": support.reason,
            "answered_by": answered_by}


def find_record(records: Sequence[BackendRecord], name: str) -> BackendRecord:
    """Return the record called ``name`` (aliases such as ``gpu`` accepted, case ignored).

    A record that clashes with a built-in name is also reachable as
    ``NAME@DISTRIBUTION``. Raises :class:`CLIError` (exit 2) listing the
    installed names when there is none.
    """
    from trinity.device.selection import normalise_choice

    wanted = normalise_choice(name) or name.strip().lower()
    matches = [record for record in records if record.name.lower() == wanted]
    if matches:
        return next((record for record in matches if record.status == "ok"), matches[0])
    for record in records:
        if f"{record.name}@{record.distribution}".lower() == wanted:
            return record
    raise CLIError(f"no backend named {name!r}; installed: {installed_names(records)}", EXIT_USAGE)


def installed_names(records: Sequence[BackendRecord]) -> str:
    """Return ``"cpu, cuda, npu (broken)"``: every installed name, broken ones marked."""
    names = sorted({r.name + ("" if r.status == "ok" else " (broken)") for r in records})
    return ", ".join(names) or "none"


def checks(record: BackendRecord, found_timeout_s: float) -> CheckReport:
    """Run the checks of ``record``: whether it loaded, its probe, then every doctor check."""
    from trinity.device.types import DoctorCheck

    findings: list[DoctorCheck] = []
    backend = record.backend if record.status == "ok" else None
    if backend is None:
        findings.append(
            DoctorCheck("load", "fail", record.error or "the backend could not be loaded",
                        fix=f"reinstall or upgrade {record.distribution}, or uninstall it")
        )
    else:
        probe = backend.probe(found_timeout_s)
        if probe.available:
            detail = f"available, {probe.device_count} device(s)" + (f"; {probe.reason}" if probe.reason else "")
            findings.append(DoctorCheck("probe", "ok", detail))
        else:
            findings.append(DoctorCheck("probe", "fail", f"not available: {probe.reason or 'no reason given'}"))
        try:
            findings.extend(backend.doctor())
        except Exception as exc:  # noqa: BLE001 - a misbehaving doctor is a finding, not a crash
            detail = f"running the doctor checks raised {type(exc).__name__}: {_one_line(exc)}"
            fix = f"report this to the maintainers of {record.distribution}"
            findings.append(DoctorCheck("doctor", "fail", detail, fix=fix))
    entries: list[CheckJSON] = [
        {"name": c.name, "status": c.status, "detail": c.detail, "fix": c.fix, "facts": dict(c.facts)}
        for c in findings
    ]
    return {
        "backend": record.name,
        "distribution": f"{record.distribution} {record.version}".strip(),
        "checks": entries,
        "ok": all(entry["status"] != "fail" for entry in entries),
    }


def _compile_support(backend: Backend) -> tuple[bool | None, str | None]:
    try:
        support = backend.compile_support()
    except Exception as exc:  # noqa: BLE001 - a plugin's fault is shown, not raised
        return None, f"trinity_torch_compile_support raised {type(exc).__name__}: {_one_line(exc)}"
    return support.supported, support.reason or None


def _one_line(exc: BaseException | None) -> str | None:
    if exc is None:
        return None
    text = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
    return text or type(exc).__name__
