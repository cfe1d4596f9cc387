"""Algorithm type descriptions and the package surface."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from trinity import algorithm
from trinity.algorithm.advantage import ADVANTAGE_FNS
from trinity.algorithm.aggregation import LOSS_AGGREGATIONS
from trinity.algorithm.algorithms import ALGORITHMS, AlgorithmSpec
from trinity.algorithm.kl import KL_FNS
from trinity.algorithm.policy_loss import POLICY_LOSS_FNS
from trinity.common.registry import DuplicateNameError, UnknownNameError


def test_the_four_algorithm_types_are_registered() -> None:
    assert ALGORITHMS.names() == ["dpo", "grpo", "ppo", "sft"]


@pytest.mark.parametrize("name", ["dpo", "grpo", "ppo", "sft"])
def test_every_name_an_algorithm_refers_to_exists(name: str) -> None:
    spec = ALGORITHMS.get(name)
    assert spec.name == name
    assert spec.policy_loss_fn in POLICY_LOSS_FNS
    assert spec.loss_aggregation in LOSS_AGGREGATIONS
    assert spec.advantage_fn is None or spec.advantage_fn in ADVANTAGE_FNS
    assert spec.kl_fn is None or spec.kl_fn in KL_FNS


def test_the_defaults_of_each_type() -> None:
    grpo, ppo = ALGORITHMS.get("grpo"), ALGORITHMS.get("ppo")
    sft, dpo = ALGORITHMS.get("sft"), ALGORITHMS.get("dpo")
    assert (grpo.advantage_fn, grpo.policy_loss_fn, grpo.use_critic, grpo.kl_target) == ("grpo", "ppo", False, "loss")
    assert grpo.requires_groups and grpo.repeat_times >= 2 and grpo.use_reference
    assert (ppo.advantage_fn, ppo.policy_loss_fn, ppo.use_critic, ppo.kl_target) == ("gae", "ppo", True, "reward")
    assert not ppo.requires_groups and ppo.repeat_times == 1
    assert (sft.advantage_fn, sft.policy_loss_fn, sft.use_reference, sft.kl_target) == (None, "sft", False, "none")
    assert (dpo.advantage_fn, dpo.policy_loss_fn, dpo.use_reference, dpo.kl_target) == (None, "dpo", True, "none")
    assert grpo.kl_coef > 0 and ppo.kl_coef > 0 and sft.kl_coef == 0 and dpo.kl_coef == 0
    assert not sft.uses_rollouts and not dpo.uses_rollouts and grpo.uses_rollouts and ppo.uses_rollouts


def test_specs_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        ALGORITHMS.get("grpo").repeat_times = 2  # type: ignore[misc]


def _spec(**changes: object) -> AlgorithmSpec:
    base = dataclasses.asdict(ALGORITHMS.get("grpo"))
    base["name"] = "custom"
    base.update(changes)
    return AlgorithmSpec(**base)


def test_a_spec_naming_an_unknown_function_fails_at_construction() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'gspo'"):
        _spec(policy_loss_fn="gsp0")
    with pytest.raises(UnknownNameError, match="did you mean 'rloo'"):
        _spec(advantage_fn="rlo")


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"repeat_times": 1}, "repeat_times >= 2"),
        ({"use_reference": False}, "use_reference=True"),
        ({"kl_target": "none"}, "kl_fn must be given exactly"),
        ({"kl_coef": -0.1}, "kl_coef must be >= 0"),
    ],
)
def test_inconsistent_specs_are_rejected(changes: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _spec(**changes)


def test_a_type_cannot_be_registered_twice() -> None:
    with pytest.raises(DuplicateNameError):
        algorithm.register_algorithm(_spec(name="grpo", repeat_times=4))
    assert ALGORITHMS.get("grpo").repeat_times == 8


def test_package_exports_resolve() -> None:
    for name in algorithm.__all__:
        assert getattr(algorithm, name) is not None


def test_no_device_is_named_in_the_algorithm_code() -> None:
    source_dir = Path(algorithm.__file__).parent
    pattern = re.compile(r"\b(cuda|npu|xpu|mps|hip)\b|\.cuda\(|device=\"|device='", re.IGNORECASE)
    offenders = [
        f"{path.name}:{number}"
        for path in sorted(source_dir.glob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []
