"""`trinity run` / `trinity convert` on bad input: one line naming what and where, a non-zero exit, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli._runner import Runner

TASKS = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "tasks" / "train.jsonl"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text.replace("TASKS", str(TASKS)), encoding="utf-8")
    return path


GOOD = "model:\n  model_path: /nonexistent/model\nbuffer:\n  train_tasks:\n    path: TASKS\n"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (GOOD + "trainer:\n  sav_interval: 2\n", "trainer.sav_interval: unknown key; did you mean 'save_interval'?"),
        (GOOD + "explorer:\n  engine_num: two\n", "explorer.engine_num: expected an integer, got str 'two'"),
        (GOOD + "synchronizer:\n  sync_interval: 0\n", "synchronizer.sync_interval: must be at least 1"),
        (GOOD + "mode: traing\n", "mode: 'traing' is not one of"),
        ("model: [\n", "not valid YAML at line"),
        (GOOD + "cluster:\n  ray_address: 127.0.0.1:1\n", "no Ray cluster answers at '127.0.0.1:1'"),
    ],
)
def test_bad_config_is_one_line(trinity: Runner, tmp_path: Path, text: str, fragment: str) -> None:
    result = trinity("run", "--config", str(write(tmp_path, text)), timeout=60)
    assert result.returncode == 2
    line = result.error_line()
    assert fragment in line
    if "Ray" not in fragment:
        assert "job.yaml" in line, "a config error names the file"


def test_missing_config_file(trinity: Runner, tmp_path: Path) -> None:
    result = trinity("run", "--config", str(tmp_path / "absent.yaml"))
    assert result.returncode == 2 and "does not exist" in result.error_line()


def test_bad_override(trinity: Runner, tmp_path: Path) -> None:
    result = trinity("run", "--config", str(write(tmp_path, GOOD)), "--set", "trainer.save_interval")
    assert result.returncode == 2 and "expected KEY=VALUE" in result.error_line()
    result = trinity("run", "--config", str(write(tmp_path, GOOD)), "--set", "trainer.save_interval=-1")
    assert result.returncode == 2 and "trainer.save_interval: must be 0 or more" in result.error_line()


def test_convert_of_a_folder_without_checkpoint(trinity: Runner, tmp_path: Path) -> None:
    result = trinity("convert", str(tmp_path), str(tmp_path / "out"))
    assert result.returncode == 1 and str(tmp_path) in result.error_line()
