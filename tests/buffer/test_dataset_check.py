"""The dry-run check of a data set: it agrees with ``datasets`` on splits, names missing keys, reads little."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import trinity.buffer.dataset_check as check_module
from trinity.buffer.dataset_check import folder_splits, inspect_dataset
from trinity.buffer.datasets import DatasetError
from trinity.buffer.record_keys import required_keys
from trinity.common.config.schema.buffer import FormatConfig

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "data"
ROWS = [{"question": f"What is {i} plus 1?", "answer": str(i + 1)} for i in range(3)]
GSM = {"prompt_key": "question", "response_key": "answer"}


def write_jsonl(path: Path, rows: list[dict[str, Any]] = ROWS) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def error_of(path: Path | str, split: str = "train", subset: str | None = None, **kwargs: Any) -> str:
    with pytest.raises(DatasetError) as caught:
        inspect_dataset("tasks", str(path), split, subset, **kwargs)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_first_record_keys_and_splits_of_a_folder(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "gsm" / "train.jsonl")
    write_jsonl(tmp_path / "gsm" / "test.jsonl", [{"question": "q", "answer": "a", "level": 1}])
    found = inspect_dataset("gsm", str(tmp_path / "gsm"), "test", keys=GSM)
    assert (found.kind, found.splits, found.keys, found.method) == ("folder", ("train", "test"),
                                                                   ("question", "answer", "level"), "json")
    assert found.source == str(tmp_path / "gsm" / "test.jsonl")


def test_a_missing_key_names_the_format_field_and_the_records_keys(tmp_path: Path) -> None:
    file = write_jsonl(tmp_path / "gsm" / "train.jsonl")
    keys = required_keys(FormatConfig(prompt_key="problem", response_key="answer"), "task")
    assert error_of(tmp_path / "gsm", keys=keys) == (
        f"tasks: the first record of {file} (split 'train') has no key 'problem' (format.prompt_key); its keys: "
        f"question, answer; set format.prompt_key to the key that holds it, or fix the data")


def test_missing_split_and_subset_are_named(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "gsm" / "train.jsonl")
    write_jsonl(tmp_path / "gsm" / "test.jsonl")
    assert error_of(tmp_path / "gsm", "dev") == (
        f"tasks: {tmp_path / 'gsm'} has no split 'dev'; its splits: train, test; set split to one of them")
    assert error_of(tmp_path / "gsm", subset="main") == (
        f"tasks: {tmp_path / 'gsm'} has no subset 'main'; its subsets: default; set subset_name to one of them")
    single = tmp_path / "gsm" / "test.jsonl"
    assert error_of(single, "test") == (
        f"tasks: {single} is a single file, read as the one split 'train' (not 'test'); set split to 'train', "
        f"or point path at a folder holding test files")


def test_parquet_and_arrow_are_checked_from_their_schema(tmp_path: Path) -> None:
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "tasks.parquet")
    table = pa.Table.from_pylist(ROWS)
    with pa.ipc.new_file(str(tmp_path / "tasks.arrow"), table.schema) as writer:
        writer.write_table(table)
    for name in ("tasks.parquet", "tasks.arrow"):
        found = inspect_dataset("t", str(tmp_path / name), keys=GSM)
        assert (found.kind, found.splits, found.keys, found.method) == ("file", ("train",), ("question", "answer"),
                                                                       "pyarrow")
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet")
    assert error_of(broken).startswith(f"tasks: {broken} cannot be read (Parquet magic bytes not found")


def test_save_to_disk_folders_are_checked_from_their_index(tmp_path: Path) -> None:
    import datasets

    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS),
                          "test": datasets.Dataset.from_list(ROWS[:1])}).save_to_disk(str(tmp_path / "dd"))
    found = inspect_dataset("t", str(tmp_path / "dd"), "test", keys=GSM)
    assert (found.kind, found.splits, found.keys) == ("saved", ("train", "test"), ("question", "answer"))
    assert error_of(tmp_path / "dd", "dev") == (
        f"tasks: {tmp_path / 'dd'} has no split 'dev'; its splits: train, test; set split to one of them")


def test_empty_data_sets(tmp_path: Path) -> None:
    (tmp_path / "none").mkdir()
    assert error_of(tmp_path / "none") == (
        f"tasks: {tmp_path / 'none'} holds no JSON/JSONL/Parquet/Arrow data file; add data files, or fix path")
    (tmp_path / "blank").mkdir()
    (tmp_path / "blank" / "train.jsonl").write_text("\n\n")
    assert error_of(tmp_path / "blank") == (
        f"tasks: {tmp_path / 'blank'} (split 'train') holds no record; point path at a data set with records")


def test_missing_paths_and_unreachable_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert error_of(tmp_path / "nope.jsonl") == (
        f"tasks: {tmp_path / 'nope.jsonl'} does not exist; point path at a JSON/JSONL/Parquet/Arrow file or a "
        f"folder of them (or a hub id)")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(check_module, "hub_reachable", lambda timeout=1.0: False)
    assert error_of("someone/set") == (
        "tasks: someone/set is not a local file or folder, and the Hugging Face hub is not reachable (or the "
        "dataset is not cached): download it first, or point path at a local copy")
    (tmp_path / "hf" / "hub" / "datasets--someone--set").mkdir(parents=True)
    found = inspect_dataset("tasks", "someone/set")
    assert (found.kind, found.method, found.splits) == ("hub", "not read", ())


def test_layouts_it_does_not_copy_are_asked_of_datasets(tmp_path: Path) -> None:
    folder = tmp_path / "levels"
    write_jsonl(folder / "easy" / "train.jsonl")
    write_jsonl(folder / "hard" / "train.jsonl", [{"problem": "p", "solution": "s"}])
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: easy\n  data_files: easy/train.jsonl\n"
        "- config_name: hard\n  data_files: hard/train.jsonl\n---\n")
    assert folder_splits(folder) is None
    cache = str(tmp_path / "cache")
    found = inspect_dataset("t", str(folder), subset_name="hard", cache_dir=cache)
    assert (found.method, found.splits, found.keys) == ("datasets", ("train",), ("problem", "solution"))
    assert error_of(folder, subset="medium", cache_dir=cache) == (
        f"tasks: {folder} has no subset 'medium'; its subsets: easy, hard; set subset_name to one of them")
    pretty = tmp_path / "one.json"
    pretty.write_text(json.dumps({"question": "q", "answer": "a"}, indent=2))  # one object: datasets decides
    assert inspect_dataset("t", str(pretty), keys=GSM, cache_dir=cache).method == "datasets"


LAYOUTS = {
    "one file": ["sft.jsonl"],
    "train and test": ["train.jsonl", "test.jsonl"],
    "test only": ["test.jsonl"],
    "shards": ["train_0.jsonl", "train_1.jsonl", "test-0.jsonl", "my_valid.jsonl"],
    "split folders": ["data/train/a.jsonl", "data/train/b.jsonl", "data/test/a.jsonl"],
    "suffixed folders": ["train-v1/x.parquet", "eval/y.parquet"],
    "long keywords": ["training.jsonl", "evaluation.jsonl", "dev.jsonl"],
    "no keyword": ["trainset.jsonl", "tests.jsonl"],
    "hidden": ["train.jsonl", ".hidden/test.jsonl", "__pycache__/test.jsonl", ".x.jsonl"],
    "folder wins over file": ["train/a.jsonl", "test.jsonl"],
    "nested": ["a/b/train.jsonl", "a/b/test.jsonl", "a/c.jsonl"],
    "arrow": ["train.arrow", "validation.arrow"],
    "json and jsonl": ["train.json", "test.jsonl"],
    "ignored names": ["train.jsonl", "dataset_info.json", "config.json"],
    "case": ["TRAIN.jsonl", "Test.jsonl"],
    "dotted": ["data.train.jsonl", "data.test.jsonl"],
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_folder_splits_agree_with_datasets(layout: str, tmp_path: Path) -> None:
    import datasets

    folder = tmp_path / "ds"
    for name in LAYOUTS[layout]:
        file = folder / name
        file.parent.mkdir(parents=True, exist_ok=True)
        table = pa.table({"a": [1]})
        if file.suffix == ".parquet":
            pq.write_table(table, file)
        elif file.suffix == ".arrow":
            with pa.ipc.new_stream(str(file), table.schema) as writer:
                writer.write_table(table)
        else:
            file.write_text('{"a": 1}\n')
    builder = datasets.load_dataset_builder(str(folder), cache_dir=str(tmp_path / "cache"))
    theirs = {str(split): [Path(f).relative_to(folder.resolve()).as_posix() for f in files]
              for split, files in builder.config.data_files.items()}
    assert folder_splits(folder) == theirs


def test_the_example_data_sets_pass(tmp_path: Path) -> None:
    messages, plaintext = FormatConfig(messages_key="messages"), FormatConfig(prompt_type="plaintext")
    for folder, split, schema, fmt in [
        ("math", "train", "task", FormatConfig(prompt_key="question", response_key="answer")),
        ("math", "test", "task", FormatConfig(prompt_key="question", response_key="answer")),
        ("sft/messages", "train", "sft", messages), ("sft/tools", "train", "sft", messages),
        ("sft/plaintext", "train", "sft", plaintext), ("dpo/plaintext", "train", "dpo", plaintext),
        ("dpo/messages", "train", "dpo", messages),
    ]:
        found = inspect_dataset(folder, str(EXAMPLES / folder), split, keys=required_keys(fmt, schema))
        assert found.method == "json", folder


def test_the_check_imports_neither_torch_nor_datasets() -> None:
    code = (
        "import sys\n"
        "from trinity.buffer.dataset_check import inspect_dataset\n"
        "from trinity.buffer.record_keys import required_keys\n"
        "from trinity.common.config.schema.buffer import FormatConfig\n"
        "keys = required_keys(FormatConfig(prompt_key='question', response_key='answer'), 'task')\n"
        "inspect_dataset('math', 'examples/data/math', 'test', keys=keys)\n"
        "print(sorted(m for m in ('torch', 'datasets', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_dry_run_entry_point_returns_the_problem_line(tmp_path: Path) -> None:
    from trinity.buffer.dataset_check import check_dataset

    fmt = FormatConfig(prompt_key="question", response_key="answer")
    where = "buffer.explorer_input.taskset"
    assert check_dataset(str(EXAMPLES / "math"), "test", None, fmt, where, "task") is None
    assert check_dataset(str(EXAMPLES / "math"), "dev", None, fmt, where, "task") == (
        f"{where}: {EXAMPLES / 'math'} has no split 'dev'; its splits: train, test; set split to one of them")
    sft = FormatConfig(messages_key="message")
    problem = check_dataset(str(EXAMPLES / "sft" / "messages"), "train", None, sft, "sft_data", "sft")
    assert problem is not None and problem.startswith("sft_data: the first record of ")
    assert "has no key 'message' (format.messages_key); its keys: messages;" in problem
    assert check_dataset(str(EXAMPLES / "math"), "train", None, FormatConfig(prompt_type="chat"), where, "sft") == (
        f"{where}: format.prompt_type must be 'messages' or 'plaintext', got 'chat'")
