"""A fast check of a data set for dry runs: it exists, has the split, and its first record has the format's keys.

It reads as little as it can and imports neither ``datasets`` nor torch for
the common cases, with the split rules of ``datasets.load_dataset`` (which
:func:`trinity.buffer.datasets.load_split` uses), so what it accepts loads:

* a single ``.json``/``.jsonl``/``.ndjson``/``.parquet``/``.arrow`` file: split ``train``; JSON Lines
  are read up to the first record, Parquet and Arrow files up to their schema;
* a folder of such files (one format), split by file and folder names as ``datasets`` does;
* a ``save_to_disk`` folder: splits from ``dataset_dict.json``, keys from the Arrow schema.

Everything else falls back to ``datasets`` (its builder for the split names, a
streamed first record for the keys): a folder with a ``README.md`` dataset card
(YAML header), with files of another format or mixed formats, with sharded
``data/<split>-00000-of-00001`` names, or a JSON file that is neither JSON Lines
nor a list of objects. A hub id is not read: it passes when the hub answers or
a cached copy is found, and fails fast otherwise.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trinity.buffer.datasets import (
    FILE_BUILDERS,
    KINDS,
    DatasetError,
    check_no_subset,
    check_single_file,
    check_splits,
    empty_message,
    hub_reachable,
    looks_like_hub_id,
    missing_path_message,
    no_data_files_message,
    not_local_message,
    offline_by_env,
    open_builder,
    read_failure,
    saved_to_disk,
    unreadable_message,
    unsupported_file_message,
)
from trinity.buffer.record_keys import missing_key_message, required_keys

if TYPE_CHECKING:
    from trinity.common.config.schema.buffer import FormatConfig

#: Files ``datasets`` never reads as data.
IGNORED_FILES = {"README.md", "config.json", "dataset_info.json", "dataset_infos.json", "dummy_data.zip",
                 "dataset_dict.json"}
#: ``datasets`` split keywords, in its split order.
SPLIT_KEYWORDS = {"train": ("train", "training"), "validation": ("validation", "valid", "dev", "val"),
                  "test": ("test", "testing", "eval", "evaluation")}
#: JSON Lines files up to this size are parsed whole before a run, so a broken line fails before Ray starts.
JSONL_FULL_CHECK_BYTES = 64 << 20
_SEP = "[-._ 0-9]"
_DIR_PATTERNS = ("**/{k}/**", "**/{k}" + _SEP + "*/**", "**/*" + _SEP + "{k}/**", "**/*" + _SEP + "{k}" + _SEP + "*/**")
_FILE_PATTERNS = ("**/{k}" + _SEP + "*", "**/*" + _SEP + "{k}" + _SEP + "*")
_SHARDED = re.compile(r"data/[^/]+-[0-9]{5}-of-[0-9]{5}[^/]*\.[^/]*")
#: Suffixes that make ``datasets`` read a file in some way this module does not copy.
_OTHER_FORMATS = {".csv", ".tsv", ".txt", ".zip", ".gz", ".bz2", ".xz", ".zst", ".lz4", ".tar", ".lance",
                  ".vortex", ".geoparquet", ".gpq", ".eval", ".py"}


@dataclass(frozen=True)
class DatasetCheck:
    """What a dry-run check found."""

    #: The path as configured.
    path: str
    #: ``file``, ``folder``, ``saved`` (``save_to_disk``) or ``hub``.
    kind: str
    #: The splits the data set has (empty for a hub id, which is not read).
    splits: tuple[str, ...]
    #: The keys (columns) of the split's first record (empty for a hub id).
    keys: tuple[str, ...]
    #: The file the first record was read from ("" for a hub id).
    source: str
    #: How it was checked: ``json``, ``pyarrow``, ``datasets`` or ``not read`` (hub).
    method: str


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """Return a regex matching relative POSIX paths as fsspec's glob matches ``pattern`` (``**``, ``*``, ``[..]``)."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out.append(pattern[i : end + 1])
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _split_patterns(templates: tuple[str, ...]) -> dict[str, list[re.Pattern[str]]]:
    return {split: [_glob_regex(t.format(k=k)) for k in keywords for t in templates]
            for split, keywords in SPLIT_KEYWORDS.items()}


