"""Reading task sets from JSONL and Parquet files, and the one-line errors for bad ones."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trinity.buffer import TaskFileError, load_tasks
from trinity.common.config.schema import TaskSetConfig


def write_jsonl(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def task_set(path: Path | str, **kwargs: str) -> TaskSetConfig:
    return TaskSetConfig(name="train", path=str(path), **kwargs)


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_jsonl_records_keep_order_prompt_answer_and_source(tmp_path: Path) -> None:
    records = [{"question": "1+1", "answer": "2", "id": 7}, {"question": "2+2", "answer": 4}]
    file = write_jsonl(tmp_path / "t.jsonl", records)
    # a blank line between records is allowed
    file.write_text(file.read_text().replace("\n", "\n\n", 1))
    records = load_tasks(task_set(file))
    assert [r["prompt"] for r in records] == ["1+1", "2+2"]
    assert [r["answer"] for r in records] == ["2", 4]
    assert records[0]["raw"] == {"question": "1+1", "answer": "2", "id": 7}
    assert [r["index"] for r in records] == [0, 1]
    assert records[1]["source"] == f"{file}:3"
    assert records[0]["task_set"] == "train"


def test_parquet_and_custom_keys(tmp_path: Path) -> None:
    file = tmp_path / "t.parquet"
    pq.write_table(pa.table({"problem": ["a", "b", "c"], "solution": [1, 2, 3]}), file)
    records = load_tasks(task_set(file, prompt_key="problem", answer_key="solution"))
    assert [(r["prompt"], r["answer"]) for r in records] == [("a", 1), ("b", 2), ("c", 3)]
    assert records[2]["source"] == f"{file}:row 3"


def test_folder_reads_every_task_file_in_name_order(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "b.jsonl", [{"question": "b1", "answer": ""}])
    pq.write_table(pa.table({"question": ["a1", "a2"], "answer": ["x", "y"]}), tmp_path / "a.parquet")
    (tmp_path / "notes.txt").write_text("not a task file")
    records = load_tasks(task_set(tmp_path))
    assert [r["prompt"] for r in records] == ["a1", "a2", "b1"]
    assert [r["index"] for r in records] == [0, 1, 2]


def test_empty_answer_key_means_no_answer_needed(tmp_path: Path) -> None:
    file = write_jsonl(tmp_path / "t.jsonl", [{"question": "q"}])
    assert load_tasks(task_set(file, answer_key=""))[0]["answer"] is None


def test_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(TaskFileError) as exc:
        load_tasks(task_set(tmp_path / "nope.jsonl"))
    message = one_line(exc)
    assert "nope.jsonl does not exist" in message and "'train'" in message


def test_empty_path_is_one_line() -> None:
    with pytest.raises(TaskFileError) as exc:
        load_tasks(task_set(""))
    assert "has no path" in one_line(exc)


def test_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    file = tmp_path / "t.jsonl"
    file.write_text('{"question": "q", "answer": "a"}\n{"question": "q2", "answer":\n')
    with pytest.raises(TaskFileError) as exc:
        load_tasks(task_set(file))
    message = one_line(exc)
    assert message.startswith(f"{file}:2: not valid JSON")


def test_non_object_line_is_rejected(tmp_path: Path) -> None:
    file = write_jsonl(tmp_path / "t.jsonl", [[1, 2]])
    with pytest.raises(TaskFileError) as exc:
        load_tasks(task_set(file))
    assert one_line(exc) == f"{file}:1: expected a JSON object, got list"


@pytest.mark.parametrize(("record", "role", "key"), [({"answer": "a"}, "prompt", "question"),
                                                     ({"question": "q"}, "answer", "answer")])
def test_record_lacking_a_key_names_it(tmp_path: Path, record: dict[str, str], role: str, key: str) -> None:
    file = write_jsonl(tmp_path / "t.jsonl", [{"question": "q", "answer": "a"}, record])
    with pytest.raises(TaskFileError) as exc:
        load_tasks(task_set(file))
    message = one_line(exc)
    assert message.startswith(f"{file}:2: record has no {role} key {key!r}")
    assert f"{role}_key" in message


def test_parquet_lacking_a_key_names_the_row(tmp_path: Path) -> None:
    file = tmp_path / "t.parquet"
    pq.write_table(pa.table({"prompt": ["a"]}), file)
    with pytest.raises(TaskFileError) as exc:
        load_tasks(task_set(file))
    assert one_line(exc).startswith(f"{file}:row 1: record has no prompt key 'question'")


def test_unsupported_suffix_empty_folder_and_empty_file(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("a,b\n")
    with pytest.raises(TaskFileError) as exc:
        load_tasks(task_set(csv))
    assert "use a .jsonl or .parquet file" in one_line(exc)
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    with pytest.raises(TaskFileError) as exc:
        load_tasks(task_set(empty_dir))
    assert "holds no .jsonl or .parquet file" in one_line(exc)
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n")
    with pytest.raises(TaskFileError) as exc:
        load_tasks(task_set(blank))
    assert "holds no task" in one_line(exc)


def test_corrupt_parquet_is_one_line(tmp_path: Path) -> None:
    file = tmp_path / "t.parquet"
    file.write_bytes(b"this is not parquet")
    with pytest.raises(TaskFileError) as exc:
        load_tasks(task_set(file))
    assert one_line(exc).startswith(f"{file}: not a readable Parquet file")
