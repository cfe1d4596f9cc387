"""`trinity run` / `trinity convert` on bad input, and `trinity run --dry-run`: one line and an exit code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli._runner import Runner

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "examples" / "quickstart" / "tasks" / "train.jsonl"
QUICKSTART = ROOT / "examples" / "quickstart" / "cpu.yaml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text.replace("TASKS", str(TASKS)).replace("ROOT", str(tmp_path)), encoding="utf-8")
    return path


GOOD = """model:
  model_path: ROOT/tiny
  tiny: {}
  max_prompt_tokens: 32
  max_response_tokens: 4
algorithm:
  algorithm_type: grpo
  repeat_times: 2
buffer:
  explorer_input:
    taskset:
      path: TASKS
      format: {prompt_key: question, response_key: answer}
    default_workflow_type: toy_repeat
"""


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (GOOD + "trainer:\n  sav_interval: 2\n", "trainer.sav_interval: unknown key; did you mean 'save_interval'?"),
        (GOOD + "explorer:\n  rollout_model:\n    engine_num: two\n",
         "explorer.rollout_model.engine_num: expected an integer, got str 'two'"),
        (GOOD + "synchronizer:\n  sync_interval: 0\n", "synchronizer.sync_interval: must be positive"),
        (GOOD + "mode: traing\n", "mode: 'traing' is not one of"),
        ("model: [\n", "not valid YAML at line"),
        (GOOD.replace("toy_repeat", "toy_repaet"), "unknown workflow 'toy_repaet'; did you mean 'toy_repeat'?"),
        (GOOD + "cluster:\n  ray_address: 127.0.0.1:1\n", "no Ray cluster answers at '127.0.0.1:1'"),
    ],
)
def test_bad_config_is_one_line(trinity: Runner, tmp_path: Path, text: str, fragment: str) -> None:
    result = trinity("run", "--config", str(write(tmp_path, text)), timeout=60)
    assert result.returncode == 2, result.stderr
    line = result.error_line()
    assert fragment in line
    if "Ray" not in fragment:
        assert "job.yaml" in line, "a config error names the file"


def test_a_model_path_that_is_not_a_model_fails_before_ray_starts(trinity: Runner, tmp_path: Path) -> None:
    (tmp_path / "notamodel").mkdir()
    text = GOOD.replace("ROOT/tiny\n  tiny: {}", "ROOT/notamodel")
    result = trinity("run", "--config", str(write(tmp_path, text)), timeout=60)
    assert result.returncode == 2
    assert "model.model_path: " in result.error_line() and "not a Hugging Face model (no config.json)" in (
        result.error_line())
    missing = GOOD.replace("ROOT/tiny\n  tiny: {}", "ROOT/absent/model.bin")
    result = trinity("run", "--config", str(write(tmp_path, missing)), timeout=60)
    assert result.returncode == 2 and "model.model_path" in result.error_line()


def test_a_model_folder_transformers_cannot_load_is_one_line(trinity: Runner, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "qwen2"}', encoding="utf-8")
    (broken / "model.safetensors").write_bytes(b"x")
    (broken / "tokenizer.json").write_text("not json", encoding="utf-8")  # every file is there; transformers fails
    text = GOOD.replace("ROOT/tiny\n  tiny: {}", "ROOT/broken") + "cluster:\n  ray_address: local\n"
    text += "checkpoint_root_dir: ROOT/ckpt\n"  # the run gets as far as its folder: not in the working directory
    result = trinity("run", "--config", str(write(tmp_path, text)), timeout=240)
    assert result.returncode == 2, result.stderr
    line = result.error_line()
    assert line.startswith("trinity: error: model.model_path: ") and f"cannot load {broken}: " in line
    assert "point it at a complete Hugging Face model folder" in line and "bug" not in line


def test_upstreams_short_config_flag_and_every_mode_in_the_help(trinity: Runner, tmp_path: Path) -> None:
    result = trinity("run", "-c", str(write(tmp_path, GOOD)), "--dry-run", timeout=60)
    assert result.returncode == 0 and "the config is valid" in result.stdout, result.stderr
    help_text = " ".join(trinity("run", "--help").stdout.split())
    assert "-c FILE, --config FILE" in help_text and "(mode both, explore, train, bench or serve)" in help_text


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


def test_dry_run_prints_the_plan_without_ray_or_torch(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from trinity.cli.main import main\n"
        f"code = main(['run', '--config', {str(QUICKSTART)!r}, '--dry-run'])\n"
        "heavy = sorted(m for m in ('torch', 'ray', 'transformers', 'datasets') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
        "sys.exit(code)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120,
                            cwd=ROOT, env={"PATH": "/usr/bin:/bin", "TRINITY_CHECKPOINT_ROOT_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "HEAVY []" in out
    assert "1 hf engine(s) x 1 CPU bundle" in out and "1 trainer rank(s)" in out
    assert "nccl -> gloo" in out and "policy loss ppo" in out
    assert "train train: examples/quickstart/tasks/train.jsonl" in out and "workflow toy_repeat" in out
    assert "the config is valid" in out


def test_dry_run_plans_for_another_installed_backend(trinity: Runner, tmp_path: Path) -> None:
    config = write(tmp_path, GOOD + "cluster:\n  node_num: 2\n  gpu_per_node: 8\nexplorer:\n  rollout_model:\n"
                   "    engine_num: 4\n    tensor_parallel_size: 2\n")
    result = trinity("run", "--config", str(config), "--dry-run", "--device", "npu", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "2 node(s) x 8 NPU (config)" in result.stdout
    assert "4 vllm engine(s) x 2 NPU" in result.stdout and "8 trainer rank(s)" in result.stdout
    assert "nccl -> hccl" in result.stdout
    result = trinity("run", "--config", str(config), "--dry-run", "--device", "tpu", timeout=60)
    assert result.returncode == 2 and "--device tpu: not installed" in result.error_line()
    result = trinity("run", "--config", str(config), "--device", "npu", timeout=60)
    assert result.returncode == 2 and "needs --dry-run" in result.error_line()


def test_dry_run_of_a_bad_config_exits_2(trinity: Runner, tmp_path: Path) -> None:
    bad = GOOD.replace("algorithm_type: grpo", "algorithm_type: grop")
    result = trinity("run", "--config", str(write(tmp_path, bad)), "--dry-run", timeout=60)
    assert result.returncode == 2 and "did you mean 'grpo'" in result.error_line()
