"""Experience operators in upstream's shapes: the built-in filters and mappers, and a user's ExperienceOperatorV1
(develop_operator.md's RewardFilter, written as the guide shows) in the real pipeline, with SQLite storage."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.buffer.factories import make_exp, make_group
from tests.plans import make_plan
from trinity.buffer import EXPERIENCE_OPERATORS, REWARD_SHAPERS, SQLiteStorage, build_pipeline
from trinity.buffer.pipeline import Operators
from trinity.common.config import ConfigError
from trinity.common.experience import Experience

GUIDE_OPERATOR = '''
from typing import Dict, List, Tuple

from trinity.buffer.operators import EXPERIENCE_OPERATORS, ExperienceOperatorV1
from trinity.common.experience import Experience


@EXPERIENCE_OPERATORS.register_module("guide_reward_filter")
class RewardFilter(ExperienceOperatorV1):

    def __init__(self, threshold: float = 0.0) -> None:
        self.threshold = threshold

    async def process(self, exps: List[Experience]) -> Tuple[List[Experience], Dict]:
        filtered_exps = [exp for exp in exps if exp.reward >= self.threshold]
        metrics = {"filtered_count": len(exps) - len(filtered_exps)}
        return filtered_exps, metrics
'''


@pytest.fixture
def guide_operator() -> Iterator[None]:
    saved = dict(EXPERIENCE_OPERATORS._items)
    exec(compile(GUIDE_OPERATOR, "develop_operator.md", "exec"), {"__name__": "trinity.plugins.guide"})
    try:
        yield
    finally:
        EXPERIENCE_OPERATORS._items.clear()
        EXPERIENCE_OPERATORS._items.update(saved)


def run(name: str, exps: list[Experience], **args: Any) -> tuple[list[Experience], dict[str, float]]:
    stage = Operators([(name, args)])
    out = stage.process(exps)
    return out, stage.metrics


def test_one_registry_holds_shapers_and_operator_classes() -> None:
    assert EXPERIENCE_OPERATORS is REWARD_SHAPERS
    assert {"reward_filter", "reward_std_filter", "invalid_reward_filter", "reward_shaping_mapper",
            "pass_rate_calculator", "scale", "clip"} <= set(EXPERIENCE_OPERATORS.names())


def test_reward_filter_keeps_rewards_at_or_over_the_threshold() -> None:
    exps = [make_exp("a", 0, reward=0.5), make_exp("a", 1, reward=0.1), make_exp("b", 0, reward=None)]
    out, metrics = run("reward_filter", exps, threshold=0.2)
    assert [(e.group_id, e.run_id) for e in out] == [("a", 0)]
    assert metrics == {"reward_filter/filtered_count": 2.0}
    assert out[0].info["group_size"] == 1  # what is left of the group is the group the trainer waits for


def test_reward_std_filter_drops_uniform_groups_and_lone_rollouts() -> None:
    exps = make_group("flat", 3, rewards=[1.0, 1.0, 1.0]) + make_group("spread", 2, rewards=[0.0, 1.0])
    exps += make_group("alone", 1, rewards=[0.3])
    out, metrics = run("reward_std_filter", exps, threshold=0.1)
    assert {e.group_id for e in out} == {"spread"} and metrics["reward_std_filter/filtered_count"] == 4
    out, _ = run("reward_std_filter", make_group("spread", 2, rewards=[0.0, 1.0]), threshold=0.5)
    assert out == []  # std 0.5 is not above 0.5, as upstream's population std


def test_invalid_reward_filter_drops_missing_and_nan() -> None:
    exps = [make_exp("a", 0, reward=1.0), make_exp("a", 1, reward=math.nan), make_exp("a", 2, reward=None)]
    out, metrics = run("invalid_reward_filter", exps)
    assert [e.run_id for e in out] == [0] and metrics == {"invalid_reward_filter/filtered_count": 2.0}


def test_reward_shaping_mapper_applies_stats_in_order() -> None:
    exps = [make_exp("a", 0, reward=1.0, quality=0.25), make_exp("a", 1, reward=2.0), make_exp("a", 2, reward=None)]
    configs = [{"stats_key": "quality", "op_type": "ADD", "weight": 2.0},
               {"stats_key": "quality", "op_type": "MUL", "weight": 1.0}]
    out, metrics = run("reward_shaping_mapper", exps, reward_shaping_configs=configs)
    assert [e.reward for e in out] == [0.375, 2.0, None]  # (1 + 2 * 0.25) * 0.25; the others lack the stat
    assert out[0].info["raw_reward"] == 1.0
    assert metrics["reward_shaping_mapper/reward_diff/min"] == -0.625
    with pytest.raises(ValueError, match=r"reward_shaping_configs\[0\].op_type: must be one of ADD, SUB, MUL, DIV"):
        Operators([("reward_shaping_mapper", {"reward_shaping_configs": [{"stats_key": "q", "op_type": "POW"}]})])


def test_pass_rate_calculator_reports_the_share_of_tasks_neither_solved_nor_hopeless() -> None:
    exps = make_group("solved", 2, rewards=[1.0, 1.0]) + make_group("half", 2, rewards=[0.0, 1.0])
    exps += make_group("hopeless", 2, rewards=[0.0, 0.0]) + make_group("most", 2, rewards=[1.0, 0.9])
    out, metrics = run("pass_rate_calculator", exps)
    assert out == exps
    assert metrics["pass_rate_calculator/selection/valid_ratio"] == 0.5
    assert metrics["pass_rate_calculator/selection/<1_ratio"] == 0.75
    assert metrics["pass_rate_calculator/selection/>0_ratio"] == 0.75


def test_the_guides_async_operator_runs_in_a_step_write(guide_operator: None, tmp_path: Path) -> None:
    storage = SQLiteStorage(tmp_path / "buffer.db", "exps")
    pipeline = build_pipeline(reward_shaping=[{"name": "guide_reward_filter", "args": {"threshold": 0.5}}],
                              advantage_fn="grpo", group_size=3, storage=storage)
    step = make_group("g0", 3, rewards=[0.0, 1.0, 0.6]) + make_group("g1", 3, rewards=[0.0, 0.1, 0.2])
    stored = pipeline.write_step(step, batch=0)
    assert [(e.group_id, e.run_id) for e in stored] == [("g0", 1), ("g0", 2)]
    assert [e.info["group_size"] for e in stored] == [2, 2]
    assert [round(float(e.advantages[0]), 4) for e in stored] == [0.7071, -0.7071]  # GRPO over what was kept
    assert pipeline.step_metrics() == {"pipeline/guide_reward_filter/filtered_count": 4.0}
    assert pipeline.operator_dropped() == 4
    assert len(storage.get(2, timeout=1)) == 2
    storage.close()


def test_an_operator_that_returns_the_wrong_shape_is_named(guide_operator: None) -> None:
    from trinity.buffer.operators import ExperienceOperator

    @EXPERIENCE_OPERATORS.register_module("list_only")
    class ListOnly(ExperienceOperator):
        def process(self, exps):  # type: ignore[override]
            return exps

    with pytest.raises(TypeError, match=r"ListOnly.process must return \(list of experiences, metrics dict\)"):
        Operators([("list_only", {})]).process([make_exp()])


def test_operator_args_are_checked_when_the_config_loads() -> None:
    with pytest.raises(ConfigError, match=r"operators\[0\].args: experience operator 'reward_filter' "
                                          r"\(RewardFilter\) cannot be built with \{'treshold': 0.1\}"):
        make_plan({"data_processor.experience_pipeline.operators": [{"name": "reward_filter",
                                                                     "args": {"treshold": 0.1}}]})
    with pytest.raises(ConfigError, match=r"operators\[0\].args: .*'clip' has no option 'hgih'"):
        make_plan({"data_processor.experience_pipeline.operators": [{"name": "clip", "args": {"hgih": 1}}]})


def test_the_extending_guides_operator_block_runs(guide_operator: None) -> None:
    """docs/extending.md's operator example, executed as written, filters in the pipeline."""
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "extending.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if "EXPERIENCE_OPERATORS" in b]
    exec(compile(block, "docs/extending.md", "exec"), {"__name__": "trinity.plugins.extending_md"})
    out, metrics = run("my_reward_filter", make_group("g", 3, rewards=[0.0, 0.5, 1.0]), threshold=0.5)
    assert [e.run_id for e in out] == [1, 2] and metrics == {"my_reward_filter/filtered_count": 1.0}


