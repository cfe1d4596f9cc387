"""End to end: `trinity run` in modes explore, train and bench on the CPU — real Ray, a real SQLite buffer,
the tiny model, the checkpoint sync folder between a trainer job and an explorer job.

The explore and train jobs of one run share its folder: the experiences meet in
``<run>/buffer/experience.sqlite``, the trainer publishes its weights to
``<run>/sync_weights`` (the checkpoint sync method) and its checkpoints to
``<run>/checkpoints``; bench evaluates the starting model and each checkpoint.

Most tests share one run (the module fixture ``trained_run``) and build on each other in file order.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from trinity.common.config import ConfigError, parse_config
from trinity.launcher import run_plan
from trinity.planner.run import resolve_run
from trinity.synchronizer.checkpoint_sync import read_version

from .test_run_both import TASKS, job_config, records

GROUPS_PER_STEP = 2  # buffer.batch_size
GROUP_SIZE = 4  # algorithm.repeat_times


def mode_config(tmp: Path, model: Path, mode: str, **overrides: object) -> Any:
    """The small job of test_run_both in ``mode``: one engine, one trainer rank, a SQLite experience buffer."""
    raw = job_config(
        tmp,
        model,
        **{
            "mode": mode,
            "buffer.total_steps": 2,
            "buffer.explorer_input.eval_tasksets": [],
            "buffer.trainer_input.experience_buffer": {
                "name": "experience",
                "storage_type": "sql",
                "max_read_timeout": 30.0,
            },
            "cluster.gpu_per_node": 1,
            "synchronizer.verify_checksums": False,
            "monitor.plot": False,
            **overrides,
        },
    )
    return resolve_run(parse_config(raw))


def query(run_dir: Path, sql: str) -> list[tuple]:
    with closing(sqlite3.connect(run_dir / "buffer" / "experience.sqlite")) as db:
        return db.execute(sql).fetchall()


def rows(run_dir: Path) -> list[tuple[int, int, bool]]:
    """``(id, model_version, consumed)`` of every experience in the run's SQLite buffer, in insertion order."""
    return [
        (i, v, bool(c)) for i, v, c in query(run_dir, "SELECT id, model_version, consumed FROM experiences ORDER BY id")
    ]


def closed(run_dir: Path) -> bool:
    """Whether the buffer is marked closed (its writers are done)."""
    return query(run_dir, "SELECT COUNT(*) FROM buffer_state WHERE key = 'closed'")[0][0] == 1


def copy_buffer(source: Path, target: Path, *changes: str) -> None:
    """Copy an SQLite buffer (WAL included), then apply ``changes`` (SQL statements) to the copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)
        for sql in changes:
            dst.execute(sql)
        dst.commit()


def stamps(checkpoints: Path) -> dict[str, tuple[int, int]]:
    """Each checkpoint folder's inode and state-file time: a checkpoint written again changes both."""
    return {
        p.name: (p.stat().st_ino, (p / "trainer_state.json").stat().st_mtime_ns) for p in checkpoints.glob("step-*")
    }


def device_actors(run_dir: Path) -> list[tuple[str, str]]:
    """``(role, name)`` of each actor in the run's ``device.json``."""
    return [(a["role"], a["name"]) for a in json.loads((run_dir / "device.json").read_text())["actors"]]


def phase(run_dir: Path, name: str, since: int = 0) -> list[dict]:
    return [r for r in records(run_dir)[since:] if r["phase"] == name]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trinity.common.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny")


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> dict[str, Any]:
    """One run: `explore` (2 steps into SQLite), then `train` on that buffer (checkpoint each step)."""
    import ray

    tmp = tmp_path_factory.mktemp("modes")
    run_dir = tmp / "ckpt" / "e2e" / "run"
    assert run_plan(mode_config(tmp, tiny_model, "explore")) == 0
    assert not ray.is_initialized(), "the job must stop the local cluster it started"
    copy_buffer(run_dir / "buffer" / "experience.sqlite", tmp / "explored.sqlite")  # as the explore job left it
    explored = {
        "rows": rows(run_dir),
        "closed": closed(run_dir),
        "records": len(records(run_dir)),
        "checkpoints": (run_dir / "checkpoints").exists(),
        "device": device_actors(run_dir),
    }
    # total_steps 5, but the explorer wrote 2 steps: train stops cleanly when the closed buffer runs dry
    assert (
        run_plan(
            mode_config(
                tmp,
                tiny_model,
                "train",
                **{
                    "buffer.total_steps": 5,
                    "trainer.save_interval": 1,
                },
            )
        )
        == 0
    )
    assert not ray.is_initialized()
    return {"tmp": tmp, "run_dir": run_dir, "explored": explored, "trained_device": device_actors(run_dir)}


