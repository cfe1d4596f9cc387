"""Reading data sets through Hugging Face ``datasets``: files, folders, splits, subsets, save_to_disk, errors."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import trinity.buffer.datasets as data
from trinity.buffer.datasets import DatasetError, hub_reachable, load_split, split_names

ROWS = [{"question": f"What is {i} plus 1?", "answer": str(i + 1)} for i in range(5)]
NOT_LOCAL = ("is not a local file or folder, and the Hugging Face hub is not reachable (or the dataset is not "
             "cached): download it first, or point path at a local copy")


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_arrow(path: Path, rows: list[dict[str, Any]], *, stream: bool) -> Path:
    table = pa.Table.from_pylist(rows)
    opener = pa.ipc.new_stream if stream else pa.ipc.new_file
    with opener(str(path), table.schema) as writer:
        writer.write_table(table)
    return path


def load(path: Path | str, split: str = "train", subset: str | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    cache = kwargs.pop("cache_dir")
    return list(load_split("tasks", str(path), split, subset, cache_dir=str(cache), **kwargs))


def error_of(path: Path | str, split: str = "train", subset: str | None = None, *, cache: Path) -> str:
    with pytest.raises(DatasetError) as caught:
        load_split("tasks", str(path), split, subset, cache_dir=str(cache))
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "hf-cache"


# ---- single files


def test_single_files_of_every_format_are_split_train(tmp_path: Path, cache: Path) -> None:
    files = [
        write_jsonl(tmp_path / "tasks.jsonl", ROWS),
        tmp_path / "tasks.json",
        tmp_path / "tasks.parquet",
        write_arrow(tmp_path / "stream.arrow", ROWS, stream=True),
        write_arrow(tmp_path / "file.arrow", ROWS, stream=False),
    ]
    files[1].write_text(json.dumps(ROWS, indent=1))  # a JSON list of records
    pq.write_table(pa.Table.from_pylist(ROWS), files[2])
    for file in files:
        assert load(file, cache_dir=cache) == ROWS, file.name
    assert load(files[0], "train[1:3]", cache_dir=cache) == ROWS[1:3]


def test_a_single_file_has_only_the_train_split_and_no_subset(tmp_path: Path, cache: Path) -> None:
    file = write_jsonl(tmp_path / "test.jsonl", ROWS)
    assert error_of(file, "test", cache=cache) == (
        f"tasks: {file} is a single file, read as the one split 'train' (not 'test'); set split to 'train', "
        f"or point path at a folder holding test files")
    assert error_of(file, subset="main", cache=cache) == (
        f"tasks: {file} is a single file and has no subset 'main' (only 'default'); remove subset_name")


def test_unsupported_file(tmp_path: Path, cache: Path) -> None:
    file = tmp_path / "tasks.csv"
    file.write_text("question,answer\n")
    assert error_of(file, cache=cache) == (
        f"tasks: {file} is not a JSON/JSONL/Parquet/Arrow file; convert it, or point path at a "
        f"JSON/JSONL/Parquet/Arrow file or a folder of them")


# ---- folders


def test_folder_splits_follow_file_names(tmp_path: Path, cache: Path) -> None:
    write_jsonl(tmp_path / "gsm" / "train.jsonl", ROWS)
    write_jsonl(tmp_path / "gsm" / "test.jsonl", ROWS[:2])
    assert load(tmp_path / "gsm", cache_dir=cache) == ROWS
    assert load(tmp_path / "gsm", "test", cache_dir=cache) == ROWS[:2]
    assert load(tmp_path / "gsm", "train[:1]+test", cache_dir=cache) == ROWS[:1] + ROWS[:2]
    assert error_of(tmp_path / "gsm", "validation", cache=cache) == (
        f"tasks: {tmp_path / 'gsm'} has no split 'validation'; its splits: train, test; set split to one of them")


def test_files_without_a_split_keyword_are_all_train(tmp_path: Path, cache: Path) -> None:
    write_jsonl(tmp_path / "sft" / "a.jsonl", ROWS[:2])
    write_jsonl(tmp_path / "sft" / "b.jsonl", ROWS[2:])
    assert load(tmp_path / "sft", cache_dir=cache) == ROWS
    assert "its splits: train;" in error_of(tmp_path / "sft", "test", cache=cache)


def test_a_folder_with_only_a_test_file_has_no_train_split(tmp_path: Path, cache: Path) -> None:
    write_jsonl(tmp_path / "eval" / "test.jsonl", ROWS)
    assert error_of(tmp_path / "eval", cache=cache) == (
        f"tasks: {tmp_path / 'eval'} has no split 'train'; its splits: test; set split to one of them")


def test_subsets_from_a_dataset_card(tmp_path: Path, cache: Path) -> None:
    folder = tmp_path / "levels"
    write_jsonl(folder / "easy" / "train.jsonl", ROWS[:2])
    write_jsonl(folder / "hard" / "train.jsonl", ROWS[2:])
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: easy\n  data_files:\n  - split: train\n    path: easy/train.jsonl\n"
        "- config_name: hard\n  data_files:\n  - split: train\n    path: hard/train.jsonl\n---\n")
    assert load(folder, subset="hard", cache_dir=cache) == ROWS[2:]
    assert load(folder, subset="easy", cache_dir=cache) == ROWS[:2]
    assert error_of(folder, subset="medium", cache=cache) == (
        f"tasks: {folder} has no subset 'medium'; its subsets: easy, hard; set subset_name to one of them")


def test_a_plain_folder_has_only_the_default_subset(tmp_path: Path, cache: Path) -> None:
    write_jsonl(tmp_path / "gsm" / "train.jsonl", ROWS)
    assert load(tmp_path / "gsm", subset="default", cache_dir=cache) == ROWS
    assert error_of(tmp_path / "gsm", subset="main", cache=cache) == (
        f"tasks: {tmp_path / 'gsm'} has no subset 'main'; its subsets: default; set subset_name to one of them")


def test_save_to_disk_folders(tmp_path: Path, cache: Path) -> None:
    import datasets

    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "one"))
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS),
                          "test": datasets.Dataset.from_list(ROWS[:1])}).save_to_disk(str(tmp_path / "two"))
    assert load(tmp_path / "one", cache_dir=cache) == ROWS
    assert load(tmp_path / "one", "train[-2:]", cache_dir=cache) == ROWS[-2:]
    assert load(tmp_path / "two", "test", cache_dir=cache) == ROWS[:1]
    assert error_of(tmp_path / "two", "dev", cache=cache) == (
        f"tasks: {tmp_path / 'two'} has no split 'dev'; its splits: train, test; set split to one of them")
    assert error_of(tmp_path / "one", subset="x", cache=cache) == (
        f"tasks: {tmp_path / 'one'} is a folder written by save_to_disk and has no subset 'x' (only 'default'); "
        f"remove subset_name")


# ---- errors


def test_missing_and_empty_paths(tmp_path: Path, cache: Path) -> None:
    assert error_of("", cache=cache) == (
        "tasks: no path; set path to a JSON/JSONL/Parquet/Arrow file or a folder of them, or a hub id")
    missing = tmp_path / "nope" / "tasks.jsonl"
    assert error_of(missing, cache=cache) == (
        f"tasks: {missing} does not exist; point path at a JSON/JSONL/Parquet/Arrow file or a folder of them "
        f"(or a hub id)")


def test_empty_data_sets(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "none").mkdir()
    assert error_of(tmp_path / "none", cache=cache) == (
        f"tasks: {tmp_path / 'none'} holds no JSON/JSONL/Parquet/Arrow data file; add data files, or fix path")
    (tmp_path / "blank").mkdir()
    (tmp_path / "blank" / "train.jsonl").write_text("")
    assert error_of(tmp_path / "blank", cache=cache) == (
        f"tasks: {tmp_path / 'blank'} (split 'train') holds no record; point path at a data set with records")
    pq.write_table(pa.Table.from_pylist(ROWS).slice(0, 0), tmp_path / "zero.parquet")
    assert error_of(tmp_path / "zero.parquet", cache=cache) == (
        f"tasks: {tmp_path / 'zero.parquet'} (split 'train') holds no record; point path at a data set with records")


def test_malformed_files(tmp_path: Path, cache: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train.jsonl").write_text('{"question": "a"}\n{"question": \n')
    assert error_of(bad, cache=cache) == (
        f"tasks: {bad} cannot be read (JSON parse error: Invalid value. in row 1); fix the file, or point path "
        f"at a JSON/JSONL/Parquet/Arrow file or a folder of them")
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet")
    assert error_of(broken, cache=cache).startswith(
        f"tasks: {broken} cannot be read (Parquet magic bytes not found in footer.")


def test_hub_ids_fail_fast_when_the_hub_is_unreachable(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    monkeypatch.setattr(data, "hub_reachable", lambda timeout=1.0: False)
    assert error_of("someone/no-such-set", cache=cache) == f"tasks: someone/no-such-set {NOT_LOCAL}"


def test_an_unreachable_hub_is_read_in_offline_mode(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    import datasets
    import datasets.config

    seen = []

    def builder(**kwargs: Any) -> Any:
        seen.append((kwargs["path"], datasets.config.HF_HUB_OFFLINE))
        raise ConnectionError("Couldn't reach 'someone/set' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(data, "hub_reachable", lambda timeout=1.0: False)
    monkeypatch.setattr(datasets, "load_dataset_builder", builder)
    assert error_of("someone/set", cache=cache) == f"tasks: someone/set {NOT_LOCAL}"
    assert seen == [("someone/set", True)]


def test_offline_mode_is_honoured_without_probing(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    def probe(timeout: float = 1.0) -> bool:
        raise AssertionError("the hub was probed in offline mode")

    import datasets.config

    before = datasets.config.HF_HUB_OFFLINE
    monkeypatch.setattr(data, "hub_reachable", probe)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert error_of("gsm8k", "train", "main", cache=cache) == f"tasks: gsm8k {NOT_LOCAL}"
    assert datasets.config.HF_HUB_OFFLINE == before  # offline mode was set for the load only


class _Head(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self) -> None:
        self.send_response(404)  # any HTTP answer means the hub is there
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_hub_probe_needs_an_http_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    server = http.server.HTTPServer(("127.0.0.1", 0), _Head)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        assert hub_reachable(timeout=2.0)
    finally:
        server.shutdown()
        server.server_close()
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
        assert not hub_reachable(timeout=0.3)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")  # closed now
    assert not hub_reachable(timeout=0.3)


def test_progress_bar_setting_is_restored(tmp_path: Path, cache: Path) -> None:
    import datasets

    file = write_jsonl(tmp_path / "tasks.jsonl", ROWS)
    datasets.enable_progress_bars()
    load(file, cache_dir=cache, progress=False)
    assert datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    load(file, cache_dir=cache, progress=True)
    assert not datasets.is_progress_bar_enabled()
    datasets.enable_progress_bars()


def test_split_names() -> None:
    assert split_names("train") == ["train"]
    assert split_names("train[:10%]+test[2:]") == ["train", "test"]
    with pytest.raises(ValueError, match="is not a split name"):
        split_names("train[")
