"""``trinity run`` on failures the user causes: one line, exit 2, the root cause named, before Ray starts.

Each case runs the real console script in a subprocess with a private
``RAY_TMPDIR``; a run that started Ray would leave a session folder there.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli._runner import Result, Runner
from tests.cli.test_cli_run import GOOD, write
from tests.listeners import http_listener as listening

#: A failure found before Ray starts takes about the CLI's start-up time; Ray alone takes longer.
FAST_S = 5.0


def _run(trinity: Runner, tmp_path: Path, text: str, **env: str) -> tuple[Result, float]:
    ray_tmp = tmp_path / "ray-tmp"
    ray_tmp.mkdir(exist_ok=True)
    started = time.monotonic()
    result = trinity("run", "--config", str(write(tmp_path, text)), timeout=60, RAY_TMPDIR=str(ray_tmp), **env)
    elapsed = time.monotonic() - started
    assert not (ray_tmp / "ray").exists(), "Ray was started"
    return result, elapsed


@pytest.fixture
def silent_listener() -> Iterator[str]:
    """Yield ``host:port`` of a TCP listener that accepts connections and never says anything."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=serve, daemon=True).start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()
    for conn in accepted:
        conn.close()


@pytest.fixture
def http_listener() -> Iterator[str]:
    """Yield ``host:port`` of a listener that answers every connection like an HTTP/1 web server."""
    with listening() as address:
        yield address


def test_an_address_where_a_silent_service_listens_fails_fast(
    trinity: Runner, tmp_path: Path, silent_listener: str
) -> None:
    result, elapsed = _run(trinity, tmp_path, GOOD + f"cluster:\n  ray_address: {silent_listener}\n")
    assert result.returncode == 2, result.stderr
    line = result.error_line()
    assert f"no Ray cluster answers at '{silent_listener}'" in line and "did not answer as a Ray cluster" in line
    assert elapsed < FAST_S, f"took {elapsed:.1f} s"


def test_an_address_where_a_web_server_listens_fails_fast(
    trinity: Runner, tmp_path: Path, http_listener: str
) -> None:
    result, elapsed = _run(trinity, tmp_path, GOOD + f"cluster:\n  ray_address: {http_listener}\n")
    assert result.returncode == 2, result.stderr
    assert "it is not a Ray cluster" in result.error_line()
    assert elapsed < FAST_S, f"took {elapsed:.1f} s"


def _folder(tmp_path: Path, name: str, *files: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    for file in files:
        (folder / file).write_text("{}", encoding="utf-8")
    return folder


def test_a_model_folder_without_weights_or_tokenizer_names_what_is_missing(trinity: Runner, tmp_path: Path) -> None:
    _folder(tmp_path, "config-only", "config.json")
    result, elapsed = _run(trinity, tmp_path, GOOD.replace("ROOT/tiny\n  tiny: {}", "ROOT/config-only"))
    assert result.returncode == 2, result.stderr
    line = result.error_line()
    assert "model.model_path: " in line and "not a complete Hugging Face model folder" in line
    assert "no weights (*.safetensors or *.bin) and no tokenizer files" in line
    assert elapsed < FAST_S, f"took {elapsed:.1f} s"

    _folder(tmp_path, "no-tokenizer", "config.json", "model.safetensors")
    result, _ = _run(trinity, tmp_path, GOOD.replace("ROOT/tiny\n  tiny: {}", "ROOT/no-tokenizer"))
    line = result.error_line()
    assert result.returncode == 2 and "no tokenizer files" in line and "no weights" not in line


def test_a_critic_folder_without_weights_is_refused_before_ray(trinity: Runner, tmp_path: Path) -> None:
    _folder(tmp_path, "critic", "config.json", "tokenizer.json")
    text = GOOD.replace("grpo", "ppo").replace("  tiny: {}\n", "  tiny: {}\n  critic_model_path: ROOT/critic\n")
    result, elapsed = _run(trinity, tmp_path, text)
    assert result.returncode == 2, result.stderr
    line = result.error_line()
    assert "model.critic_model_path: " in line and "no weights" in line
    assert elapsed < FAST_S, f"took {elapsed:.1f} s"


def test_a_hub_id_while_offline_names_the_offline_switch(trinity: Runner, tmp_path: Path) -> None:
    text = GOOD.replace("ROOT/tiny\n  tiny: {}", "some-org/not-downloaded-model")
    result, elapsed = _run(trinity, tmp_path, text, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf-home"))
    assert result.returncode == 2, result.stderr
    line = result.error_line()
    assert "some-org/not-downloaded-model is not a local folder nor in the Hugging Face cache" in line
    assert "HF_HUB_OFFLINE" in line
    assert elapsed < FAST_S, f"took {elapsed:.1f} s"


def test_a_hub_id_in_the_local_cache_passes_offline(trinity: Runner, tmp_path: Path) -> None:
    home = tmp_path / "hf-home"
    repo = home / "hub" / "models--some-org--cached-model"
    (repo / "snapshots" / "abc").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc", encoding="utf-8")
    (repo / "snapshots" / "abc" / "config.json").write_text("{}", encoding="utf-8")
    for model, warned in (("some-org/cached-model", False), ("some-org/other-model", True)):
        text = GOOD.replace("ROOT/tiny\n  tiny: {}", model)
        result = trinity("run", "--config", str(write(tmp_path, text)), "--dry-run", HF_HUB_OFFLINE="1",
                         HF_HOME=str(home))
        assert result.returncode == 0, result.stderr
        assert (f"{model} is not a local folder nor in the Hugging Face cache" in result.stdout) is warned


def test_a_task_file_with_a_broken_line_fails_before_ray(trinity: Runner, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "a", "answer": "a"}\n{"question": "b", "answer": \n', encoding="utf-8")
    text = GOOD.replace("path: TASKS", f"path: {tasks}")
    result, elapsed = _run(trinity, tmp_path, text)
    assert result.returncode == 2, result.stderr
    line = result.error_line()
    assert f"buffer.explorer_input.taskset: {tasks} cannot be read (line 2 is not valid JSON" in line
    assert elapsed < FAST_S, f"took {elapsed:.1f} s"