def test_explore_then_train_through_a_sqlite_buffer(trained_run: dict[str, Any]) -> None:
    run_dir: Path = trained_run["run_dir"]
    explored = trained_run["explored"]

    # explore: 2 steps x 2 tasks x 4 rollouts, all by the starting model (version 0), none read yet
    assert len(explored["rows"]) == 2 * GROUPS_PER_STEP * GROUP_SIZE
    assert {v for _, v, _ in explored["rows"]} == {0}
    assert not any(c for *_, c in explored["rows"])
    assert explored["closed"], "a finished explore job marks the buffer closed: readers drain it, then stop"
    logged = records(run_dir)
    assert [r["step"] for r in logged[: explored["records"]] if r["phase"] == "explore"] == [1, 2]
    assert not explored["checkpoints"], "explore trains nothing"
    assert explored["device"] == [("engine", "rollout-0")]  # each job records the actors it started
    assert trained_run["trained_device"] == [("trainer", "trainer-0")]

    # train: every experience consumed, one step per explored batch, then a clean stop (total_steps 5 not reached)
    assert all(c for *_, c in rows(run_dir))
    train = phase(run_dir, "train", explored["records"])
    assert [r["step"] for r in train] == [1, 2]
    for record in train:
        metrics = record["metrics"]
        assert metrics["loss"] == metrics["loss"]  # not NaN
        assert metrics["rows"] == GROUPS_PER_STEP * GROUP_SIZE
        assert metrics["sync/version"] == record["step"], "each step is published to the sync folder"
        # the step's wall time split: no rollouts in this job; reading, training, saving, publishing add up
        parts = [metrics[f"time/{part}_s"] for part in ("explore", "train", "save", "sync", "driver")]
        assert parts[0] == 0 and min(parts[1:]) > 0
        assert sum(parts) == pytest.approx(metrics["time/step_s"], abs=1e-6)
        assert 0 <= metrics["time/explore_wait_s"] <= metrics["time/driver_s"] + 1e-6
    assert read_version(run_dir / "sync_weights") == 2
    assert (run_dir / "sync_weights" / "model.safetensors").is_file()
    state = json.loads((run_dir / "checkpoints" / "step-2" / "trainer_state.json").read_text())
    assert state["step"] == 2
    assert state["extra"]["sampler"]["storage"]["read_offset"] == len(explored["rows"])
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("step-*")) == ["step-1", "step-2"]


def test_train_on_an_exhausted_buffer_stops_without_a_step(trained_run: dict[str, Any], tiny_model: Path) -> None:
    run_dir: Path = trained_run["run_dir"]
    before = len(records(run_dir))
    checkpoints = run_dir / "checkpoints"
    saved = stamps(checkpoints)
    published = (run_dir / "sync_weights").resolve()
    # the same command again: it resumes at step 2, finds the closed buffer fully read, and stops at once
    assert run_plan(mode_config(trained_run["tmp"], tiny_model, "train", **{"buffer.total_steps": 5})) == 0
    assert phase(run_dir, "train", before) == []
    assert stamps(checkpoints) == saved, "no step taken: no checkpoint written or rewritten"
    assert (run_dir / "sync_weights").resolve() == published and read_version(run_dir / "sync_weights") == 2
    assert all(c for *_, c in rows(run_dir))


def test_train_on_an_open_buffer_saves_its_steps_then_times_out(
    trained_run: dict[str, Any], tiny_model: Path, tmp_path: Path
) -> None:
    """A new run on a copy of the explored buffer: every row marked read by a trainer that left no checkpoint,
    and the buffer still open (its explorer not done). The trainer reads it from the first experience, and
    once it is drained waits ``read_timeout``, then fails with its two steps checkpointed and published."""
    from trinity.buffer import StorageTimeoutError

    run_dir = tmp_path / "ckpt" / "e2e" / "run"
    copy_buffer(
        trained_run["tmp"] / "explored.sqlite",
        run_dir / "buffer" / "experience.sqlite",
        "UPDATE experiences SET consumed = 1",
        "DELETE FROM buffer_state WHERE key = 'closed'",
    )
    config = mode_config(
        tmp_path,
        tiny_model,
        "train",
        **{"buffer.total_steps": 0, "buffer.trainer_input.experience_buffer.max_read_timeout": 2.0},
    )
    with pytest.raises(StorageTimeoutError, match="waited 2 s"):
        run_plan(config)
    assert [r["step"] for r in phase(run_dir, "train")] == [1, 2]
    assert sorted(stamps(run_dir / "checkpoints")) == ["step-2"]
    assert read_version(run_dir / "sync_weights") == 2
    assert all(c for *_, c in rows(run_dir)) and not closed(run_dir), "a reader never closes the buffer"


