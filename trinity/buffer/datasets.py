"""Reading a data set (a task set, SFT or DPO data) through Hugging Face ``datasets``, as upstream Trinity-RFT does.

``path`` is one of:

* a local folder of data files, read like ``datasets.load_dataset(folder, name=subset_name, split=split)``
  (split names come from file and folder names: ``train.jsonl`` + ``test.jsonl`` give ``train`` and
  ``test``; files without a split keyword are all ``train``);
* a local folder written by ``save_to_disk`` (a ``Dataset``: the one split ``train``; a
  ``DatasetDict``: its splits), read with ``datasets.load_from_disk``;
* a single ``.json``/``.jsonl``/``.ndjson``/``.parquet``/``.arrow`` file: the one split ``train``;
* a hub id (``owner/name``): downloaded when the hub is reachable, else read from the local cache
  in offline mode (no network retries).

``split`` may slice or join splits as ``datasets`` does (``train[:100]``, ``train+test``).
Every problem is a :class:`DatasetError`: one line naming the data set, the path and what to do.
``datasets`` is imported only when a data set is loaded. The dry run's fast check, which
returns the problem instead of raising, is :func:`trinity.buffer.dataset_check.check_dataset`.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trinity.buffer.errors import DatasetError as DatasetError

if TYPE_CHECKING:
    from datasets import Dataset


#: File suffix -> ``datasets`` packaged builder, for the single files and folders read here.
FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".ndjson": "json", ".parquet": "parquet", ".arrow": "arrow"}
#: What a path may point at, for messages.
KINDS = "a JSON/JSONL/Parquet/Arrow file or a folder of them"
#: Files that mark a folder written by ``save_to_disk`` (a DatasetDict; a Dataset).
SAVED_MARKERS = ("dataset_dict.json", "state.json")

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
_SPLIT_NAME = re.compile(r"\s*([\w.-]+)\s*(\[[^\]]*\])?\s*")
_TRUE = {"1", "on", "yes", "true"}


def split_names(split: str) -> list[str]:
    """Return the split names a split spec reads (``train[:10]+test`` -> ``['train', 'test']``).

    Raises ValueError for a spec that is not ``name``, ``name[slice]`` or a ``+`` of those.
    """
    names = []
    for part in str(split).split("+"):
        match = _SPLIT_NAME.fullmatch(part)
        if not match:
            raise ValueError(f"split {split!r} is not a split name (like 'train', 'train[:100]' or 'train+test')")
        names.append(match.group(1))
    return names


def saved_to_disk(folder: Path) -> bool:
    """Return whether ``folder`` was written by ``save_to_disk`` (holds ``dataset_dict.json`` or ``state.json``)."""
    return any((folder / marker).is_file() for marker in SAVED_MARKERS)


def looks_like_hub_id(path: str) -> bool:
    """Return whether ``path`` could name a hub data set (``name`` or ``owner/name``, no data-file suffix)."""
    return bool(_HUB_ID.fullmatch(path)) and Path(path).suffix.lower() not in FILE_BUILDERS


def offline_by_env() -> bool:
    """Return whether ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` ask for offline mode."""
    names = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
    return any(os.environ.get(name, "").strip().lower() in _TRUE for name in names)


def hub_reachable(timeout: float = 1.0) -> bool:
    """Return whether the hub (``HF_ENDPOINT``, default huggingface.co) answers an HTTP HEAD within ``timeout`` s.

    Any HTTP status counts as an answer; proxies come from the environment, as
    for ``urllib``. Never raises; the request runs in a daemon thread, so a
    hanging resolver or handshake costs ``timeout`` at most.
    """
    import urllib.error
    import urllib.request

    endpoint = (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/") + "/"
    outcome: list[bool] = []

    def probe() -> None:
        try:
            with urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout):
                outcome.append(True)
        except urllib.error.HTTPError:
            outcome.append(True)
        except (OSError, ValueError):
            outcome.append(False)

    thread = threading.Thread(target=probe, name="trinity-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(outcome and outcome[0])


def not_local_message(name: str, path: str) -> str:
    """Return the one-line message for a path that is neither local nor readable from the hub."""
    return (
        f"{name}: {path} is not a local file or folder, and the Hugging Face hub is not reachable "
        f"(or the dataset is not cached): download it first, or point path at a local copy"
    )


def missing_path_message(name: str, path: str) -> str:
    """Return the one-line message for a local-looking path that does not exist."""
    return f"{name}: {path} does not exist; point path at {KINDS} (or a hub id)"


def first_line(exc: BaseException) -> str:
    """Return the first line of ``exc``, or of its first cause that says more than "an error occurred"."""
    lines = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current).strip().splitlines()
        if text and text[0].strip():
            lines.append(text[0].strip())
        current = current.__cause__ or current.__context__
    specific = [line for line in lines if not line.startswith("An error occurred while generating the dataset")]
    return (specific or lines or [type(exc).__name__])[0]


def _split_error(name: str, path: str, split: str, splits: list[str]) -> DatasetError:
    listed = ", ".join(splits) or "none"
    return DatasetError(f"{name}: {path} has no split {split!r}; its splits: {listed}; set split to one of them")


def check_splits(name: str, path: str, split: str, splits: list[str]) -> list[str]:
    """Return the split names ``split`` reads; raises DatasetError unless each is among ``splits``."""
    try:
        wanted = split_names(split)
    except ValueError as exc:
        raise DatasetError(f"{name}: {exc}") from None
    for one in wanted:
        if one not in splits:
            raise _split_error(name, path, one, splits)
    return wanted


def check_no_subset(name: str, path: str, subset_name: str | None, what: str) -> None:
    """Raise DatasetError when ``subset_name`` is set (other than ``default``) for a data set ``what`` without any."""
    if subset_name not in (None, "", "default"):
        raise DatasetError(
            f"{name}: {path} is {what} and has no subset {subset_name!r} (only 'default'); remove subset_name"
        )


def check_single_file(name: str, path: str, split: str, subset_name: str | None) -> None:
    """Raise DatasetError unless a single data file is read as split ``train`` without a subset."""
    check_no_subset(name, path, subset_name, "a single file")
    try:
        wanted = split_names(split)
    except ValueError as exc:
        raise DatasetError(f"{name}: {exc}") from None
    wrong = [one for one in wanted if one != "train"]
    if wrong:
        raise DatasetError(
            f"{name}: {path} is a single file, read as the one split 'train' (not {wrong[0]!r}); "
            f"set split to 'train', or point path at a folder holding {wrong[0]} files"
        )


def unsupported_file_message(name: str, path: str) -> str:
    """Return the one-line message for a file whose suffix is not a data file's."""
    return f"{name}: {path} is not a JSON/JSONL/Parquet/Arrow file; convert it, or point path at {KINDS}"


def no_data_files_message(name: str, path: str) -> str:
    """Return the one-line message for a folder without data files."""
    return f"{name}: {path} holds no JSON/JSONL/Parquet/Arrow data file; add data files, or fix path"


def empty_message(name: str, path: str, split: str) -> str:
    """Return the one-line message for a split without records."""
    return f"{name}: {path} (split {split!r}) holds no record; point path at a data set with records"


def unreadable_message(name: str, path: str, cause: str) -> str:
    """Return the one-line message for a malformed file (``cause``: the first line of what went wrong)."""
    return f"{name}: {path} cannot be read ({cause}); fix the file, or point path at {KINDS}"


@contextmanager
def _progress_bars(enabled: bool) -> Iterator[None]:
    """Show or hide the ``datasets`` progress bars inside the block, then restore the previous setting."""
    import datasets

    was_enabled = datasets.is_progress_bar_enabled()
    if enabled:
        datasets.enable_progress_bars()
    else:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was_enabled:
            datasets.enable_progress_bars()
        else:
            datasets.disable_progress_bars()


@contextmanager
def _offline_mode() -> Iterator[None]:
    """Put ``datasets`` and ``huggingface_hub`` in offline mode inside the block (cache only, no network)."""
    import datasets.config
    import huggingface_hub.constants

    saved = (datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE,
             huggingface_hub.constants.HF_HUB_OFFLINE)
    datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = True
    huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        (datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE,
         huggingface_hub.constants.HF_HUB_OFFLINE) = saved


def _import_datasets(name: str) -> Any:
    try:
        import datasets
    except ImportError:
        raise DatasetError(f"{name}: reading data sets needs the `datasets` package; pip install datasets") from None
    return datasets


def _select(name: str, path: str, parts: dict[str, Dataset], split: str) -> Dataset:
    """Return ``split`` (slices and ``+`` allowed) of in-memory splits ``parts``."""
    import datasets
    from datasets.arrow_reader import ReadInstruction

    check_splits(name, path, split, list(parts))
    try:
        instructions = ReadInstruction.from_spec(split).to_absolute({k: len(v) for k, v in parts.items()})
    except (ValueError, AssertionError) as exc:
        raise DatasetError(f"{name}: split {split!r} of {path}: {first_line(exc)}") from None
    pieces = [parts[i.splitname].select(range(i.from_, i.to)) for i in instructions]
    return pieces[0] if len(pieces) == 1 else datasets.concatenate_datasets(pieces)


def _load_saved(name: str, path: str, folder: Path, split: str, subset_name: str | None) -> Dataset:
    datasets = _import_datasets(name)
    check_no_subset(name, path, subset_name, "a folder written by save_to_disk")
    try:
        saved = datasets.load_from_disk(str(folder))
    except Exception as exc:  # noqa: BLE001 - any failure of a saved folder is reported the same way
        raise DatasetError(
            f"{name}: {path} cannot be read as a save_to_disk folder ({first_line(exc)}); save it again"
        ) from None
    parts = dict(saved) if isinstance(saved, datasets.DatasetDict) else {"train": saved}
    return _select(name, path, parts, split)


_AVAILABLE = re.compile(r"Available: \[(.*)\]")
_SHOULD_BE = re.compile(r"Should be one of \[(.*)\]")


def _listed(pattern: re.Pattern[str], message: str) -> list[str]:
    match = pattern.search(message)
    return [item.strip().strip("'\"") for item in match.group(1).split(",")] if match else []


def _builder(name: str, path: str, split: str, subset_name: str | None, *, cache_dir: str | None,
             builder_args: dict[str, Any]) -> Any:
    """Return the ``datasets`` builder ``load_dataset`` would use, its split checked; raises DatasetError."""
    import datasets
    from datasets.data_files import EmptyDatasetError
    from datasets.exceptions import DataFilesNotFoundError, DatasetNotFoundError

    try:
        builder = datasets.load_dataset_builder(name=subset_name, cache_dir=cache_dir, **builder_args)
    except (DataFilesNotFoundError, EmptyDatasetError):
        raise DatasetError(no_data_files_message(name, path)) from None
    except DatasetNotFoundError:
        if datasets.config.HF_HUB_OFFLINE:  # offline: "not found" only means "not cached"
            raise DatasetError(not_local_message(name, path)) from None
        raise DatasetError(
            f"{name}: {path} is not a local file or folder, nor a data set on the Hugging Face hub; "
            f"check the name, or point path at a local copy"
        ) from None
    except ConnectionError:
        raise DatasetError(not_local_message(name, path)) from None
    except Exception as exc:  # noqa: BLE001 - datasets raises many types for an unreadable folder
        subsets = _listed(_AVAILABLE, str(exc))
        if isinstance(exc, ValueError) and "BuilderConfig" in str(exc) and subsets:
            raise DatasetError(
                f"{name}: {path} has no subset {subset_name!r}; its subsets: {', '.join(subsets)}; "
                f"set subset_name to one of them"
            ) from None
        raise DatasetError(f"{name}: {path} cannot be read ({first_line(exc)}); fix the data, or fix path") from None
    files = builder.config.data_files
    if files:
        check_splits(name, path, split, [str(s) for s in files])
    return builder


def read_failure(name: str, path: str, split: str, exc: Exception) -> DatasetError:
    """Return the DatasetError for a failure while reading the records of ``split``."""
    if isinstance(exc, StopIteration) or "corresponds to no data" in str(exc):  # datasets' word for an empty file
        return DatasetError(empty_message(name, path, split))
    if isinstance(exc, ConnectionError):
        return DatasetError(not_local_message(name, path))
    splits = _listed(_SHOULD_BE, str(exc))
    if isinstance(exc, ValueError) and "Unknown split" in str(exc) and splits:
        return _split_error(name, path, split_names(split)[0], splits)
    return DatasetError(unreadable_message(name, path, first_line(exc)))


def open_builder(
    name: str, path: str, split: str = "train", subset_name: str | None = None, *, cache_dir: str | None = None
) -> Any:
    """Return the ``datasets`` builder of a local file or folder (not a ``save_to_disk`` one) or of a hub id.

    Nothing is read yet beyond the folder listing (or the hub's metadata).
    Raises :class:`DatasetError` for an unsupported file suffix, a subset or
    split that does not exist (naming those that do), a folder without data
    files, or a hub id that cannot be found.
    """
    local = Path(path).expanduser()
    if local.is_file():
        builder = FILE_BUILDERS.get(local.suffix.lower())
        if builder is None:
            raise DatasetError(unsupported_file_message(name, path))
        check_single_file(name, path, split, subset_name)
        args: dict[str, Any] = {"path": builder, "data_files": str(local)}
        return _builder(name, path, split, None, cache_dir=cache_dir, builder_args=args)
    source = str(local) if local.is_dir() else path
    return _builder(name, path, split, subset_name, cache_dir=cache_dir, builder_args={"path": source})


def _empty_parquet(path: str) -> bool:
    """Return whether ``path`` is a Parquet file without rows (``datasets`` fails on those with a cryptic error)."""
    local = Path(path).expanduser()
    if not (local.is_file() and local.suffix.lower() == ".parquet"):
        return False
    import pyarrow.parquet as pq

    try:
        return int(pq.read_metadata(local).num_rows) == 0
    except (OSError, ValueError):
        return False  # unreadable: datasets says why


def _prepared(name: str, path: str, split: str, subset_name: str | None, cache_dir: str | None) -> Dataset:
    builder = open_builder(name, path, split, subset_name, cache_dir=cache_dir)
    if _empty_parquet(path):
        raise DatasetError(empty_message(name, path, split))
    try:
        builder.download_and_prepare()
        return builder.as_dataset(split=split)  # type: ignore[no-any-return]
    except Exception as exc:  # noqa: BLE001 - datasets raises many types for a malformed file
        raise read_failure(name, path, split, exc) from None


def hub_offline() -> bool:
    """Return whether hub reads must use the cache only: offline mode is set, or the hub does not answer (1 s)."""
    import datasets.config

    return bool(datasets.config.HF_HUB_OFFLINE) or offline_by_env() or not hub_reachable()


def load_split(
    name: str,
    path: str | None,
    split: str = "train",
    subset_name: str | None = None,
    *,
    progress: bool = False,
    cache_dir: str | None = None,
) -> Dataset:
    """Return split ``split`` of the data set at ``path`` as a ``datasets.Dataset`` (``name`` names it in errors).

    ``progress`` shows the ``datasets`` progress bars; ``cache_dir`` is where
    ``datasets`` keeps its Arrow cache (default: its own). A path that is not
    local is read from the hub, or only from the local cache when the hub does
    not answer within a second (or ``HF_HUB_OFFLINE`` is set).

    Raises :class:`DatasetError` (one line) when the path is empty or missing,
    not local while the hub is unreachable and nothing is cached, the split or
    subset does not exist (naming those that do), a file is unsupported or
    malformed (with the first line of the cause), or the split holds no record.
    """
    if path is None or not str(path).strip():
        raise DatasetError(f"{name}: no path; set path to {KINDS}, or a hub id")
    path = str(path)
    local = Path(path).expanduser()
    _import_datasets(name)
    with _progress_bars(progress):
        if local.is_dir() and saved_to_disk(local):
            dataset = _load_saved(name, path, local, split, subset_name)
        elif local.exists():
            dataset = _prepared(name, path, split, subset_name, cache_dir)
        elif not looks_like_hub_id(path):
            raise DatasetError(missing_path_message(name, path))
        elif hub_offline():
            with _offline_mode():
                dataset = _prepared(name, path, split, subset_name, cache_dir)
        else:
            dataset = _prepared(name, path, split, subset_name, cache_dir)
    if len(dataset) == 0:
        raise DatasetError(empty_message(name, path, split))
    return dataset