#: develop_operator.md's "Using Auxiliary Models inside Operators" (the reader's parts written out: the message, and
#: what is kept of the judge's answer).
GUIDE_MODEL_OPERATOR = '''
import asyncio
from typing import Dict, List, Tuple

from trinity.buffer.operators import EXPERIENCE_OPERATORS, ExperienceOperatorV1
from trinity.common.experience import Experience


@EXPERIENCE_OPERATORS.register_module("operator_with_model")
class OperatorWithModel(ExperienceOperatorV1):

    async def judge_experience(self, exp: Experience) -> bool:
        messages = [{"role": "user", "content": "Rate this answer: " + (exp.response_text or "")}]
        response = await self.auxiliary_models["judge"][0].chat.completions.create(
            model=self.auxiliary_models["judge"][0].model_path,
            messages=messages,
            max_tokens=3,
        )
        exp.info = {**exp.info, "judged": response.choices[0].message.content}
        return exp

    async def process(self, exps: List[Experience]) -> Tuple[List[Experience], Dict]:
        await asyncio.gather(*(self.judge_experience(exp) for exp in exps))
        return exps, {}
'''


def test_the_guides_operator_asks_the_auxiliary_models(tmp_path: Path) -> None:
    """The judge is the tiny model's real in-process engine serving its OpenAI API over HTTP."""
    from tests.models.test_openai_api import api_options
    from trinity.common.models.client import EngineClient
    from trinity.common.models.hf_engine import HFEngine
    from trinity.common.models.tiny import build_tiny_model

    folder = build_tiny_model(tmp_path / "tiny")
    engine = HFEngine(str(folder), max_batch_size=4, torch_threads=1, max_prompt_tokens=256,
                      openai_api=api_options(folder, history=False))
    saved = dict(EXPERIENCE_OPERATORS._items)
    asked: list[int] = []

    def auxiliary() -> dict[str, list[Any]]:
        asked.append(1)
        return {"judge": [EngineClient(engine).get_openai_async_client()]}

    try:
        exec(compile(GUIDE_MODEL_OPERATOR, "develop_operator.md", "exec"), {"__name__": "trinity.plugins.guide2"})
        stage = Operators([("operator_with_model", {})], auxiliary)
        for step in range(2):  # the async client outlives a step: the stage keeps one event loop for the run
            out = stage.process([make_exp(f"g{step}", run, reward=1.0) for run in range(3)])
            assert len(out) == 3 and all(isinstance(e.info["judged"], str) for e in out)
        assert asked == [1]  # the clients are made once
        stage.close()
    finally:
        EXPERIENCE_OPERATORS._items.clear()
        EXPERIENCE_OPERATORS._items.update(saved)
        engine.shutdown()


def test_the_dry_run_lists_the_operators(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from trinity.cli.main import main

    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path))
    monkeypatch.setenv("TRINITY_TASKSET_PATH", str(root / "examples" / "quickstart" / "tasks" / "train.jsonl"))
    operators = "[{name: reward_filter, args: {threshold: 0.1}}, {name: pass_rate_calculator}]"
    assert main(["run", "--config", str(root / "examples" / "quickstart" / "cpu.yaml"), "--dry-run",
                 "--set", "buffer.explorer_input.eval_tasksets=[]",
                 "--set", f"data_processor.experience_pipeline.operators={operators}"]) == 0
    assert "experience operators, in order: reward_filter (threshold 0.1), pass_rate_calculator" in \
        capsys.readouterr().out
