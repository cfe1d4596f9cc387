"""The scheduler with hf engines as Ray actors on a local cluster: toy and multi-turn tasks, a timeout, a failure."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import save_file

from tests.explorer import flows
from tests.explorer.flows import probe_tasks
from tests.plans import make_plan
from trinity.common.config.plan.run import RunPlan
from trinity.common.models.client import EngineClient
from trinity.common.models.engines import create_engines, engine_actor_options
from trinity.common.models.hf_engine import HFEngine
from trinity.common.workflows import Task
from trinity.device.ray_resources import ray_resource_options
from trinity.explorer import Scheduler


@pytest.fixture(scope="module")
def plan(tiny_model: Path) -> RunPlan:
    return make_plan({
        "model.model_path": str(tiny_model), "model.max_prompt_tokens": 256, "model.max_response_tokens": 6,
        "explorer.rollout_model.engine_num": 2, "explorer.runner_per_model": 2, "explorer.max_timeout": 3.0,
        "explorer.max_retry_times": 1,
    })


@pytest.fixture(scope="module")
def engines(ray_cluster: Any, plan: RunPlan) -> Iterator[list[Any]]:
    # num_cpus=0: the actors fit beside whatever else a shared test session keeps on the 2-CPU cluster
    actors = create_engines(plan, "hf", num_cpus=0)
    yield actors
    for actor in actors:
        ray_cluster.kill(actor)


def test_workers_draw_no_progress_bars_unless_the_user_chose(plan: RunPlan, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray forwards each worker's "Loading weights" bar to the console, where it breaks the run's live line."""
    from trinity.trainer.trainer import worker_actor_options

    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    for options in (engine_actor_options(plan, HFEngine), worker_actor_options(1.0)):
        assert options["runtime_env"]["env_vars"]["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")  # the user's choice is Ray's to forward, not ours
    assert "HF_HUB_DISABLE_PROGRESS_BARS" not in engine_actor_options(plan, HFEngine)["runtime_env"]["env_vars"]


def test_actor_options_follow_the_device_backend(plan: RunPlan) -> None:
    options = engine_actor_options(plan, HFEngine)
    assert options["max_concurrency"] == 4 and options["num_cpus"] == 1
    assert options["runtime_env"]["env_vars"]["TRINITY_DEVICE"] == "cpu"
    assert "resources" not in options  # the CPU backend has no Ray device resource
    # Ray's own resources are keywords, any other key goes to resources
    assert ray_resource_options("CPU", 2) == {"num_cpus": 2}
    assert ray_resource_options("ACME", 1) == {"resources": {"ACME": 1}}
    assert ray_resource_options(None, 1) == {}


def test_step_on_actor_engines_with_a_timeout_and_a_failure(
    ray_cluster: Any, engines: list[Any], plan: RunPlan, tmp_path: Path
) -> None:
    # weights reach the actors through a checkpoint folder: versions show up in the experiences
    state = ray_cluster.get(engines[0].describe.remote())
    assert state["version"] == 0 and state["device"] == "cpu"
    assert EngineClient(engines[0]).remote
    toy = [Task(prompt=f"Repeat the letter {c}.", answer=c, index=i, repeat_times=3, workflow="toy_repeat",
                reward_fn="toy_repeat") for i, c in enumerate("abcd")]
    game = Task(prompt="", answer=6, index=4, repeat_times=2, workflow="guess_number",
                workflow_args={"max_turns": 2})
    stalled, doomed = probe_tasks(7, "ray")[5:]
    stalled.workflow_args.update(stall_attempts=1, stall_s=3.3)
    doomed.workflow_args.update(fail_attempts=-1)
    tasks = [*toy, game, stalled, doomed]

    scheduler = Scheduler.from_plan(engines, plan)
    result = scheduler.run(tasks)

    assert [r is None for r in result.results] == [False] * 6 + [True]
    [failure] = result.failures
    assert failure.position == 6 and failure.attempts == 2 and "ValueError: boom" in failure.error
    assert result.metrics["timeouts"] == 1 and result.metrics["retries"] == 2
    stalled_result = result.results[5]
    assert stalled_result is not None and stalled_result[0].info["attempt"] == 2
    for task, experiences in zip(toy, result.results[:4], strict=True):
        assert experiences is not None and len(experiences) == 3
        assert all(e.group_id == task.group_id and e.model_version == 0 for e in experiences)
        assert all(1 <= e.response_length <= 6 and e.logprobs is not None for e in experiences)
    turns = result.results[4]
    assert turns is not None and len(turns) == 2
    assert all(1 <= e.info["turns"] <= 2 and e.action_mask is not None for e in turns)
    # the abandoned attempt wakes up later; its next engine call is refused
    deadline = time.monotonic() + 5
    while not flows.LATE_ERRORS and time.monotonic() < deadline:
        time.sleep(0.05)
    assert flows.LATE_ERRORS[-1] == "TaskCancelledError"

    # a new version through the checkpoint path, then a second step sees it
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(plan.model.path)
    weights = {n: (t + 0.01).contiguous() for n, t in model.state_dict().items() if n != "lm_head.weight"}
    save_file(weights, str(tmp_path / "model.safetensors"))
    ray_cluster.get([e.load_checkpoint_weights.remote(str(tmp_path), 1) for e in engines])
    checksums = ray_cluster.get([e.state_dict_checksum.remote() for e in engines])
    assert checksums[0] == checksums[1]
    again = scheduler.run(toy[:2])
    assert not again.failures
    assert {e.model_version for e in again.experiences} == {1}
    assert torch.is_tensor(again.experiences[0].tokens)


def _wait_until_dead(ray_module: Any, actor: Any, timeout_s: float = 30.0) -> None:
    """Return once ``actor`` refuses calls (its process is gone); fail the test after ``timeout_s``."""
    from ray.exceptions import RayActorError

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray_module.get(actor.model_version.remote(), timeout=5)
        except RayActorError:
            return
        time.sleep(0.05)
    pytest.fail(f"the killed actor still answered after {timeout_s} s")


def test_no_attempt_goes_to_a_dead_engine_actor(ray_cluster: Any) -> None:
    """Two real actors serve the probe workflow; one is killed: every task and retry ends on the live one."""

    @ray_cluster.remote(num_cpus=0)
    class VersionActor:
        def __init__(self, version: int) -> None:
            self.version = version

        def model_version(self) -> int:
            return self.version

    actors = [VersionActor.remote(0), VersionActor.remote(1)]  # type: ignore[attr-defined]
    try:
        assert ray_cluster.get([a.model_version.remote() for a in actors]) == [0, 1]
        ray_cluster.kill(actors[0])
        _wait_until_dead(ray_cluster, actors[0])  # ray.kill returns before the process is gone
        scheduler = Scheduler(actors, runners_per_engine=2, timeout=30, max_retries=1)
        result = scheduler.run(probe_tasks(6, "dead", work_s=0.05))
        assert not result.failures
        assert {e.info["engine"] for e in result.experiences} == {1}
        assert scheduler.dead_engines == {0} and result.metrics["dead_engines"] == 1
        # the dead engine's two runners each started a task before the death was known; nothing went there after,
        # and the two tasks ran again without spending a retry (their engine failed, not they)
        assert result.metrics["engine_lost_attempts"] == 2 and result.metrics["attempts"] == 8
        assert result.metrics["retries"] == 0
    finally:
        for actor in actors:
            ray_cluster.kill(actor)