_BY_DIR = _split_patterns(_DIR_PATTERNS)
_BY_FILE = _split_patterns(_FILE_PATTERNS)


def visible_files(folder: Path) -> list[str]:
    """Return the files under ``folder`` that ``datasets`` considers, as sorted relative POSIX paths.

    Hidden files and folders (``.name``), special folders (``__name``) and
    ``datasets``' ignored names (``README.md``, ``dataset_info.json``, ...) are left out.
    """
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith((".", "__"))]
        rel_root = Path(root).relative_to(folder)
        for file in files:
            if file.startswith(".") or file in IGNORED_FILES:
                continue
            found.append((rel_root / file).as_posix())
    return sorted(found)


def _builder_of(file: str) -> str | None:
    """Return the builder of a data file, or None when ``datasets`` might read it some other way."""
    suffixes = [s.lower() for s in Path(file).suffixes]
    if not suffixes or suffixes[-1] not in FILE_BUILDERS:
        return None
    if any(s in _OTHER_FORMATS or s in FILE_BUILDERS for s in suffixes[:-1]):
        return None
    return FILE_BUILDERS[suffixes[-1]]


def _has_card(folder: Path) -> bool:
    readme = folder / "README.md"
    if not readme.is_file():
        return False
    with readme.open("r", encoding="utf-8", errors="replace") as handle:
        return handle.readline().strip() == "---"


def folder_splits(folder: Path) -> dict[str, list[str]] | None:
    """Return ``{split: relative files}`` of a data folder as ``datasets.load_dataset`` splits it, or None.

    None means the layout is one this module does not copy (see the module
    docstring) and ``datasets`` must be asked. Splits come from folder names
    (``train/``, ``test-1/``, ...), else file names (``train.jsonl``,
    ``my_test_0.parquet``, ...), else every file is ``train``; the keywords
    are ``datasets``' (``train``/``training``, ``validation``/``valid``/``dev``/``val``,
    ``test``/``testing``/``eval``/``evaluation``). An empty dict: no data file.
    """
    if _has_card(folder) or (folder / "dataset_infos.json").exists():
        return None
    files = visible_files(folder)
    builders = {_builder_of(f) for f in files}
    if None in builders or len(builders) > 1 or any(_SHARDED.fullmatch(f) for f in files):
        return None
    if not files:
        return {}
    for patterns in (_BY_DIR, _BY_FILE):
        splits: dict[str, list[str]] = {}
        for split, regexes in patterns.items():
            matched: list[str] = []
            for regex in regexes:
                matched.extend(f for f in files if regex.match(f) and f not in matched)
            if matched:
                splits[split] = matched
        if splits:
            return splits
    return {"train": files}


def _json_first(file: Path) -> dict[str, Any] | None:
    """Return the first record of a JSON / JSON Lines file as ``datasets``' json builder reads it.

    Returns {} when the file holds no record, None when it is neither JSON Lines
    of objects nor a JSON list (then ``datasets`` decides what it is).
    """
    with file.open("rb") as handle:
        head = handle.read(64 << 10).lstrip(b"\xef\xbb\xbf").lstrip()
        if head.startswith(b"["):
            rows = json.loads(head + handle.read())
            if not rows:
                return {}
            first = rows[0]
            return first if isinstance(first, dict) else {"text": first}
        handle.seek(0)
        for number, raw in enumerate(handle, start=1):
            line = raw.lstrip(b"\xef\xbb\xbf").strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                return None
            if not isinstance(record, dict):
                return None
            if file.stat().st_size <= JSONL_FULL_CHECK_BYTES:
                _check_json_lines(handle, number)
            return record
    return {}


def _check_json_lines(lines: Iterable[bytes], first: int) -> None:
    """Parse the lines after line ``first``; raises ValueError naming the first that is not a JSON object."""
    for number, raw in enumerate(lines, start=first + 1):
        line = raw.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"line {number} is not valid JSON: {exc}") from None
        if not isinstance(record, dict):
            raise ValueError(f"line {number} is a JSON {type(record).__name__}, not an object")


