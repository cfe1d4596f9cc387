"""Algorithm types: upstream Trinity-RFT 0.5's defaults, spec checks, and the package surface."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from trinity import algorithm
from trinity.algorithm.algorithms import AlgorithmSpec, register_algorithm
from trinity.algorithm.catalog import ALGORITHMS
from trinity.utils.registry import DuplicateNameError, UnknownNameError

# Upstream's AlgorithmType.default_config() over its validator's global defaults (sample_strategy warmup,
# policy_loss_fn ppo, advantage_fn ppo, kl_penalty_fn none, kl_loss_fn k2, entropy_loss_fn default), and the
# class attributes use_critic, use_reference, compute_advantage_in_trainer, schema. Our advantage_fn is None
# (advantage_in "none") where upstream's resolved "ppo" is never computed: sft, dpo, raft.
# name: (policy loss, advantage, where, kl penalty, kl loss, entropy, sample strategy, critic, reference, schema)
UPSTREAM = {
    "sft": ("sft", None, "none", "none", "none", "none", "default", False, False, "sft"),
    "ppo": ("ppo", "ppo", "trainer", "none", "k2", "default", "default", True, True, "experience"),
    "grpo": ("ppo", "grpo", "buffer", "none", "k2", "default", "default", False, True, "experience"),
    "reinforceplusplus": (
        "ppo", "reinforceplusplus", "trainer", "none", "k2", "default", "default", False, True, "experience"
    ),
    "rloo": ("ppo", "rloo", "trainer", "none", "k2", "default", "default", False, True, "experience"),
    "opmd": ("opmd", "opmd", "buffer", "none", "k2", "default", "default", False, True, "experience"),
    "asymre": ("opmd", "asymre", "buffer", "none", "none", "none", "default", False, False, "experience"),
    "dpo": ("dpo", None, "none", "none", "k2", "default", "default", False, True, "dpo"),
    "topr": ("topr", "reinforce", "buffer", "none", "k2", "default", "default", False, True, "experience"),
    "cispo": ("cispo", "grpo", "buffer", "none", "k2", "default", "default", False, True, "experience"),
    "gspo": ("gspo", "grpo", "buffer", "none", "k2", "default", "default", False, True, "experience"),
    "sapo": ("sapo", "grpo", "buffer", "none", "k2", "default", "default", False, True, "experience"),
    "mix": ("mix", "grpo", "buffer", "none", "k2", "mix", "mix", False, True, "experience"),
    "mix_chord": ("mix_chord", "grpo", "buffer", "none", "k2", "mix", "mix", False, True, "experience"),
    "raft": ("sft", None, "none", "none", "none", "none", "default", False, False, "experience"),
    "sppo": ("sppo", "opmd", "buffer", "none", "none", "none", "default", False, False, "experience"),
    "rec": ("rec", "rec", "buffer", "none", "k2", "default", "default", False, True, "experience"),
    "multi_step_grpo": (
        "ppo", "step_wise_grpo", "buffer", "none", "k2", "default", "default", False, True, "experience"
    ),
    "on_policy_distill": (
        "ppo", "on_policy_distill", "trainer", "none", "none", "none", "default", False, False, "experience"
    ),
    "jsd": ("ppo", "jsd", "trainer", "none", "none", "none", "default", False, False, "experience"),
    "grpo_verl": ("ppo", "grpo", "trainer", "none", "k2", "default", "default", False, True, "experience"),
}  # fmt: skip


def test_every_upstream_algorithm_type_is_registered() -> None:
    assert set(ALGORITHMS.names()) == set(UPSTREAM) | {"reinforce_plus_plus"}


@pytest.mark.parametrize("name", sorted(UPSTREAM))
def test_each_type_has_upstreams_defaults(name: str) -> None:
    spec = ALGORITHMS.get(name)
    assert isinstance(spec, AlgorithmSpec)
    actual = (
        spec.policy_loss_fn, spec.advantage_fn, spec.advantage_in, spec.kl_penalty_fn, spec.kl_loss_fn,
        spec.entropy_loss_fn, spec.sample_strategy, spec.use_critic, spec.use_reference, spec.schema,
    )  # fmt: skip
    assert actual == UPSTREAM[name]
    assert spec.train_only == (name in ("sft", "dpo"))


def test_distillation_types_carry_upstreams_advantage_args() -> None:
    assert dict(ALGORITHMS.get("on_policy_distill").advantage_fn_args) == {"kl_coef": 1.0}
    assert dict(ALGORITHMS.get("jsd").advantage_fn_args) == {"kl_coef": 1.0, "lambda_coef": 0.5}
    assert ALGORITHMS.get("grpo").advantage_fn_args is None


def test_dpo_requires_a_kl_loss_and_keeps_its_pairs_together() -> None:
    dpo = ALGORITHMS.get("dpo")
    assert dpo.kl_loss_required and not dpo.can_balance_batch
    assert not any(ALGORITHMS.get(name).kl_loss_required for name in UPSTREAM if name != "dpo")


def test_specs_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        ALGORITHMS.get("grpo").use_critic = True  # type: ignore[misc]


def _spec(**changes: object) -> AlgorithmSpec:
    base = {f.name: getattr(ALGORITHMS.get("grpo"), f.name) for f in dataclasses.fields(AlgorithmSpec)}
    base["name"] = "custom"
    base.update(changes)
    return AlgorithmSpec(**base)


def test_a_spec_naming_an_unknown_function_fails_at_construction() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'gspo'"):
        _spec(policy_loss_fn="gsp0")
    with pytest.raises(UnknownNameError, match="did you mean 'rloo'"):
        _spec(advantage_fn="rlo")
    with pytest.raises(UnknownNameError, match="KL function"):
        _spec(kl_loss_fn="k7")
    with pytest.raises(ValueError, match="sample strategy"):
        _spec(sample_strategy="fifo")


def test_advantage_place_and_function_go_together() -> None:
    with pytest.raises(ValueError, match="advantage_in must be 'none' exactly"):
        _spec(advantage_fn=None)
    with pytest.raises(ValueError, match="advantage_in must be 'none' exactly"):
        _spec(advantage_in="none")


def test_a_type_cannot_be_registered_twice_but_a_new_one_can(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ALGORITHMS, "_items", dict(ALGORITHMS._items))  # registrations end with the test
    with pytest.raises(DuplicateNameError):
        register_algorithm(_spec(name="grpo"))
    assert ALGORITHMS.get("grpo").advantage_in == "buffer"
    custom = register_algorithm(_spec(name="test_only_custom_grpo", policy_loss_fn="cispo"))
    assert ALGORITHMS.get("test_only_custom_grpo") is custom


def test_package_exports_resolve() -> None:
    for name in algorithm.__all__:
        assert getattr(algorithm, name) is not None
    with pytest.raises(AttributeError):
        _ = algorithm.no_such_name  # type: ignore[attr-defined]


def test_no_device_is_named_in_the_algorithm_code() -> None:
    source_dir = Path(algorithm.__file__).parent
    pattern = re.compile(r"\b(cuda|npu|xpu|mps|hip)\b|\.cuda\(|device=\"|device='", re.IGNORECASE)
    offenders = [
        f"{path.relative_to(source_dir)}:{number}"
        for path in sorted(source_dir.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []
