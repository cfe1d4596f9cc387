"""Human-readable output of ``trinity backends``: a rich table for ``list``, plain text for the rest.

rich is imported inside :func:`print_listing` only, so ``--json`` and the
other commands never pay for it. Plugin-provided text is printed as text,
never interpreted as rich markup.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from trinity.cli.cluster_view import describe_offer
from trinity.cli.report import BackendDetails, BackendRow, CheckReport, ClusterJSON, Listing, SelectedJSON
from trinity.device.selection import slow_probe_remedy
from trinity.device.spec import SPEC_VERSION

#: Table width used when stdout is not a terminal (a pipe, a file) and ``COLUMNS`` is unset.
PIPE_WIDTH = 160
_NONE = "-"


def selection_line(selected: SelectedJSON | None, error: str | None) -> str:
    """Return ``selected: NAME (source) — reason``, or say why the selection failed."""
    if selected is not None:
        return f"selected: {selected['name']} ({selected['source']}) — {selected['reason']}"
    return f"selected: none — {error or 'no selection was made'}"


def cluster_line(cluster: ClusterJSON | None) -> str | None:
    """Return ``Ray cluster at ADDRESS (from --address): 3 nodes; NPU: 8 on 2 nodes; ...``, or why none was read."""
    if cluster is None:
        return None
    if cluster["address"] is None:
        return f"Ray cluster: not read — {cluster['note']}"
    nodes = cluster["nodes"]
    offers = "; ".join(f"{key}: {describe_offer(offer)}" for key, offer in cluster["offer"].items())
    return (f"Ray cluster at {cluster['address']} (from {cluster['origin']}): {nodes} node{'s' if nodes != 1 else ''}"
            + (f"; {offers}" if offers else ""))


def _cluster_cell(row: BackendRow) -> str:
    if row["status"] != "ok" or not row["ray_resource_key"]:
        return _NONE
    return describe_offer(row["cluster_offer"] or [])


def _available_cell(row: BackendRow) -> str:
    if row["status"] != "ok":
        return "BROKEN"
    return "yes" if row["available"] else "no"


def _notes(row: BackendRow, device_named: bool = False) -> list[str]:
    """Return the one-line explanations printed under the table for ``row`` (``device_named``: by TRINITY_DEVICE)."""
    name = row["name"]
    if row["status"] != "ok":
        return [f"{name}: broken: {row['error']}"]
    notes = []
    if row.get("probe_cut_off") and device_named:  # the reason already says why it was not waited for
        notes.append(f"{name}: SLOW: {row['reason']}")
    elif row.get("probe_cut_off"):
        notes.append(f"{name}: SLOW: {row['reason']}; every auto device selection and `trinity backends list` "
                     f"waits that long for it: {slow_probe_remedy(row['distribution'])}")
    elif not row["available"]:
        notes.append(f"{name}: not available: {row['reason'] or 'the probe gave no reason'}")
    if row["spec_version"] is not None and row["spec_version"] < SPEC_VERSION:
        notes.append(f"{name}: written for DeviceBackend spec {row['spec_version']}, older than this trinity-rft's "
                     f"{SPEC_VERSION}; `trinity backends show {name}` lists the newer hooks left to the core's "
                     "defaults")
    if row["compile_supported"] is False or (row["compile_supported"] is None and row["compile_reason"]):
        notes.append(f"{name}: torch.compile not supported: {row['compile_reason'] or 'no reason given'}")
    return notes


def print_listing(doc: Listing, file: TextIO | None = None) -> None:
    """Print the backend table, the notes explaining unusable rows, and the selection line."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    out = file if file is not None else sys.stdout
    wide = not out.isatty() and not os.environ.get("COLUMNS")
    console = Console(file=out, width=PIPE_WIDTH if wide else None, highlight=False)
    table = Table(title="trinity device backends", title_justify="left", show_edge=False, pad_edge=False)
    read_cluster = doc["cluster"] is not None and doc["cluster"]["address"] is not None
    headers = [
        ("", "left"), ("name", "left"), ("package", "left"), ("priority", "right"), ("available", "left"),
        ("devices", "right"), ("ray resource", "left"), ("collective", "left"), ("torch.compile", "left"),
    ]
    if read_cluster:
        headers.append(("cluster offers", "left"))
    for header, justify in headers:
        table.add_column(header, justify=justify, no_wrap=header != "package")  # type: ignore[arg-type]
    notes: list[str] = []
    selected = doc["selected"]
    for row in doc["backends"]:
        ok = row["status"] == "ok"
        cells = [
            "*" if row["selected"] else "",
            row["name"],
            f"{row['distribution']} {row['version'] or ''}".strip(),
            str(row["priority"]) if ok else _NONE,
            _available_cell(row),
            str(row["device_count"]) if ok else _NONE,
            (row["ray_resource_key"] or "none") if ok else _NONE,
            (row["collective_backend"] or _NONE) if ok else _NONE,
            _NONE if row["compile_supported"] is None else "yes" if row["compile_supported"] else "no",
        ]
        if read_cluster:
            cells.append(_cluster_cell(row))
        style = "bold" if row["selected"] else "red" if not ok else "dim" if not row["available"] else ""
        table.add_row(*(Text(cell) for cell in cells), style=style)
        notes.extend(_notes(row, device_named=selected is not None and selected["source"] == "environment"))
    console.print(table)
    if notes:
        console.print()
        for note in notes:
            console.print(Text(note), soft_wrap=True)
    console.print()
    cluster = cluster_line(doc["cluster"])
    if cluster is not None:
        console.print(Text(cluster), soft_wrap=True)
    console.print(Text(selection_line(doc['selected'], doc['selection_error'])), soft_wrap=True)