def _arrow_columns(file: Path) -> tuple[list[str], bool]:
    """Return the columns of an Arrow (stream or file format) file and whether it has a row."""
    import pyarrow as pa

    with pa.memory_map(str(file)) as source:
        try:
            stream = pa.ipc.open_stream(source)
            names = list(stream.schema.names)
            return names, any(batch.num_rows for batch in _batches(stream))
        except pa.ArrowInvalid:
            source.seek(0)
            reader = pa.ipc.open_file(source)
            rows = any(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
            return list(reader.schema.names), rows


def _batches(stream: Any) -> Iterator[Any]:
    while True:
        try:
            yield stream.read_next_batch()
        except StopIteration:
            return


def _first_keys(file: Path) -> list[str] | None:
    """Return the keys of the first record of a data file, [] when it has none, None when ``datasets`` must decide.

    Raises ValueError / OSError (pyarrow's) for an unreadable Parquet or Arrow file.
    """
    builder = FILE_BUILDERS[file.suffix.lower()]
    if builder == "json":
        record = _json_first(file)
        return None if record is None else list(record)
    if builder == "parquet":
        import pyarrow.parquet as pq

        meta = pq.read_metadata(file)
        return list(meta.schema.to_arrow_schema().names) if meta.num_rows else []
    names, has_rows = _arrow_columns(file)
    return names if has_rows else []


def _hub_cached(path: str) -> bool:
    """Return whether the hub data set ``path`` seems to be in the local Hugging Face caches."""
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    hub = Path(os.environ.get("HF_HUB_CACHE") or home / "hub")
    cache = Path(os.environ.get("HF_DATASETS_CACHE") or home / "datasets")
    return (hub / ("datasets--" + path.replace("/", "--"))).is_dir() or (cache / path.replace("/", "___")).is_dir()


def _first_of(name: str, path: str, files: list[Path], split: str) -> tuple[list[str], str] | None:
    """Return the first record's keys and its file among ``files``; None when ``datasets`` must read them.

    Raises DatasetError for an unreadable file or when no file has a record.
    """
    for file in files:
        try:
            keys = _first_keys(file)
        except (ValueError, OSError) as exc:
            cause = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise DatasetError(unreadable_message(name, str(file), cause)) from None
        if keys is None:
            return None
        if keys:
            return keys, str(file)
    raise DatasetError(empty_message(name, path, split))


def _by_datasets(name: str, path: str, split: str, subset_name: str | None,
                 cache_dir: str | None) -> tuple[list[str], list[str]]:
    """Return (splits, column names) as ``datasets`` reads them.

    The split is prepared into the ``datasets`` cache (which the run then
    reuses): streaming would read less but imports torch.
    """
    builder = open_builder(name, path, split, subset_name, cache_dir=cache_dir)
    splits = [str(s) for s in builder.config.data_files or ()]
    try:
        builder.download_and_prepare()
        dataset = builder.as_dataset(split=split)
    except Exception as exc:  # noqa: BLE001 - datasets raises many types for a malformed file
        raise read_failure(name, path, split, exc) from None
    if len(dataset) == 0:
        raise DatasetError(empty_message(name, path, split))
    return splits, list(dataset.column_names)


def _saved(name: str, path: str, folder: Path, split: str, subset_name: str | None) -> DatasetCheck:
    """Check a ``save_to_disk`` folder from its index files and the Arrow schema of its first data file."""
    check_no_subset(name, path, subset_name, "a folder written by save_to_disk")
    index = folder / "dataset_dict.json"
    try:
        splits = [str(s) for s in json.loads(index.read_text())["splits"]] if index.is_file() else ["train"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DatasetError(unreadable_message(name, str(index), str(exc))) from None
    wanted = check_splits(name, path, split, splits)[0]
    part = folder / wanted if index.is_file() else folder
    try:
        state = json.loads((part / "state.json").read_text())
        files = [part / entry["filename"] for entry in state["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DatasetError(unreadable_message(name, str(part / "state.json"), str(exc))) from None
    found = _first_of(name, path, files, split)
    assert found is not None  # Arrow files are always read here
    return DatasetCheck(path, "saved", tuple(splits), tuple(found[0]), found[1], "pyarrow")


def _local(name: str, path: str, local: Path, split: str, subset_name: str | None, *,
           cache_dir: str | None) -> DatasetCheck:
    """Check a local file or (not saved) folder, asking ``datasets`` only for layouts not copied here."""
    kind = "folder" if local.is_dir() else "file"
    layout: dict[str, list[str]] | None
    if kind == "file":
        if local.suffix.lower() not in FILE_BUILDERS:
            raise DatasetError(unsupported_file_message(name, path))
        check_single_file(name, path, split, subset_name)
        layout, root = {"train": [local.name]}, local.parent
    else:
        layout, root = folder_splits(local), local
        if layout == {}:
            raise DatasetError(no_data_files_message(name, path))
        if layout is not None and subset_name not in (None, "", "default"):
            raise DatasetError(
                f"{name}: {path} has no subset {subset_name!r}; its subsets: default; set subset_name to one of them"
            )
    if layout is not None:
        wanted = check_splits(name, path, split, list(layout))
        files = [root / file for one in wanted for file in layout[one]]
        found = _first_of(name, path, files, split)
        if found is not None:
            method = "json" if FILE_BUILDERS[Path(found[1]).suffix.lower()] == "json" else "pyarrow"
            return DatasetCheck(path, kind, tuple(layout), tuple(found[0]), found[1], method)
    splits, first = _by_datasets(name, path, split, subset_name, cache_dir)
    return DatasetCheck(path, kind, tuple(splits), tuple(first), path, "datasets")


def inspect_dataset(
    name: str,
    path: str | None,
    split: str = "train",
    subset_name: str | None = None,
    *,
    keys: Mapping[str, str] | None = None,
    cache_dir: str | None = None,
) -> DatasetCheck:
    """Check that the data set at ``path`` exists, has ``split``, and that its first record has ``keys``.

    ``keys`` maps format fields to record keys (see
    :func:`trinity.buffer.record_keys.required_keys`). Returns what was found.
    Raises :class:`DatasetError` (one line) for an empty or missing path, a
    hub id while the hub is unreachable and nothing is cached, a missing split
    or subset (naming those that exist), an unreadable file, a split without
    records, or a first record lacking a key (naming the format field and the
    record's keys). ``cache_dir``: the ``datasets`` cache of the layouts it
    must ask ``datasets`` about (default: its own).
    """
    if path is None or not str(path).strip():
        raise DatasetError(f"{name}: no path; set path to {KINDS}, or a hub id")
    path = str(path)
    local = Path(path).expanduser()
    if not local.exists():
        if not looks_like_hub_id(path):
            raise DatasetError(missing_path_message(name, path))
        if not _hub_cached(path) and (offline_by_env() or not hub_reachable()):
            raise DatasetError(not_local_message(name, path))
        return DatasetCheck(path, "hub", (), (), "", "not read")
    if local.is_dir() and saved_to_disk(local):
        check = _saved(name, path, local, split, subset_name)
    else:
        check = _local(name, path, local, split, subset_name, cache_dir=cache_dir)
    for field, key in (keys or {}).items():
        if key not in check.keys:
            where = f"{name}: the first record of {check.source} (split {split!r})"
            raise DatasetError(missing_key_message(where, field, key, check.keys))
    return check


def check_dataset(  # noqa: PLR0917 - positional, as the config preflight calls its data check
    path: str | None,
    split: str = "train",
    subset_name: str | None = None,
    fmt: FormatConfig | None = None,
    where: str = "data set",
    schema: str | None = "task",
    *,
    require_response: bool = True,
    cache_dir: str | None = None,
) -> str | None:
    """Return the one-line problem of a data set for a dry run, or None when it looks right.

    The fast check of :func:`inspect_dataset`
    (no torch; ``datasets`` only for layouts it does not copy): the path
    exists (or is a reachable or cached hub id), the split and subset exist,
    and the first record has the keys ``fmt`` needs for ``schema`` (``task``,
    ``sft`` or ``dpo``; see :func:`trinity.buffer.record_keys.required_keys`).
    ``where`` names the data set in the message. Never raises for a data or
    format problem: it is returned.
    """
    try:
        keys = {} if fmt is None else required_keys(fmt, str(schema or "task"), require_response=require_response)
        inspect_dataset(where, path, split, subset_name, keys=keys, cache_dir=cache_dir)
    except DatasetError as exc:
        return str(exc)
    except ValueError as exc:  # an unknown schema or prompt type
        return f"{where}: {exc}"
    return None
