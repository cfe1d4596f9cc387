"""The manifest of a checkpoint: size and checksum of every file, written last, checked before a resume.

``manifest.json`` inside a ``step-N`` folder lists each file (relative path,
size in bytes, SHA-256 digest) that the save wrote, every rank's shards
included. It is written atomically after every other file, so a checkpoint
with a valid manifest is complete; :func:`verify` re-reads the files and
reports the first one whose size or digest differs. Files added to a
checkpoint after it was committed (the Hugging Face export) are not listed
and not checked. Checkpoints written before manifests existed are checked
the old way: a readable state file and actor metadata.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trinity.utils.fs import write_text_atomic

MANIFEST_FILE = "manifest.json"
#: Version of the manifest's format, stored in it.
MANIFEST_VERSION = 1
#: Key of the trainer state that says the checkpoint carries a manifest (so a missing one is noticed).
STATE_MANIFEST_KEY = "manifest"
#: Bytes read at a time while hashing.
CHUNK_BYTES = 1 << 20
#: The state file's name (the same as :data:`trinity.trainer.checkpoint.STATE_FILE`).
_STATE_FILE = "trainer_state.json"
#: Folders of a checkpoint that are written after the manifest and therefore not listed.
UNLISTED = frozenset({"huggingface"})

Status = Literal["ok", "legacy", "damaged", "incomplete"]


@dataclass(frozen=True)
class Verdict:
    """The state of one checkpoint folder, as :func:`verify` found it."""

    #: The checkpoint folder.
    path: Path
    #: ``ok`` (manifest matches), ``legacy`` (no manifest, old checks passed), ``damaged`` or ``incomplete``.
    status: Status
    #: What is wrong (file and problem), empty when intact.
    reason: str = ""
    #: Number of files listed (or found, for a legacy checkpoint).
    files: int = 0
    #: Bytes of those files.
    size: int = 0

    @property
    def intact(self) -> bool:
        """True when the checkpoint may be loaded."""
        return self.status in ("ok", "legacy")


def file_digest(path: Path) -> str:
    """Return the hex SHA-256 digest of the file at ``path``, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _listed_files(folder: Path) -> list[Path]:
    files: list[Path] = []
    for root, dirs, names in os.walk(folder):
        here = Path(root)
        if here == folder:
            dirs[:] = [d for d in dirs if d not in UNLISTED]
        files.extend(here / name for name in names if not (here == folder and name == MANIFEST_FILE))
    return sorted(files)


def write_manifest(folder: str | Path) -> Path:
    """Hash every file under ``folder`` and write its manifest atomically; return the manifest's path."""
    root = Path(folder)
    entries = {
        file.relative_to(root).as_posix(): {"size": file.stat().st_size, "sha256": file_digest(file)}
        for file in _listed_files(root)
    }
    manifest = {"version": MANIFEST_VERSION, "algorithm": "sha256", "files": entries}
    path = root / MANIFEST_FILE
    write_text_atomic(path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return path


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _verify_legacy(folder: Path) -> Verdict:
    files = _listed_files(folder)
    size = sum(file.stat().st_size for file in files)
    try:
        state = _read_json(folder / _STATE_FILE)
    except (OSError, ValueError) as exc:
        return Verdict(folder, "damaged", f"{_STATE_FILE}: unreadable ({type(exc).__name__})", len(files), size)
    if not isinstance(state, dict):
        return Verdict(folder, "damaged", f"{_STATE_FILE}: not a JSON object", len(files), size)
    if state.get(STATE_MANIFEST_KEY):
        return Verdict(folder, "incomplete", f"{MANIFEST_FILE}: missing", len(files), size)
    if not (folder / "actor" / ".metadata").is_file():
        return Verdict(folder, "damaged", "actor/.metadata: missing", len(files), size)
    return Verdict(folder, "legacy", "", len(files), size)


def verify(folder: str | Path, checksums: bool = True) -> Verdict:
    """Check the checkpoint ``folder`` against its manifest and return what was found (never raises for damage).

    With ``checksums=False`` only the presence and size of each file are
    checked (no file is read): cheap, but blind to altered bytes.
    """
    root = Path(folder)
    if not (root / _STATE_FILE).is_file():
        return Verdict(root, "incomplete", f"{_STATE_FILE}: missing")
    path = root / MANIFEST_FILE
    if not path.is_file():
        return _verify_legacy(root)
    try:
        manifest = _read_json(path)
        entries = manifest["files"]
        if not isinstance(entries, dict) or not entries:
            raise ValueError("no files listed")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Verdict(root, "incomplete", f"{MANIFEST_FILE}: unreadable ({type(exc).__name__})")
    total = sum(int(entry.get("size", 0)) for entry in entries.values())
    for name, entry in sorted(entries.items()):
        file = root / name
        if not file.is_file():
            return Verdict(root, "damaged", f"{name}: missing", len(entries), total)
        size = file.stat().st_size
        if size != entry.get("size"):
            return Verdict(root, "damaged", f"{name}: {size} bytes, expected {entry.get('size')}", len(entries), total)
        if checksums and file_digest(file) != entry.get("sha256"):
            return Verdict(root, "damaged", f"{name}: checksum mismatch", len(entries), total)
    return Verdict(root, "ok", "", len(entries), total)