def test_explore_picks_up_published_weights(trained_run: dict[str, Any], tiny_model: Path) -> None:
    run_dir: Path = trained_run["run_dir"]
    old = rows(run_dir)
    before = len(records(run_dir))
    published = read_version(run_dir / "sync_weights")
    assert published == 2
    # the same run, 2 more steps: the explorer continues after its last batch with the trainer's weights
    assert run_plan(mode_config(trained_run["tmp"], tiny_model, "explore", **{"buffer.total_steps": 4})) == 0

    explore = phase(run_dir, "explore", before)
    assert [r["step"] for r in explore] == [3, 4], "the explore job resumes its task position, none redone"
    assert all(r["metrics"]["explore/model_version"] == published for r in explore)
    new = rows(run_dir)[len(old) :]
    assert len(new) == 2 * GROUPS_PER_STEP * GROUP_SIZE
    assert {v for _, v, _ in new} == {published}, "the new experiences come from the published weights"
    assert not any(c for *_, c in new) and closed(run_dir)
    state = json.loads((run_dir / "explorer_state.json").read_text())
    assert state["tasks"]["step"] == 4 and state["model_version"] == published


def test_an_explore_job_killed_between_storing_a_batch_and_saving_its_state_explores_it_once(
    trained_run: dict[str, Any], tmp_path: Path, tiny_model: Path
) -> None:
    """The buffer as the explore job left it after its second batch, the state file as of its first batch:
    what a job SIGKILLed after the batch's commit and before the file's rename leaves. The next job
    continues after the stored batch (the position stored with it), so no batch is stored twice."""
    run_dir = tmp_path / "ckpt" / "e2e" / "run"
    copy_buffer(trained_run["tmp"] / "explored.sqlite", run_dir / "buffer" / "experience.sqlite",
                "DELETE FROM buffer_state WHERE key = 'closed'")  # the killed job never closed it
    marked = json.loads(query(run_dir, "SELECT value FROM buffer_state WHERE key = 'mark/explorer_state'")[0][0])
    assert marked["tasks"]["step"] == 2 and marked["row"]["step"] == 2, "the position is stored with the batch"
    behind = {**marked, "tasks": {**marked["tasks"], "step": 1, "index": GROUPS_PER_STEP},
              "row": {**marked["row"], "step": 1}}
    (run_dir / "explorer_state.json").write_text(json.dumps(behind))

    assert run_plan(mode_config(tmp_path, tiny_model, "explore", **{"buffer.total_steps": 4})) == 0

    batches = [json.loads(data)["info"]["batch_id"] for (data,) in query(run_dir, "SELECT data FROM experiences")]
    assert sorted(set(batches)) == [0, 1, 2, 3]
    assert all(batches.count(b) == GROUPS_PER_STEP * GROUP_SIZE for b in range(4)), "no batch stored twice"
    explore = phase(run_dir, "explore")
    assert [r["step"] for r in explore] == [2, 3, 4], "step 2's row from the stored state, then the new steps"
    assert json.loads((run_dir / "explorer_state.json").read_text())["tasks"]["step"] == 4


def test_bench_evaluates_the_start_and_every_checkpoint(trained_run: dict[str, Any], tiny_model: Path) -> None:
    run_dir: Path = trained_run["run_dir"]
    before = len(records(run_dir))
    eval_tasks = [
        {
            "name": "eval",
            "path": str(TASKS / "eval.jsonl"),
            "rollout_args": {"temperature": 0.0},
            "format": {"prompt_key": "question", "response_key": "answer"},
        }
    ]
    assert (
        run_plan(
            mode_config(trained_run["tmp"], tiny_model, "bench", **{"buffer.explorer_input.eval_tasksets": eval_tasks})
        )
        == 0
    )

    evals = phase(run_dir, "eval", before)
    assert [r["step"] for r in evals] == [0, 1, 2]
    for record in evals:
        metrics = record["metrics"]
        assert 0.0 <= metrics["eval/reward/mean"] <= 1.0
        assert metrics["eval/tasks"] == 16 and metrics["eval/failed"] == 0
        assert metrics["bench/model_version"] == record["step"], "the engine evaluated that checkpoint's weights"
    assert phase(run_dir, "train", before) == [] and phase(run_dir, "explore", before) == []


@pytest.mark.parametrize("workflow", ["toy_repeat", "math_workflow"])
def test_bench_evaluates_an_external_endpoint_and_no_checkpoint(
    trained_run: dict[str, Any], tiny_model: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture, workflow: str,
) -> None:
    """``model.external_model`` (upstream's examples/bench/external_model.yaml): the endpoint is an hf engine's
    OpenAI server in this process, reached by URL only; the run folder's checkpoints are left alone."""
    from trinity.common.models.hf_engine import HFEngine

    served = HFEngine(str(tiny_model), torch_threads=1, openai_api={
        "host": "127.0.0.1", "port": 0, "model_names": ["endpoint-model"], "max_prompt_tokens": 512,
        "context_length": 1024, "default_max_tokens": 6, "history": False})
    try:
        monkeypatch.setenv("BENCH_ENDPOINT_URL", served.openai_api()["base_url"])
        run_dir: Path = trained_run["run_dir"]
        before = len(records(run_dir))
        eval_tasks = [{"name": "eval", "path": str(TASKS / "eval.jsonl"), "rollout_args": {"temperature": 0.0},
                       "format": {"prompt_key": "question", "response_key": "answer"}}]
        plan = mode_config(trained_run["tmp"], tiny_model, "bench", **{
            "model.model_path": "endpoint-model",
            "model.external_model": {"enable": True, "model_name": "endpoint-model",
                                     "base_url_env": "BENCH_ENDPOINT_URL", "api_key_env": "BENCH_ENDPOINT_KEY"},
            "buffer.explorer_input.eval_tasksets": eval_tasks,
            "buffer.explorer_input.default_eval_workflow_type": workflow,
            "cluster.gpu_per_node": 0,
        })
        assert plan.explorer.rollout.external is not None and plan.model.path == "endpoint-model"
        with caplog.at_level("WARNING", logger="trinity.launcher"):
            assert run_plan(plan) == 0
        requests = served._api_server.served
    finally:
        served.shutdown()
    evals = phase(run_dir, "eval", before)
    assert [r["step"] for r in evals] == [0], "one evaluation: no checkpoint can be loaded into an endpoint"
    metrics = evals[0]["metrics"]
    assert metrics["eval/tasks"] == 16 and metrics["eval/failed"] == 0
    assert -1.0 <= metrics["eval/reward/mean"] <= 1.0 and metrics["bench/model_version"] == 0  # math: -0.1 format
    assert requests == 16, "one chat request per task, all to the endpoint"
    assert any("checkpoint(s)" in r.getMessage() and "not evaluated" in r.getMessage() for r in caplog.records)


def test_external_model_outside_bench_is_a_config_error(tmp_path: Path, tiny_model: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match=r"^model\.external_model\.enable: .*mode bench"):
        mode_config(tmp_path, tiny_model, "explore", **{"model.external_model": {"enable": True, "model_name": "m"}})
    monkeypatch.delenv("OPENAI_BASE_URL")
    with pytest.raises(ConfigError, match=r"^model\.external_model\.base_url_env: .*OPENAI_BASE_URL is not set"):
        mode_config(tmp_path, tiny_model, "bench", **{"model.external_model": {"enable": True, "model_name": "m"},
                                                      "buffer.explorer_input.eval_tasksets": [{"path": "e.jsonl"}]})


def test_serve_takes_the_newest_of_the_published_weights_and_the_checkpoints(trained_run: dict[str, Any],
                                                                           tmp_path: Path) -> None:
    """What mode serve loads (``newest_weights``): the train job published step 2 and checkpointed steps 1, 2."""
    from trinity.launcher.serve import newest_weights
    from trinity.trainer.checkpoint import CheckpointDir

    run_dir: Path = trained_run["run_dir"]
    checkpoints = CheckpointDir(run_dir / "checkpoints")
    published = run_dir / "sync_weights"
    assert newest_weights(published, checkpoints, 0, set()) == ("published", published.resolve(), 2)
    assert newest_weights(published, checkpoints, 2, set()) is None  # nothing newer than what is loaded
    nothing_published = tmp_path / "sync_weights"
    assert newest_weights(nothing_published, checkpoints, 0, set()) == ("checkpoint", run_dir / "checkpoints" /
                                                                        "step-2", 2)
    assert newest_weights(nothing_published, checkpoints, 0, {2}) == ("checkpoint", run_dir / "checkpoints" /
                                                                      "step-1", 1)  # step 2 was found damaged
    assert newest_weights(nothing_published, checkpoints, 1, {2}) is None


def test_bench_without_eval_tasks_is_a_config_error(tmp_path: Path, tiny_model: Path) -> None:
    import ray

    with pytest.raises(ConfigError, match=r"^buffer\.explorer_input\.eval_tasksets: .*bench") as raised:
        run_plan(mode_config(tmp_path, tiny_model, "bench"))  # refused while parsing, before Ray starts
    assert "\n" not in str(raised.value)
    assert not ray.is_initialized()
