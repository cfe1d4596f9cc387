"""Each mode tears down what it started, in reverse order, however it ends (an error, Ctrl-C).

The engines, pipeline, monitor and storage are stand-ins that record their
teardown: the test is about the order of start and stop in the launcher,
not about what those parts do.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import trinity.buffer
from tests.plans import make_plan
from trinity.launcher import bench, explore, train
from trinity.launcher.session import Session

TASKS = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "tasks" / "train.jsonl"


class Part:
    """A started part: each teardown call is appended to the shared ``events``."""

    def __init__(self, name: str, events: list[str]) -> None:
        self.name, self.events = name, events
        self.rollout: list[Any] = []
        self.trainer_group = None

    def __getattr__(self, method: str) -> Any:
        if method in ("close", "release", "shutdown", "remove"):
            return lambda *args: self.events.append(f"{self.name}.{method}")
        if method == "read_mark":  # a storage that holds no explorer state: a first job
            return lambda key: None
        raise AttributeError(method)


def _session(tmp_path: Path, mode: str) -> Session:
    plan = make_plan({
        "mode": mode, "checkpoint_root_dir": str(tmp_path),
        "buffer.explorer_input.taskset.path": str(TASKS),
        "buffer.trainer_input.experience_buffer": {"name": "experience", "storage_type": "sql"},
        "buffer.explorer_input.eval_tasksets": [{"name": "eval", "path": str(TASKS),
                                                 "format": {"prompt_key": "question", "response_key": "answer"}}],
    })
    return Session(plan, connection=None, selection=None, layout=None)  # type: ignore[arg-type]


def _interrupt(*args: Any, **kwargs: Any) -> Any:
    raise KeyboardInterrupt


def test_explore_stops_what_it_started_when_interrupted_while_starting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    monkeypatch.setattr(trinity.buffer, "make_storage", lambda *a, **k: Part("storage", events))
    monkeypatch.setattr(explore, "pad_token_id_of", lambda session: 0)
    monkeypatch.setattr(explore, "place", lambda plan, layout: Part("placement", events))
    monkeypatch.setattr(explore, "start_engines", lambda session, placement: Part("engines", events))
    monkeypatch.setattr(explore, "recorder_for", lambda session: None)
    monkeypatch.setattr(explore, "pipeline_for", lambda *a: Part("pipeline", events))
    monkeypatch.setattr(explore, "write_ray_timeline", lambda session: events.append("timeline"))
    monkeypatch.setattr(explore, "scheduler_for", _interrupt)
    with pytest.raises(KeyboardInterrupt):
        explore.run_explore(_session(tmp_path, "explore"))
    # the buffer stays open (not closed for writing): a rerun continues it
    assert events == ["pipeline.close", "engines.shutdown", "placement.remove", "timeline", "storage.release"]


def test_explore_closes_the_buffer_after_the_pipeline_when_it_finishes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    monkeypatch.setattr(trinity.buffer, "make_storage", lambda *a, **k: Part("storage", events))
    monkeypatch.setattr(explore, "pad_token_id_of", lambda session: 0)
    monkeypatch.setattr(explore, "place", lambda plan, layout: Part("placement", events))
    monkeypatch.setattr(explore, "start_engines", lambda session, placement: Part("engines", events))
    monkeypatch.setattr(explore, "recorder_for", lambda session: None)
    monkeypatch.setattr(explore, "pipeline_for", lambda *a: Part("pipeline", events))
    monkeypatch.setattr(explore, "write_ray_timeline", lambda session: events.append("timeline"))
    monkeypatch.setattr(explore, "scheduler_for", lambda *a: None)
    monkeypatch.setattr(explore, "monitor_for", lambda *a: Part("monitor", events))
    monkeypatch.setattr(explore, "write_device_record", lambda *a, **k: events.append("device.json"))
    monkeypatch.setattr(explore, "_explore_batches", lambda *a, **k: events.append("explored"))
    explore.run_explore(_session(tmp_path, "explore"))
    assert events == ["device.json", "explored", "monitor.close", "pipeline.close", "engines.shutdown",
                      "placement.remove", "timeline", "storage.close", "storage.release"]


def test_bench_stops_the_engines_when_the_monitor_cannot_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    monkeypatch.setattr(bench, "place", lambda plan, layout: Part("placement", events))
    monkeypatch.setattr(bench, "start_engines", lambda session, placement: Part("engines", events))
    monkeypatch.setattr(bench, "scheduler_for", lambda *a: None)
    monkeypatch.setattr(bench, "monitor_for", _interrupt)
    with pytest.raises(KeyboardInterrupt):
        bench.run_bench(_session(tmp_path, "bench"))
    assert events == ["engines.shutdown", "placement.remove"]


def test_train_removes_its_placement_when_the_trainer_cannot_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import trinity.trainer.trainer

    events: list[str] = []
    monkeypatch.setattr(trinity.buffer, "make_storage", lambda *a, **k: Part("storage", events))
    monkeypatch.setattr(train, "strategy_for", lambda *a, **k: None)
    monkeypatch.setattr(train, "place", lambda plan, layout: Part("placement", events))
    monkeypatch.setattr(trinity.trainer.trainer, "FSDPTrainer", _interrupt)
    session = _session(tmp_path, "train")
    session.layout = SimpleNamespace(trainers=1, use_torch_compile=False)  # type: ignore[assignment]
    with pytest.raises(KeyboardInterrupt):
        train.run_train(session)
    assert events == ["placement.remove", "storage.release"]
