"""Atomic, resumable trainer checkpoints on a (shared) filesystem.

Layout of a checkpoint folder::

    <dir>/step-12/            a complete checkpoint
        actor/                torch.distributed.checkpoint (DCP) shards: model + optimizer
        critic/               the same for the critic (PPO), when there is one
        hf/                   config.json, generation config and tokenizer files (for ``trinity convert``)
        trainer_state.json    step, world size, algorithm, LR-scheduler states, the launcher's ``extra``
    <dir>/latest              one line: ``step-12`` (replaced atomically)

A checkpoint is written into ``<dir>/.tmp-step-N``, flushed, then renamed to
``step-N``; only then is ``latest`` replaced (write a temporary file, fsync,
``os.replace``). A crash at any point leaves ``latest`` naming a complete
checkpoint (or no checkpoint at all), and a stale ``.tmp-*`` folder that the
next save removes. ``trainer_state.json`` and then ``manifest.json`` (size and
checksum of every file, see :mod:`trinity.trainer.manifest`) are written last
inside the staging folder; :meth:`CheckpointDir.newest_intact` checks the
manifest so a resume never loads a damaged checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

from trinity.errors import EXIT_USAGE, STORAGE_ERRNOS, TrinityError, error_chain, os_error_of
from trinity.trainer.manifest import STATE_MANIFEST_KEY, Verdict, verify, write_manifest
from trinity.utils.fs import fsync_dir, fsync_tree, write_text_atomic

logger = logging.getLogger("trinity.trainer.trainer")

STATE_FILE = "trainer_state.json"
LATEST_FILE = "latest"
_STEP_DIR = re.compile(r"^step-(\d+)$")
_STAGING_DIR = re.compile(r"^\.tmp-step-(\d+)$")


class CheckpointError(TrinityError, RuntimeError):
    """A checkpoint is missing, incomplete or unreadable (exit status 1)."""


class CheckpointWriteError(CheckpointError):
    """A checkpoint could not be written: the disk is full, read-only, over quota or not writable (exit status 2)."""

    exit_code = EXIT_USAGE


#: errno values of a failed write that the user fixes on the filesystem, not in trinity.
DISK_ERRNOS = STORAGE_ERRNOS
#: Bytes :func:`disk_write_problem` writes to find out whether the checkpoint folder still takes data.
PROBE_BYTES = 1 << 20


def disk_write_problem(exc: BaseException, folder: Path) -> OSError | None:
    """Return the full-disk / read-only / quota error behind a failed write into ``folder``, or None.

    The error is looked for in the exception chain; when the chain has none
    (torch's writers report a short write as a plain RuntimeError), a probe
    of :data:`PROBE_BYTES` is written into ``folder`` and its error returned.
    """
    for error in error_chain(exc):
        found = os_error_of(error)
        if found is not None and found.errno in DISK_ERRNOS:
            return found
    probe = folder / f".write-probe-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as handle:
            handle.write(b"\0" * PROBE_BYTES)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as error:
        return error if error.errno in DISK_ERRNOS else None
    finally:
        probe.unlink(missing_ok=True)
    return None


def folder_bytes(folder: Path) -> int:
    """Return the total size of the files under ``folder`` (0 when it does not exist)."""
    return sum(entry.stat().st_size for entry in folder.rglob("*") if entry.is_file())


def room_problem(root: Path) -> str | None:
    """Return why ``root`` has no room for another checkpoint as large as its latest, or None when it has.

    The latest is the newest checkpoint whose files have their recorded sizes
    (a truncated one would understate the need). Costs a ``statvfs`` and a
    ``stat`` of each file of the newest checkpoints, no reading; with no
    checkpoint yet there is nothing to measure and the answer is None.
    """
    chosen, _ = CheckpointDir(root).newest_intact(checksums=False)
    if chosen is None:
        return None
    latest = chosen.path
    needed, free = max(chosen.size, folder_bytes(latest)), shutil.disk_usage(root).free
    if free >= needed:
        return None
    return (
        f"No space left on device: {root} has {free / 2**20:.1f} MiB free and the checkpoint needs about "
        f"{needed / 2**20:.1f} MiB (the size of {latest.name})"
    )


def innermost_message(exc: BaseException) -> str:
    """Return ``Type: first line`` of the deepest exception behind ``exc`` (what actually went wrong)."""
    last = exc
    for error in error_chain(exc):
        last = error
    text = str(last).strip().splitlines()
    return f"{type(last).__name__}: {text[0] if text else ''}".rstrip(": ")


class CheckpointDir:
    """The checkpoints of one run under ``root``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def step_path(self, step: int) -> Path:
        return self.root / f"step-{step}"

    def staging_path(self, step: int) -> Path:
        return self.root / f".tmp-step-{step}"

    def begin(self, step: int) -> Path:
        """Return an empty staging folder for ``step`` (removing a stale one left by a crash)."""
        self.root.mkdir(parents=True, exist_ok=True)
        staging = self.staging_path(step)
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        return staging

    def commit(self, step: int, state: dict[str, Any], max_checkpoints: int = 0) -> Path:
        """Write ``state`` into the staging folder, flush it, rename it to ``step-N`` and point ``latest`` at it.

        Then keep only the ``max_checkpoints`` newest checkpoints (0 keeps all).
        Returns the committed folder.
        """
        staging = self.staging_path(step)
        if not staging.is_dir():
            raise CheckpointError(f"no staging folder {staging} to commit")
        with open(staging / STATE_FILE, "w", encoding="utf-8") as handle:
            json.dump({**state, STATE_MANIFEST_KEY: True}, handle, indent=2, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        fsync_tree(staging)
        write_manifest(staging)
        final = self.step_path(step)
        if final.exists():  # a re-save of the same step (after a resume): move the old one out of the way first
            aside = self.root / f".old-step-{step}-{os.getpid()}"
            os.replace(final, aside)
            os.replace(staging, final)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.replace(staging, final)
        fsync_dir(self.root)
        write_text_atomic(self.root / LATEST_FILE, f"{final.name}\n")
        if max_checkpoints > 0:
            self.prune(max_checkpoints, keep=final)
        return final

    def complete_steps(self) -> list[int]:
        """Return the steps of the complete checkpoints, ascending."""
        if not self.root.is_dir():
            return []
        steps = []
        for entry in self.root.iterdir():
            match = _STEP_DIR.match(entry.name)
            if match and (entry / STATE_FILE).is_file():
                steps.append(int(match.group(1)))
        return sorted(steps)

    def latest(self) -> Path | None:
        """Return the folder ``latest`` names, else the newest complete one, else None.

        Its files are not verified: a caller that will load or export the
        checkpoint wants :meth:`usable_latest`.
        """
        pointer = self.root / LATEST_FILE
        if pointer.is_file():
            name = pointer.read_text(encoding="utf-8").strip()
            candidate = self.root / name
            if _STEP_DIR.match(name) and (candidate / STATE_FILE).is_file():
                return candidate
        steps = self.complete_steps()
        return self.step_path(steps[-1]) if steps else None

    def step_folders(self) -> list[Path]:
        """Return every ``step-N`` folder, complete or not, newest first."""
        if not self.root.is_dir():
            return []
        found = [(int(m.group(1)), e) for e in self.root.iterdir() if (m := _STEP_DIR.match(e.name)) and e.is_dir()]
        return [entry for _, entry in sorted(found, reverse=True)]

    def verify_all(self) -> list[Verdict]:
        """Return the verdict of every checkpoint folder (``step-N`` and interrupted ``.tmp-step-N``), newest first."""
        verdicts = [verify(folder) for folder in self.step_folders()]
        if self.root.is_dir():
            for entry in self.root.iterdir():
                if _STAGING_DIR.match(entry.name) and entry.is_dir():
                    verdicts.append(Verdict(entry, "incomplete", "an interrupted save"))
        return sorted(verdicts, key=lambda v: -step_of(v.path))

    def newest_intact(self, checksums: bool = True) -> tuple[Verdict | None, list[Verdict]]:
        """Return the newest checkpoint that passes :func:`~trinity.trainer.manifest.verify`, and newer rejected ones.

        The first element is None when there is no intact checkpoint.
        ``checksums=False`` checks file sizes only (see ``verify``).
        """
        rejected: list[Verdict] = []
        for folder in self.step_folders():
            verdict = verify(folder, checksums=checksums)
            if verdict.intact:
                return verdict, rejected
            rejected.append(verdict)
        return None, rejected

    def usable_latest(self) -> Path | None:
        """Return the newest intact checkpoint, warning in one line about each newer damaged one; None when none is.

        The warning is the one a resume gives (:func:`warn_rejected`).
        """
        chosen, rejected = self.newest_intact()
        warn_rejected(rejected, chosen)
        return chosen.path if chosen is not None else None

    def intact_steps(self) -> list[int]:
        """Return the steps of the intact checkpoints, ascending, warning in one line about each damaged one."""
        steps = []
        for folder in reversed(self.step_folders()):
            verdict = verify(folder)
            if verdict.intact:
                steps.append(step_of(folder))
            else:
                logger.warning("checkpoint %s is %s; skipping it", verdict.path, describe(verdict))
        return steps

    def prune(self, max_checkpoints: int, keep: Path | None = None) -> list[Path]:
        """Delete all but the ``max_checkpoints`` newest complete checkpoints (never ``keep``) and stale staging."""
        removed: list[Path] = []
        steps = self.complete_steps()
        for step in steps[: max(0, len(steps) - max_checkpoints)]:
            path = self.step_path(step)
            if keep is not None and path == keep:
                continue
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        for entry in self.root.iterdir():
            if entry.name.startswith((".tmp-step-", ".old-step-")) and entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
        return removed


def step_of(folder: Path) -> int:
    """Return the step of a ``step-N`` or ``.tmp-step-N`` folder (-1 for another name)."""
    match = _STEP_DIR.match(folder.name) or _STAGING_DIR.match(folder.name)
    return int(match.group(1)) if match else -1


def describe(verdict: Verdict) -> str:
    """Return ``damaged: <reason>`` / ``incomplete: <reason>`` / ``OK`` for a verdict, as messages show it."""
    if verdict.status == "ok":
        return "OK"
    if verdict.status == "legacy":
        return "OK (no manifest: old checks)"
    return f"{verdict.status}: {verdict.reason}"


def warn_rejected(rejected: list[Verdict], chosen: Verdict | None) -> None:
    """Warn in one line about each damaged checkpoint passed over for ``chosen`` (the newest intact one, or None)."""
    instead = f"falling back to {chosen.path.name}" if chosen is not None else "no intact checkpoint is left"
    for verdict in rejected:
        logger.warning("checkpoint %s is %s; %s", verdict.path, describe(verdict), instead)
    if chosen is not None and chosen.status == "legacy":
        logger.warning(
            "checkpoint %s has no manifest (written by an older trinity); accepted after the old checks", chosen.path
        )


def no_intact_checkpoint(root: Path, rejected: list[Verdict]) -> CheckpointError:
    """Return the error a resume raises when none of the checkpoints under ``root`` is intact (exit status 2)."""
    found = "; ".join(f"{v.path.name} {describe(v)}" for v in rejected[:3])
    if len(rejected) > 3:
        found += f"; {len(rejected) - 3} older ones too"
    return CheckpointError(
        f"no intact checkpoint in {root} ({found}); set continue_from_checkpoint: false to start afresh "
        "(or move the run folder aside)",
        exit_code=EXIT_USAGE,
    )


def read_state(checkpoint: str | Path) -> dict[str, Any]:
    """Return the ``trainer_state.json`` of a checkpoint folder; raises CheckpointError when missing."""
    path = Path(checkpoint) / STATE_FILE
    if not path.is_file():
        raise CheckpointError(f"{checkpoint} is not a complete trainer checkpoint (no {STATE_FILE})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: unreadable ({exc})") from exc
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data


def resolve_checkpoint(path: str | Path) -> Path:
    """Return the checkpoint folder ``path`` names: a ``step-N`` folder, a checkpoint root or a run folder (whose
    ``checkpoints`` root is meant): for a root, its newest intact checkpoint.

    A root's newer damaged checkpoints are passed over with a one-line warning
    each. Raises CheckpointError when there is none (exit status 2 when there
    are checkpoints but none is intact).
    """
    folder = Path(path)
    if (folder / STATE_FILE).is_file():
        return folder
    if (folder / "checkpoints").is_dir() and not any(folder.glob("step-*")):  # a run folder
        folder = folder / "checkpoints"
    chosen, rejected = CheckpointDir(folder).newest_intact()
    if chosen is None and rejected:
        found = "; ".join(f"{v.path.name} {describe(v)}" for v in rejected[:3])
        raise CheckpointError(
            f"no intact checkpoint in {folder} ({found}); `trinity checkpoints verify {folder}` shows each one",
            exit_code=EXIT_USAGE,
        )
    if chosen is None:
        raise CheckpointError(
            f"no complete trainer checkpoint at {folder} (expected step-N folders or a 'latest' file)"
        )
    warn_rejected(rejected, chosen)
    return chosen.path