def _yes_no(value: bool | None, when_no: str | None) -> str:
    if value is None:
        return _NONE
    if value:
        return "yes" + (f" ({when_no})" if when_no else "")
    return "no" + (f": {when_no}" if when_no else "")


def print_details(doc: BackendDetails, file: TextIO | None = None) -> None:
    """Print everything known about one backend as aligned ``key: value`` lines, then its hooks."""
    out = file if file is not None else sys.stdout
    ok = doc["status"] == "ok"
    available = _NONE
    if doc["available"] is not None:
        count = doc["device_count"]
        available = f"yes, {count} device(s)" if doc["available"] else f"no: {doc['reason'] or 'no reason given'}"
        if doc["available"] and doc["reason"]:
            available += f" ({doc['reason']})"
    selected = "yes" if doc["selected"] else "no"
    fields: list[tuple[str, object]] = [
        ("name", doc["name"]),
        ("package", f"{doc['distribution']} {doc['version'] or ''}".strip()),
        ("entry point", doc["target"]),
        ("status", doc["status"] if ok else f"broken: {doc['error']}"),
    ]
    if ok:
        fields += [
            ("description", doc["description"] or _NONE),
            ("device type", doc["device_type"]),
            ("priority", doc["priority"]),
            ("spec version", _spec_cell(doc)),
            ("available", available),
            ("ray resource", doc["ray_resource_key"] or "none"),
            ("collective", doc["collective_backend"]),
            ("process group", doc["process_group_backend"]),
            ("visible devices", doc["visible_devices_env"] or "none"),
            ("worker env", ", ".join(f"{p}*" for p in doc["worker_env_prefixes"] or []) or "none"),
            ("torch.compile", _yes_no(doc["compile_supported"], doc["compile_reason"])),
            ("dtypes", _dtypes_cell(doc)),
            ("attention", _attention_cell(doc)),
            ("offload", _offload_cell(doc)),
            ("selected", selected),
        ]
        if doc["cluster"] is not None and doc["cluster"]["address"] is not None and doc["ray_resource_key"]:
            fields.append(("cluster offers", f"{doc['ray_resource_key']}: {_cluster_cell(doc)}"))
    width = max(len(key) for key, _ in fields) + 2
    for key, value in fields:
        print(f"{key + ':':<{width}}{value}", file=out)
    hooks = doc["hooks"]
    if hooks:
        print("hooks (who answers each):", file=out)
        hook_width = max(len(name) for name in hooks) + 2
        for name, owner in hooks.items():
            print(f"  {name:<{hook_width}}{_OWNERS.get(owner, owner)}", file=out)
    cluster = cluster_line(doc["cluster"])
    if cluster is not None:
        print(cluster, file=out)
    print(selection_line(doc['selection'], doc['selection_error']), file=out)


def _spec_cell(doc: BackendDetails) -> str:
    written_for = doc["spec_version"]
    if written_for is None or written_for >= SPEC_VERSION:
        return str(written_for)
    defaulted = doc["newer_hooks_defaulted"] or []
    left = f": {', '.join(defaulted)} answered by the core's defaults" if defaulted else ""
    return (f"{written_for} (OLDER than this trinity-rft's spec {SPEC_VERSION}{left}; "
            "see docs/backends.md#spec-versions)")


def _by_default(answered_by: str) -> str:
    return " [core default]" if answered_by == "default" else ""


def _dtypes_cell(doc: BackendDetails) -> str:
    dtypes = doc["dtypes"]
    if dtypes is None:
        return _NONE
    if not dtypes["supported"]:
        return dtypes["note"] + _by_default(dtypes["answered_by"])
    first, *rest = dtypes["supported"]
    parts = [f"{first} (preferred)", *rest]
    parts += [f"not {name}: {why}" for name, why in dtypes["unsupported"].items()]
    note = f" ({dtypes['note']})" if dtypes["note"] else ""
    return "; ".join(parts) + note + _by_default(dtypes["answered_by"])


def _attention_cell(doc: BackendDetails) -> str:
    attention = doc["attention"]
    if attention is None:
        return _NONE
    if not attention["implementation"]:
        return attention["reason"] + _by_default(attention["answered_by"])
    why = f" ({attention['reason']})" if attention["reason"] else ""
    return f"{attention['implementation']} in {attention['dtype']}{why}" + _by_default(attention["answered_by"])


def _offload_cell(doc: BackendDetails) -> str:
    offload = doc["offload"]
    if offload is None:
        return _NONE
    if offload["supported"]:
        answer = "yes, " + ("pinned host copies" if offload["pin_memory"] else "unpinned host copies")
    else:
        answer = "no"
    why = f" ({offload['reason']})" if offload["reason"] else ""
    return answer + why + _by_default(offload["answered_by"])


_OWNERS = {
    "backend": "backend",
    "default": "core default",
    "backend+default": "backend + core default",
}


def print_checks(doc: CheckReport, file: TextIO | None = None) -> None:
    """Print each check as ``status  name  detail`` with its fix below, then a one-line tally."""
    out = file if file is not None else sys.stdout
    print(f"checks of backend {doc['backend']} ({doc['distribution']}):", file=out)
    entries = doc["checks"]
    name_width = max((len(c["name"]) for c in entries), default=0) + 2
    for check in entries:
        print(f"  {check['status']:<5} {check['name']:<{name_width}}{check['detail']}", file=out)
        if check["fix"]:
            print(f"  {'':<5} {'':<{name_width}}fix: {check['fix']}", file=out)
    tally = {status: sum(c["status"] == status for c in entries) for status in ("ok", "warn", "fail")}
    verdict = "all checks passed" if doc["ok"] else "some checks failed"
    print(f"{verdict}: {tally['ok']} ok, {tally['warn']} warn, {tally['fail']} fail", file=out)
