"""``trinity checkpoints verify <folder>``: the state of every trainer checkpoint of a run.

Exit status: 0 when the newest checkpoint is intact (the one a resume loads
as is), 1 when it is damaged or incomplete or there is none, 2 when the
folder does not exist. Importing this module imports neither torch nor Ray.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trinity.cli.errors import EXIT_FAILURE, EXIT_USAGE, CLIError

_SUMMARY = "inspect trainer checkpoints"
#: Exit status when the newest checkpoint is intact.
EXIT_OK = 0


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add the ``checkpoints`` command group to ``commands`` (the top-level subparsers action)."""
    group = commands.add_parser("checkpoints", parents=[common], help=_SUMMARY,
                                description=f"{_SUMMARY.capitalize()}.")
    group.set_defaults(command_parser=group)
    actions = group.add_subparsers(dest="action", metavar="ACTION", title="actions")
    check = actions.add_parser(
        "verify", parents=[common], help="check every checkpoint's files against its manifest",
        description="Check each checkpoint of a run (sizes and checksums of its files) and print its state: "
        "OK, damaged (which file, what is wrong) or incomplete. Exits 0 when the newest checkpoint is intact, "
        "1 when it is not (a resume falls back to the newest intact one) or there is none, 2 when FOLDER "
        "does not exist.",
    )
    check.add_argument("folder", metavar="FOLDER",
                       help="a run folder, its checkpoints folder, or one step-N folder")
    check.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    check.set_defaults(handler=cmd_verify)


def checkpoint_root(folder: Path) -> Path:
    """Return the checkpoints folder ``folder`` names: ``<run>/checkpoints``, or ``folder`` itself."""
    if not folder.is_dir():
        what = "not a folder" if folder.exists() else "no such folder"
        raise CLIError(f"{folder}: {what}; pass a run folder or its checkpoints folder", EXIT_USAGE)
    nested = folder / "checkpoints"
    return nested if nested.is_dir() else folder


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def cmd_verify(args: argparse.Namespace) -> int:
    """Print the verdict of every checkpoint under ``args.folder``; return 0 when the newest is intact, else 1."""
    from trinity.trainer.checkpoint import CheckpointDir, describe, step_of
    from trinity.trainer.manifest import verify

    folder = Path(args.folder)
    if folder.is_dir() and (folder / "trainer_state.json").exists():
        verdicts = [verify(folder)]
        root = folder.parent
    else:
        root = checkpoint_root(folder)
        verdicts = CheckpointDir(root).verify_all()
    committed = [v for v in verdicts if v.path.name.startswith("step-")]
    newest_ok = bool(committed) and committed[0].intact
    rows = [{"step": step_of(v.path), "path": str(v.path), "status": v.status, "reason": v.reason,
             "files": v.files, "bytes": v.size} for v in verdicts]
    if args.json:
        json.dump({"folder": str(root), "newest_intact": newest_ok, "checkpoints": rows}, sys.stdout, indent=2)
        print()
    else:
        print(f"checkpoints in {root}:" if verdicts else f"no checkpoints in {root}")
        if verdicts:
            print(f"{'step':>6}  {'files':>5}  {'size':>10}  state")
        for verdict in verdicts:
            name = "" if verdict.path.name.startswith("step-") else f" ({verdict.path.name})"
            print(f"{step_of(verdict.path):>6}  {verdict.files:>5}  {_size(verdict.size):>10}  "
                  f"{describe(verdict)}{name}")
    return EXIT_OK if newest_ok else EXIT_FAILURE
