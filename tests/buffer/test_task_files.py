"""Reading task sets from JSONL and Parquet files (through Hugging Face ``datasets``), and the one-line errors
for bad ones."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.plans import make_plan
from trinity.buffer import load_tasks
from trinity.buffer.datasets import DatasetError
from trinity.buffer.errors import TrinityBufferError
from trinity.buffer.formatters import FormatError
from trinity.common.config import ConfigError
from trinity.common.config.plan.data import TasksetPlan

#: How a task set's errors name it: the dotted path of its section.
WHERE = "buffer.explorer_input.taskset"


def write_jsonl(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def task_set(path: Path | str, **format_keys: str) -> TasksetPlan:
    """The training task set at ``path``; ``format_keys`` override ``format`` (prompt_key question, response_key
    answer)."""
    fmt: dict[str, Any] = {"prompt_key": "question", "response_key": "answer", **format_keys}
    plan = make_plan({"buffer.explorer_input.taskset": {"name": "train", "path": str(path), "format": fmt}})
    assert plan.buffer.train_taskset is not None
    return plan.buffer.train_taskset


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_jsonl_records_keep_order_prompt_answer_and_raw(tmp_path: Path) -> None:
    records = [{"question": "1+1", "answer": "2", "id": 7}, {"question": "2+2", "answer": "4"}]
    file = write_jsonl(tmp_path / "t.jsonl", records)
    # a blank line between records is allowed
    file.write_text(file.read_text().replace("\n", "\n\n", 1))
    records = load_tasks(task_set(file))
    assert [r["prompt"] for r in records] == ["1+1", "2+2"]
    assert [r["answer"] for r in records] == ["2", "4"]
    assert records[0]["raw"] == {"question": "1+1", "answer": "2", "id": 7}
    # a data set has columns: a key one record lacks is None in it
    assert records[1]["raw"] == {"question": "2+2", "answer": "4", "id": None}
    assert [r["index"] for r in records] == [0, 1]
    assert [r["workflow"] for r in records] == [None, None]  # no workflow_key: the task set's workflow


def test_parquet_and_custom_keys(tmp_path: Path) -> None:
    file = tmp_path / "t.parquet"
    pq.write_table(pa.table({"problem": ["a", "b", "c"], "solution": [1, 2, 3]}), file)
    records = load_tasks(task_set(file, prompt_key="problem", response_key="solution"))
    assert [(r["prompt"], r["answer"]) for r in records] == [("a", 1), ("b", 2), ("c", 3)]
    assert records[2]["index"] == 2 and records[2]["raw"] == {"problem": "c", "solution": 3}


def test_folder_reads_every_task_file_in_name_order(tmp_path: Path) -> None:
    # a folder is read as datasets.load_dataset(folder) reads it: the data files of one format, by name
    write_jsonl(tmp_path / "b.jsonl", [{"question": "b1", "answer": ""}])
    write_jsonl(tmp_path / "a.jsonl", [{"question": "a1", "answer": "x"}, {"question": "a2", "answer": "y"}])
    (tmp_path / "notes.txt").write_text("not a task file")
    records = load_tasks(task_set(tmp_path))
    assert [r["prompt"] for r in records] == ["a1", "a2", "b1"]
    assert [r["index"] for r in records] == [0, 1, 2]


def test_empty_answer_key_means_no_answer_needed(tmp_path: Path) -> None:
    file = write_jsonl(tmp_path / "t.jsonl", [{"question": "q"}])
    assert load_tasks(task_set(file, response_key=""))[0]["answer"] is None


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as exc:
        load_tasks(task_set(tmp_path / "nope.jsonl"))
    message = one_line(exc)
    assert "nope.jsonl does not exist" in message and message.startswith(f"{WHERE}:")


def test_empty_path_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:  # the config refuses it before anything is read
        task_set("")
    assert f"{WHERE}.path: required" in one_line(caught)
    with pytest.raises(DatasetError) as exc:
        load_tasks(dataclasses.replace(task_set(tmp_path / "t.jsonl"), path=""))
    assert "no path" in one_line(exc)


def test_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    file = tmp_path / "t.jsonl"
    file.write_text('{"question": "q", "answer": "a"}\n{"question": "q2", "answer":\n')
    with pytest.raises(DatasetError) as exc:
        load_tasks(task_set(file))
    message = one_line(exc)
    assert message.startswith(f"{WHERE}: {file} cannot be read (") and "row 1" in message  # 0-based: line 2


def test_non_object_line_is_rejected(tmp_path: Path) -> None:
    file = write_jsonl(tmp_path / "t.jsonl", [[1, 2]])
    with pytest.raises(FormatError) as exc:  # datasets reads a non-object line as a ``text`` column
        load_tasks(task_set(file))
    assert one_line(exc).startswith(f"{WHERE}: record 0 has no key 'question' (format.prompt_key); its keys: text")


def test_record_lacking_the_prompt_names_it(tmp_path: Path) -> None:
    file = write_jsonl(tmp_path / "t.jsonl", [{"question": "q", "answer": "a"}, {"answer": "a"}])
    with pytest.raises(TrinityBufferError) as exc:
        load_tasks(task_set(file))
    message = one_line(exc)
    assert message.startswith(f"{WHERE}: record 1 ") and "'question'" in message
    assert "format.prompt_key" in message


def test_record_lacking_the_answer_has_none(tmp_path: Path) -> None:
    # as upstream: a task set's reference answer is optional per record
    file = write_jsonl(tmp_path / "t.jsonl", [{"question": "q", "answer": "a"}, {"question": "q2"}])
    assert [r["answer"] for r in load_tasks(task_set(file))] == ["a", None]


def test_parquet_lacking_a_key_names_the_record(tmp_path: Path) -> None:
    file = tmp_path / "t.parquet"
    pq.write_table(pa.table({"prompt": ["a"]}), file)
    with pytest.raises(FormatError) as exc:
        load_tasks(task_set(file))
    assert one_line(exc).startswith(f"{WHERE}: record 0 has no key 'question' (format.prompt_key); its keys: prompt")


def test_unsupported_suffix_empty_folder_and_empty_file(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("a,b\n")
    with pytest.raises(DatasetError) as exc:
        load_tasks(task_set(csv))
    assert f"{csv} is not a JSON/JSONL/Parquet/Arrow file" in one_line(exc)
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    with pytest.raises(DatasetError) as exc:
        load_tasks(task_set(empty_dir))
    assert "holds no JSON/JSONL/Parquet/Arrow data file" in one_line(exc)
    no_rows = tmp_path / "none.parquet"
    pq.write_table(pa.table({"question": pa.array([], pa.string())}), no_rows)
    with pytest.raises(DatasetError) as exc:
        load_tasks(task_set(no_rows))
    assert "holds no record" in one_line(exc)
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n")
    with pytest.raises(DatasetError) as exc:
        load_tasks(task_set(blank))
    assert "holds no record" in one_line(exc)


def test_corrupt_parquet_is_one_line(tmp_path: Path) -> None:
    file = tmp_path / "t.parquet"
    file.write_bytes(b"this is not parquet")
    with pytest.raises(DatasetError) as exc:
        load_tasks(task_set(file))
    assert one_line(exc).startswith(f"{WHERE}: {file} cannot be read (Parquet magic bytes not found")
