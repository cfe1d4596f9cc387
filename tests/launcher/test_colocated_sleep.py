"""Mode colocate with a vLLM engine: the loop puts the engine to sleep for the trainer's step.

A whole run cannot take a vLLM engine on the CPU backend, so the loop's
train step is driven directly: the real one-rank FSDP2 trainer (in this
process), the vLLM engine over the double of vLLM (``tests/doubles/vllm_site``,
which models sleep mode), and :class:`BothLoop`'s own ``_timed_train_step``.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.doubles.vllm_path import vllm_double
from tests.trainer.support import make_experiences, make_trainer_plan
from trinity.common.models.engine import SamplingParams
from trinity.launcher.both_loop import BothLoop
from trinity.monitor.step_clock import StepClock
from trinity.synchronizer.policy import SyncPolicy


@pytest.fixture(scope="module")
def double() -> Iterator[Path]:
    with vllm_double() as site:
        yield site


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trinity.common.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny")


def loop_for(plan: Any, trainer: Any, engines: list[Any]) -> BothLoop:
    """The loop's state its train step reads (the rest of a run is not needed for one step)."""
    loop = BothLoop.__new__(BothLoop)
    loop.plan, loop.trainer, loop.engines = plan, trainer, engines
    loop.style = "fixed"
    # a device sync (no shared file): the step writes no weights of its own
    loop.sync = SimpleNamespace(policy=SyncPolicy.from_config(plan.sync), publish_target=lambda version: None)
    loop.engine_lock = threading.Lock()
    loop.clock = StepClock()
    return loop


@pytest.mark.parametrize("sleep_mode", [True, False], ids=["serial", "explorer-ahead"])
def test_the_engine_sleeps_through_the_train_step_and_wakes_for_the_next_request(
    double: Path, tiny_model: Path, tmp_path: Path, sleep_mode: bool
) -> None:
    from trinity.common.models.vllm_engine import VLLMEngine
    from trinity.trainer.trainer import FSDPTrainer

    plan = make_trainer_plan(tiny_model, tmp_path, world_size=1)
    rollout = dataclasses.replace(plan.explorer.rollout, sleep_mode=sleep_mode)
    plan = dataclasses.replace(plan, explorer=dataclasses.replace(plan.explorer, rollout=rollout))
    trainer = FSDPTrainer(plan, world_size=1, in_process=True)
    engine = VLLMEngine(str(tiny_model), dtype="float32", max_prompt_tokens=32, sleep_mode=True)
    asleep_while_training: list[bool] = []
    train_step = trainer.train_step

    def recording(experiences: Any, **kwargs: Any) -> Any:
        asleep_while_training.append(engine.is_sleeping())
        return train_step(experiences, **kwargs)

    trainer.train_step = recording  # type: ignore[method-assign]
    try:
        metrics = loop_for(plan, trainer, [engine])._timed_train_step(make_experiences(2, 3, logprobs=True))
        assert metrics["loss"] == metrics["loss"]
        assert asleep_while_training == [sleep_mode]
        done = engine.generate(["Repeat the letter b."], SamplingParams(temperature=0.0, max_tokens=4))[0][0]
        assert len(done.response_tokens) == 4 and not engine.is_sleeping()
    finally:
        engine.shutdown()
        trainer.shutdown()
