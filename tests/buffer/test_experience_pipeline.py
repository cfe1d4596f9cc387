"""The experience pipeline: reward shapers, group advantages through the algorithm registry, storage writes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.buffer.factories import ids, make_exp, make_group
from tests.plans import make_plan
from trinity.algorithm.options import UnknownOptionError
from trinity.buffer import (
    REWARD_SHAPERS,
    GroupAdvantages,
    Operators,
    SQLiteStorage,
    buffer_advantage_fn,
    build_pipeline,
    pipeline_for_plan,
)
from trinity.common.config import ConfigError
from trinity.common.experience import Experience
from trinity.utils.registry import UnknownNameError


def shaped(name: str, reward: float, exp: Experience | None = None, **options: float) -> float:
    return float(REWARD_SHAPERS.get(name)(reward, exp or make_exp(), **options))


def test_reward_shapers() -> None:
    assert shaped("scale", 0.5, scale=4.0, shift=-1.0) == 1.0
    assert shaped("clip", 3.0, low=-1.0, high=2.0) == 2.0
    assert shaped("clip", -3.0) == -1.0
    exp = Experience(tokens=list(range(10)), prompt_length=2, action_mask=[1, 1, 1, 1, 1, 1, 0, 0], reward=1.0)
    # 6 generated tokens (tool tokens not counted), 2 free
    assert shaped("length_penalty", 1.0, exp, coef=0.1, free_tokens=2) == pytest.approx(0.6)
    assert shaped("length_penalty", 1.0, exp, coef=0.1, max_penalty=0.25) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="low <= high"):
        shaped("clip", 0.0, low=1.0, high=0.0)


def test_reward_shaping_chain_keeps_the_raw_reward() -> None:
    pipeline = build_pipeline(reward_shaping=[{"name": "scale", "args": {"scale": 10.0}},
                                              {"name": "clip", "args": {"low": -1.0, "high": 5.0}}])
    out = pipeline.process([make_exp("a", 0, reward=1.0), make_exp("a", 1, reward=0.2), make_exp("b", 0, reward=None)])
    assert [e.reward for e in out] == [5.0, 2.0, None]
    assert [e.info.get("raw_reward") for e in out] == [1.0, 0.2, None]
    again = pipeline.process(out[:1])  # shaping twice keeps the original raw reward
    assert again[0].info["raw_reward"] == 1.0


def test_shaping_config_errors_are_one_line() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'scale'"):
        build_pipeline(reward_shaping=[{"name": "scal"}])
    with pytest.raises(UnknownOptionError, match="has no option 'hgih'; did you mean 'high'"):
        Operators([("clip", {"hgih": 1.0})])
    with pytest.raises(ValueError, match=r"reward shaping entry 1 .* must be"):
        build_pipeline(reward_shaping=[{"scale": 2.0}])


def test_grpo_advantages_wait_for_the_whole_group() -> None:
    stage = GroupAdvantages("grpo", group_size=3)
    members = [
        make_exp("g", 0, reward=0.0, response=2),
        make_exp("g", 1, reward=1.0, response=5),
        make_exp("g", 2, reward=2.0, response=3),
    ]
    assert stage.process([*members[:2], make_exp("h", 0, reward=1.0)]) == []
    assert stage.held() == 3
    out = stage.process(members[2:])
    assert ids(out) == [("g", 0), ("g", 1), ("g", 2)]
    assert stage.held() == 1  # "h" still waits
    # mean 1, sample std 1: advantages -1, 0, 1 on every response token
    for exp, value in zip(out, (-1.0, 0.0, 1.0), strict=True):
        assert exp.advantages is not None and exp.advantages.shape == (exp.response_length,)
        assert torch.allclose(exp.advantages, torch.full((exp.response_length,), value), atol=1e-4)
        assert torch.equal(exp.returns, exp.advantages)
        assert exp.info["group_size"] == 3
    assert members[0].advantages is None  # inputs are not modified


def test_advantages_respect_the_action_mask_and_options() -> None:
    stage = GroupAdvantages("grpo", {"std_normalize": False}, group_size=2)
    a = Experience(tokens=list(range(6)), prompt_length=2, action_mask=[1, 0, 1, 1], reward=3.0, group_id="m")
    b = Experience(tokens=list(range(5)), prompt_length=2, reward=1.0, group_id="m", run_id=1)
    out = stage.process([a, b])
    assert out[0].advantages.tolist() == [1.0, 0.0, 1.0, 1.0]  # no advantage on the tool token
    assert out[1].advantages.tolist() == [-1.0, -1.0, -1.0]


def test_rloo_and_flush_of_an_incomplete_group() -> None:
    stage = GroupAdvantages("rloo", group_size=4)
    assert stage.process(make_group("f", 3, rewards=[1.0, 2.0, 6.0])) == []
    out = stage.flush()
    # leave-one-out baselines over the three members present
    assert [round(float(e.advantages[0]), 4) for e in out] == [-3.0, -1.5, 4.5]
    assert [e.info["group_size"] for e in out] == [3, 3, 3]
    assert stage.held() == 0 and stage.flush() == []


def test_advantage_errors() -> None:
    with pytest.raises(UnknownNameError, match="unknown advantage function 'grp'"):
        GroupAdvantages("grp", group_size=2)
    with pytest.raises(UnknownOptionError, match="has no option 'std'"):
        GroupAdvantages("grpo", {"std": True}, group_size=2)
    stage = GroupAdvantages("grpo", group_size=2)
    with pytest.raises(ValueError, match="group 'x' has no reward"):
        stage.process([make_exp("x", 0), make_exp("x", 1, reward=None)])


def test_pipeline_shapes_then_computes_and_writes_to_storage(tmp_path: Path) -> None:
    storage = SQLiteStorage(tmp_path / "buf.sqlite")
    pipeline = build_pipeline(
        reward_shaping=[{"name": "scale", "args": {"scale": 2.0}}], advantage_fn="grpo",
        advantage_options={"std_normalize": False}, group_size=2, storage=storage,
    )
    assert pipeline.write(make_group("a", 2, rewards=[1.0, 0.0])[:1]) == 0  # held, nothing written
    assert storage.total() == 0 and pipeline.held() == 1
    assert pipeline.write(make_group("a", 2, rewards=[1.0, 0.0])[1:] + make_group("b", 2)[:1]) == 2
    stored = storage.get(2)
    assert [e.reward for e in stored] == [2.0, 0.0]
    assert [float(e.advantages[0]) for e in stored] == [1.0, -1.0]  # from the shaped rewards
    assert pipeline.finish() == 1  # the incomplete "b" goes out at the end
    last = storage.get(1)[0]
    assert (last.group_id, last.info["group_size"], float(last.advantages[0])) == ("b", 1, 0.0)
    with pytest.raises(ValueError, match="no storage"):
        build_pipeline().write([make_exp()])


def training(**algorithm: object) -> object:
    """The training plan (``plan.algorithm``) of a run with these ``algorithm.*`` settings."""
    overrides: dict[str, object] = {f"algorithm.{key}": value for key, value in algorithm.items()}
    if algorithm.get("algorithm_type") in ("sft", "dpo"):
        overrides.update({"mode": "train", "buffer.trainer_input.experience_buffer": {
            "storage_type": "file", "path": "data.jsonl"}})
    return make_plan(overrides).algorithm


def test_the_algorithm_decides_where_advantages_are_computed() -> None:
    assert buffer_advantage_fn(training(algorithm_type="grpo")) == "grpo"
    assert buffer_advantage_fn(training(algorithm_type="grpo", advantage_fn="rloo")) == "rloo"
    assert buffer_advantage_fn(training(algorithm_type="ppo")) == ""  # gae needs the critic
    assert buffer_advantage_fn(training(algorithm_type="sft")) == ""
    # a KL reward penalty needs the reference model (in the trainer) before the advantages: never in the buffer
    assert buffer_advantage_fn(training(algorithm_type="rloo", kl_penalty_fn="k1")) == ""
    # algorithms that compute their (group-local) advantages in the trainer keep them there
    assert buffer_advantage_fn(training(algorithm_type="rloo")) == ""
    assert buffer_advantage_fn(training(algorithm_type="grpo_verl")) == ""
    # grpo computes in the buffer, where upstream ignores a reward penalty: the config refuses it
    with pytest.raises(ConfigError, match=r"algorithm\.kl_penalty_fn: algorithm 'grpo' computes no advantages in "
                                          r"the trainer"):
        training(algorithm_type="grpo", kl_penalty_fn="k1")
    with pytest.raises(ConfigError, match="unknown algorithm 'grpoo'"):
        training(algorithm_type="grpoo")


def test_pipeline_for_plan_uses_repeat_times_options_and_operators() -> None:
    plan = make_plan({
        "algorithm.repeat_times": 2, "algorithm.advantage_fn_args": {"std_normalize": False},
        "data_processor.experience_pipeline.operators": [{"name": "scale", "args": {"shift": 1.0}}],
    })
    pipeline = pipeline_for_plan(plan)
    out = pipeline.process(make_group("p", 2, rewards=[3.0, 1.0]))
    assert [e.reward for e in out] == [4.0, 2.0]
    assert [float(e.advantages[0]) for e in out] == [1.0, -1.0]
    assert pipeline_for_plan(make_plan({"algorithm.algorithm_type": "ppo"})).processors == []
    with pytest.raises(ConfigError, match=r"operators\[0\]\.name: .*'scal'"):
        make_plan({"data_processor.experience_pipeline.operators": [{"name": "scal"}]})


def test_pipeline_for_plan_records_every_experience_before_the_operators(tmp_path: Path) -> None:
    recorder = SQLiteStorage(tmp_path / "explored.sqlite")
    storage = SQLiteStorage(tmp_path / "buf.sqlite")
    plan = make_plan({"algorithm.algorithm_type": "ppo",
                      "data_processor.experience_pipeline.operators": [{"name": "scale", "args": {"scale": 2.0}}]})
    pipeline = pipeline_for_plan(plan, storage=storage, recorder=recorder)
    assert pipeline.write(make_group("r", 2, rewards=[1.0, 3.0])) == 2
    assert [e.reward for e in storage.get(2)] == [2.0, 6.0]
    assert [e.reward for e in recorder.get(2)] == [1.0, 3.0]
