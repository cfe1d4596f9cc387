"""Reading task sets: JSONL and Parquet files (a file or a folder of them) into task records.

A task record is a plain dict (typed as :class:`TaskRecord`) carrying the
prompt and answer found under the task set's configured keys, the whole
original record, its index in the task set and where it was read from. The
explorer's launcher turns records into workflow tasks.

Every problem is a :class:`~trinity.buffer.errors.TaskFileError` with one line
naming the file (and line or row) and what to do.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

from trinity.buffer.errors import TaskFileError
from trinity.common.config.schema import TaskSetConfig

#: File suffixes read as task files, by format.
SUFFIXES = {".jsonl": "jsonl", ".parquet": "parquet"}


class TaskRecord(TypedDict):
    """One task as read from a task set (a plain dict at run time)."""

    #: The prompt text (value of the task set's ``prompt_key``).
    prompt: Any
    #: The reference answer (value of ``answer_key``); None when the task set has no ``answer_key``.
    answer: Any
    #: The whole record as read from the file.
    raw: dict[str, Any]
    #: Position of the record in the task set (0-based; files in name order, then line/row order).
    index: int
    #: Where it was read from: ``file:line`` (JSONL) or ``file:row N`` (Parquet).
    source: str
    #: Name of the task set (``TaskSetConfig.name``).
    task_set: str


def task_files(path: str | Path, set_name: str = "train") -> list[Path]:
    """Return the task files of ``path``: the file itself, or the ``.jsonl``/``.parquet`` files of a folder, sorted.

    Raises :class:`TaskFileError` when the path is empty or missing, has an
    unsupported suffix, or is a folder without task files.
    """
    if not str(path).strip():
        raise TaskFileError(f"task set {set_name!r} has no path; set its path to a .jsonl/.parquet file or folder")
    root = Path(path).expanduser()
    if not root.exists():
        raise TaskFileError(
            f"task set {set_name!r}: {root} does not exist; point its path at a .jsonl/.parquet file or folder"
        )
    if root.is_dir():
        files = sorted(p for p in root.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES)
        if not files:
            raise TaskFileError(f"task set {set_name!r}: folder {root} holds no .jsonl or .parquet file")
        return files
    if root.suffix.lower() not in SUFFIXES:
        raise TaskFileError(
            f"task set {set_name!r}: {root} is not a task file; use a .jsonl or .parquet file (or a folder of them)"
        )
    return [root]


def _jsonl_records(file: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(source, record)`` of each non-blank line of a JSONL file; raises TaskFileError on a bad line."""
    try:
        with file.open("r", encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                source = f"{file}:{number}"
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TaskFileError(f"{source}: not valid JSON ({exc.msg} at column {exc.colno})") from None
                if not isinstance(record, dict):
                    raise TaskFileError(f"{source}: expected a JSON object, got {type(record).__name__}")
                yield source, record
    except UnicodeDecodeError as exc:
        raise TaskFileError(f"{file}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise TaskFileError(f"{file}: cannot be read ({exc.strerror or exc})") from None


def _parquet_records(file: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(source, record)`` of each row of a Parquet file; raises TaskFileError when it cannot be read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(file)
    except (OSError, pa.ArrowException) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TaskFileError(f"{file}: not a readable Parquet file ({first})") from None
    for number, record in enumerate(table.to_pylist(), start=1):
        yield f"{file}:row {number}", record


def read_records(file: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(source, record)`` for every record of one task file, by its suffix."""
    if SUFFIXES.get(file.suffix.lower()) == "parquet":
        return _parquet_records(file)
    return _jsonl_records(file)


def _lookup(record: dict[str, Any], key: str, role: str, source: str, set_name: str) -> Any:
    """Return ``record[key]``; raises TaskFileError naming the key, its role and the record's source."""
    if key not in record:
        known = ", ".join(sorted(map(str, record))) or "none"
        raise TaskFileError(
            f"{source}: record has no {role} key {key!r} (task set {set_name!r}; its keys: {known}); "
            f"fix the file or set the task set's {role}_key"
        )
    return record[key]


def load_tasks(task_set: TaskSetConfig) -> list[TaskRecord]:
    """Return every task record of ``task_set`` in order.

    ``prompt_key`` is required in every record; ``answer_key`` too unless it is
    empty (then ``answer`` is None). Raises :class:`TaskFileError` for a missing
    path, a malformed line (``file:line``), a record lacking a key, or a task set
    with no record at all.
    """
    records: list[TaskRecord] = []
    for file in task_files(task_set.path, task_set.name):
        for source, raw in read_records(file):
            prompt = _lookup(raw, task_set.prompt_key, "prompt", source, task_set.name)
            answer = _lookup(raw, task_set.answer_key, "answer", source, task_set.name) if task_set.answer_key else None
            records.append(
                TaskRecord(prompt=prompt, answer=answer, raw=raw, index=len(records), source=source,
                           task_set=task_set.name)
            )
    if not records:
        raise TaskFileError(f"task set {task_set.name!r}: {task_set.path} holds no task")
    return records
