"""The wandb sink: one clear error when enabled without wandb; with wandb, records go to its run."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tests.monitor._helpers import only
from trinity.common.config.loader import ConfigError
from trinity.monitor import Monitor, SinkUnavailableError


def test_enabled_without_wandb_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` now fails as if it were not installed
    run_dir = tmp_path / "run"
    with pytest.raises(SinkUnavailableError) as caught:
        Monitor(only(wandb=True, jsonl=True, progress=True, plot=True), run_dir)
    message = str(caught.value)
    assert "\n" not in message
    assert "monitor.monitor_type is wandb" in message and "pip install wandb" in message
    assert "monitor.monitor_type: tensorboard" in message
    assert isinstance(caught.value, ConfigError)  # reported like any other configuration problem
    assert not run_dir.exists()  # failed before writing anything


class _FakeRun:
    def __init__(self) -> None:
        self.defined: list[tuple[str, dict[str, Any]]] = []
        self.logged: list[dict[str, Any]] = []
        self.finished = 0

    def define_metric(self, name: str, **kwargs: Any) -> None:
        self.defined.append((name, kwargs))

    def log(self, data: dict[str, Any]) -> None:
        self.logged.append(data)

    def finish(self) -> None:
        self.finished += 1


def test_records_go_to_the_wandb_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _FakeRun()
    init_kwargs: dict[str, Any] = {}

    def init(**kwargs: Any) -> _FakeRun:
        init_kwargs.update(kwargs)
        return run

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    monitor = Monitor(only(wandb=True), tmp_path, project="proj", name="exp", run_config={"seed": 7})
    monitor.log({"reward/mean": 0.5}, step=3, phase="train")
    monitor.log({"reward/mean": 0.25}, step=2, phase="eval")
    monitor.close()
    monitor.close()

    assert init_kwargs == {"project": "proj", "name": "exp", "dir": str(tmp_path), "config": {"seed": 7}}
    assert ("*", {"step_metric": "step"}) in run.defined
    assert run.logged == [{"train/reward/mean": 0.5, "step": 3}, {"eval/reward/mean": 0.25, "step": 2}]
    assert run.finished == 1


def test_monitor_args_reach_wandb_init(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    init_kwargs: dict[str, Any] = {}

    def init(**kwargs: Any) -> _FakeRun:
        init_kwargs.update(kwargs)
        return _FakeRun()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    with Monitor(only(wandb=True, monitor_args={"entity": "team", "tags": ["a"]}), tmp_path, project="proj"):
        pass
    assert init_kwargs["entity"] == "team" and init_kwargs["tags"] == ["a"] and init_kwargs["project"] == "proj"
