"""``trinity backends list | show | check``: what device backends are installed, usable and chosen.

Registering the commands imports nothing heavy; each handler imports the
device layer when it runs, and torch is never imported (probes do not need it).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from trinity.cli.errors import EXIT_FAILURE

_SUMMARY = "list, inspect and diagnose device backends"


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``backends`` command group to ``commands`` (the top-level subparsers action)."""
    group = commands.add_parser(
        "backends", parents=[common], help=_SUMMARY, description=f"{_SUMMARY.capitalize()}.",
        epilog="TRINITY_DEVICE forces a backend (default: auto); TRINITY_PROBE_TIMEOUT bounds each probe (s).",
    )
    group.set_defaults(command_parser=group)
    actions = group.add_subparsers(dest="action", metavar="ACTION", title="actions")

    listing = actions.add_parser(
        "list", parents=[common], help="every installed backend, its availability, and the selection",
        description="List every installed device backend (broken ones too), whether it can run here, "
        "and which one the selection picks. Exits 1 when the selection fails.",
    )
    listing.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    _add_address(listing)
    listing.set_defaults(handler=cmd_list)

    show = actions.add_parser(
        "show", parents=[common], help="everything known about one backend",
        description="Show one backend's facts, probe, hooks (its own or the core default) and worker environment.",
    )
    show.add_argument("name", metavar="NAME", help="backend name, e.g. cpu, cuda, npu")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    _add_address(show)
    show.set_defaults(handler=cmd_show)

    check = actions.add_parser(
        "check", parents=[common], help="run a backend's diagnostic checks (exit 1 if one fails)",
        description="Run the doctor checks of NAME, or of the selected backend: probe, driver, runtime, "
        "versions. Exits 1 when any check fails.",
    )
    check.add_argument("name", metavar="NAME", nargs="?", help="backend name (default: the selected backend)")
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.set_defaults(handler=cmd_check)


def _add_address(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--address", default=None, metavar="ADDRESS",
        help="read the Ray cluster at ADDRESS (host:port; 'auto': the running local cluster) and select as "
        "`trinity run` would with it; default: RAY_ADDRESS. Without either, Ray is not touched",
    )


def _print_json(document: object) -> None:
    json.dump(document, sys.stdout, indent=2)
    sys.stdout.write("\n")


def cmd_list(args: argparse.Namespace) -> int:
    """Print the backend table (or JSON), the cluster's offer when one is named; exit 1 when the selection fails."""
    from trinity.cli import report

    found = report.gather(args.address)
    document = report.listing(found)
    if args.json:
        _print_json(document)
    else:
        from trinity.cli import render

        render.print_listing(document)
    if document["selection_error"] is not None:
        sys.stdout.flush()
        print(f"trinity: error: {document['selection_error']}", file=sys.stderr)
        return EXIT_FAILURE
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Print everything known about backend ``args.name``; an unknown name is a usage error."""
    from trinity.cli import report

    found = report.gather(args.address)
    document = report.details(report.find_record(found.records, args.name), found)
    if args.json:
        _print_json(document)
    else:
        from trinity.cli import render

        render.print_details(document)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Run the checks of ``args.name`` (or of the selected backend); exit 1 if any fails."""
    import os

    from trinity.cli import report
    from trinity.device import facade
    from trinity.device.selection import probe_timeout

    records = facade.list_backends()
    timeout_s = probe_timeout(os.environ)
    if args.name is None:
        chosen = facade.current_selection().backend
        record = next(r for r in records if r.backend is chosen)
    else:
        record = report.find_record(records, args.name)
    document = report.checks(record, timeout_s)
    if args.json:
        _print_json(document)
    else:
        from trinity.cli import render

        render.print_checks(document)
    return 0 if document["ok"] else EXIT_FAILURE
