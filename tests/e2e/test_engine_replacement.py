"""End to end: a rollout engine SIGKILLed mid-run in mode both is replaced, or the run ends with one line.

Real Ray, the tiny model, hf engines, an FSDP2 trainer rank and online sync
over gloo. The engine's process is killed by a workflow (see
:mod:`tests.e2e.engine_killers`) while a rollout batch is in flight.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.e2e import engine_killers
from tests.e2e.test_run_both import REPO, job_config, records
from trinity.common.config import parse_config
from trinity.launcher import run_plan
from trinity.planner.run import resolve_run


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trinity.common.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny")


def _config(tmp: Path, model: Path, workflow: str, **overrides: object) -> dict:
    return job_config(tmp, model, **{
        "buffer.total_steps": 4, "buffer.explorer_input.eval_tasksets": [], "explorer.eval_on_startup": False,
        "buffer.explorer_input.default_workflow_type": f"tests.e2e.engine_killers.{workflow}",
        "explorer.rollout_model.engine_num": 2, "cluster.gpu_per_node": 3,  # two engines, one trainer rank
        **overrides,
    })


@pytest.mark.parametrize("layout", [{}, {"explorer.rollout_model.engine_num": 1, "cluster.gpu_per_node": 1}],
                         ids=["two-engines", "colocate"])
def test_a_sigkilled_engine_is_replaced_with_the_trainers_weights_and_the_run_finishes(
    tmp_path: Path, tiny_model: Path, layout: dict
) -> None:
    """Colocated, the fresh engine joins the trainer rank's device and maps the shared weights file again."""
    engine_killers.SERVED.clear()
    engine_killers.KILLED.clear()
    raw = _config(tmp_path, tiny_model, "KillsItsEngine", **layout)
    assert raw["synchronizer"]["verify_checksums"] is True  # every sync checks each engine against the trainer
    assert run_plan(resolve_run(parse_config(raw))) == 0

    [killed] = engine_killers.KILLED
    kill_step = engine_killers.KILL_AT_STEP
    before = {pid for step, index, pid, _ in engine_killers.SERVED if index == 0 and step < kill_step}
    after = {pid for step, index, pid, _ in engine_killers.SERVED if index == 0 and step > kill_step}
    assert before == {killed}
    assert after and killed not in after, "a fresh engine process serves as engine 0 after the kill"

    logged = records(tmp_path / "ckpt" / "e2e" / "run")
    train = {r["step"]: r["metrics"] for r in logged if r["phase"] == "train"}
    explore = {r["step"]: r["metrics"] for r in logged if r["phase"] == "explore"}
    assert sorted(train) == [1, 2, 3, 4]
    # the fresh engine got the trainer's weights before it rolled out: the syncs after it found equal checksums
    assert all(m["sync/checksum_match"] == 1.0 for m in train.values())
    assert explore[kill_step + 1]["explore/engine_lost_attempts"] >= 1
    if not layout:  # with a second engine, the step after the kill counts the dead one and retries on the live one
        assert explore[kill_step + 1]["explore/dead_engines"] == 1
    else:  # the only engine: replaced within the step, its attempts rerun on the fresh one
        assert all(m["explore/dead_engines"] == 0 for m in explore.values())
    assert all(m["explore/failed"] == 0 for m in explore.values()), "the dead engine's tasks were retried"
    versions = [explore[s]["explore/model_version"] for s in sorted(explore)]
    assert versions == [0, 1, 2, 3], "every batch after the replacement ran on the trainer's latest weights"


def test_mode_explore_replaces_a_sigkilled_engine_with_the_published_weights(tmp_path: Path,
                                                                             tiny_model: Path) -> None:
    from transformers import AutoModelForCausalLM

    from tests.e2e.test_run_modes import mode_config
    from trinity.synchronizer import default_sync_path, save_weights

    engine_killers.SERVED.clear()
    engine_killers.KILLED.clear()
    plan = mode_config(tmp_path, tiny_model, "explore", **{
        "buffer.total_steps": 3, "explorer.rollout_model.engine_num": 2, "cluster.gpu_per_node": 2,
        "buffer.explorer_input.default_workflow_type": "tests.e2e.engine_killers.KillsItsEngine",
    })
    # a train job published version 1 before this explore job started
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    save_weights({n: t + 0.01 for n, t in model.state_dict().items()}, default_sync_path(plan), 1)
    assert run_plan(plan) == 0

    [killed] = engine_killers.KILLED
    after = [(pid, version) for step, index, pid, version in engine_killers.SERVED
             if index == 0 and step > engine_killers.KILL_AT_STEP]
    assert after and all(pid != killed for pid, _ in after), "a fresh engine process serves as engine 0"
    # every attempt, before and after the kill, ran on the published weights: the fresh engine loaded them first
    assert {version for *_, version in engine_killers.SERVED} == {1}


def test_an_engine_that_cannot_be_restarted_ends_the_run_with_one_line(tmp_path: Path, tiny_model: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    raw = _config(tmp_path, model, "KillsItsEngineAndModel", **{"explorer.rollout_model.engine_num": 1,
                                                                "cluster.gpu_per_node": 2})
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(raw))
    env = {**os.environ, "RAY_AUTH_MODE": "disabled",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "trinity.cli.main", "run", "--config", str(config)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=400, check=False)

    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    [line] = [line for line in done.stderr.splitlines() if line.startswith("trinity: error: ")]
    assert line.startswith("trinity: error: rollout engine 0 died and a fresh engine did not start: "), line
    assert str(model) in line, "the reason names the model folder the fresh engine could not load"
    assert line.endswith("the run stopped: rerun the same `trinity run --config` command to continue from the "
                         "last checkpoint"), line
    trained = [r["step"] for r in records(tmp_path / "ckpt" / "e2e" / "run") if r["phase"] == "train"]
    assert trained == [1], "the run ended at the first batch after the death, not later"
