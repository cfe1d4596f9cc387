"""Algorithm pieces written in upstream Trinity-RFT's class shapes (develop_algorithm.md) run in trinity-rft.

The guide's OPMD example (tests/algorithm/guide_opmd_plugin.py) is executed
as a plugin would be, into the real registries (restored afterwards); its
classes must compute what trinity-rft's built-in ``opmd`` pieces compute, the
plan must read its ``AlgorithmType``, and half-written classes must fail in
one line when the config is resolved.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.buffer.factories import make_group
from trinity.algorithm.catalog import ADVANTAGE_FNS, ALGORITHMS, ENTROPY_LOSS_FNS, KL_FNS, POLICY_LOSS_FNS
from trinity.algorithm.entropy import entropy_loss
from trinity.algorithm.kl import compute_kl
from trinity.algorithm.options import UnknownOptionError
from trinity.algorithm.policy_loss import PolicyLossInputs, compute_policy_loss
from trinity.buffer.pipeline import GroupAdvantages
from trinity.common.config.schema.algorithm import AlgorithmConfig
from trinity.common.experience import group_by
from trinity.trainer.plan import PlanError, resolve_plan

GUIDE = Path(__file__).with_name("guide_opmd_plugin.py")
REGISTRIES = (ADVANTAGE_FNS, POLICY_LOSS_FNS, KL_FNS, ENTROPY_LOSS_FNS, ALGORITHMS)


@pytest.fixture
def registries() -> Iterator[None]:
    """Let a test register into the real registries; every entry it adds is gone afterwards."""
    saved = [dict(r._items) for r in REGISTRIES]
    try:
        yield
    finally:
        for registry, items in zip(REGISTRIES, saved, strict=True):
            registry._items.clear()
            registry._items.update(items)


@pytest.fixture
def guide(registries: None) -> dict[str, Any]:
    """The guide's plugin, executed as the plugin loader would (its registrations included)."""
    namespace: dict[str, Any] = {"__name__": "trinity.plugins.guide_opmd_plugin"}
    exec(compile(GUIDE.read_text(), str(GUIDE), "exec"), namespace)
    return namespace


def plan_of(**settings: Any) -> Any:
    return resolve_plan(AlgorithmConfig(**settings))


def test_upstream_names_are_the_projects_registries_and_import_without_torch() -> None:
    import subprocess
    import sys

    code = ("import sys, trinity.algorithm as a\n"
            "from trinity.algorithm.advantage_fn import ADVANTAGE_FN, GroupAdvantage\n"
            "from trinity.algorithm.policy_loss_fn import POLICY_LOSS_FN, PolicyLossFn\n"
            "assert a.ADVANTAGE_FN is a.ADVANTAGE_FNS and a.POLICY_LOSS_FN is a.POLICY_LOSS_FNS\n"
            "assert a.KL_FN is a.KL_FNS and a.ENTROPY_LOSS_FN is a.ENTROPY_LOSS_FNS\n"
            "assert a.ALGORITHM_TYPE is a.ALGORITHMS\n"
            "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_guides_group_advantage_equals_the_builtin_opmd(guide: dict[str, Any]) -> None:
    rewards = [[0.0, 1.0, 1.0, 0.5], [2.0, 0.0, 1.0, 1.0]]
    groups = [make_group(f"g{i}", 4, rewards=r) for i, r in enumerate(rewards)]
    theirs = GroupAdvantages("guide_opmd", {"opmd_baseline": "mean", "tau": 1.0}, group_size=4)
    ours = GroupAdvantages("opmd", {"opmd_baseline": "mean", "tau": 1.0}, group_size=4)
    got = theirs.process([e for g in groups for e in g])
    want = ours.process([e for g in groups for e in g])
    assert [(e.group_id, e.run_id) for e in got] == [(e.group_id, e.run_id) for e in want]
    for a, b in zip(got, want, strict=True):
        assert torch.allclose(a.advantages, b.advantages, atol=1e-6) and torch.allclose(a.returns, b.returns)
        assert a.info["group_size"] == 4
    # the groups the guide's group_by found are the task groups, though the experiences came without an eid
    assert got[0].advantages[0].item() == pytest.approx(0.0 - 0.625)


def test_group_by_reads_upstreams_ids_and_falls_back_to_the_group() -> None:
    exps = make_group("a", 2) + make_group("b", 1)
    assert {k: len(v) for k, v in group_by(exps, "task").items()} == {"a": 2, "b": 1}
    with pytest.raises(ValueError, match="id_type must be one of task, run, step"):
        group_by(exps, "batch")


def test_the_guides_policy_loss_equals_the_builtin_opmd(guide: dict[str, Any]) -> None:
    torch.manual_seed(0)
    logprobs = torch.randn(3, 5, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 1, 0, 0]], dtype=torch.bool)
    inputs = PolicyLossInputs(logprobs=logprobs, response_mask=mask, advantages=torch.randn(3, 5),
                              old_logprobs=torch.randn(3, 5))
    for mode in ("token-mean", "seq-mean-token-mean"):
        theirs, metrics = compute_policy_loss("guide_opmd", inputs, tau=0.5, loss_agg_mode=mode)
        ours, _ = compute_policy_loss("opmd", inputs, tau=0.5, loss_agg_mode=mode)
        assert theirs.item() == pytest.approx(ours.item(), abs=1e-7)
        assert metrics == {"opmd_loss": pytest.approx(ours.item(), abs=1e-7)}
    (grad,) = torch.autograd.grad(theirs, logprobs)
    assert grad[0, 3] == 0 and grad[2, 0] == 0 and grad[1, 4] != 0  # padding takes no gradient


def test_the_plan_reads_the_guides_algorithm_type(guide: dict[str, Any]) -> None:
    plan = plan_of(algorithm_type="guide_opmd")
    assert (plan.policy_loss_fn, plan.advantage_fn, plan.advantage_in) == ("guide_opmd", "guide_opmd", "buffer")
    assert plan.advantage_options == {"opmd_baseline": "mean", "tau": 1.0}  # the class's default_args()
    assert plan.policy_loss_options == {"tau": 1.0, "loss_agg_mode": "token-mean"}
    assert plan.use_reference and not plan.use_critic and plan.kl_loss is not None
    assert not plan.needs_old_logprobs  # the guide's loss names logprob, action_mask, advantages only
    # the config's own arguments still win, and are checked against the constructor
    assert plan_of(algorithm_type="guide_opmd", advantage_fn_args={"tau": 0.5}).advantage_options == {"tau": 0.5}
    with pytest.raises(UnknownOptionError, match=r"'guide_opmd' \(OPMDPolicyLossFn\) cannot be built .*taus"):
        plan_of(algorithm_type="guide_opmd", policy_loss_fn_args={"taus": 1.0})


def test_an_advantage_class_cannot_run_where_the_trainer_computes_advantages(guide: dict[str, Any]) -> None:
    with pytest.raises(PlanError, match="advantage class, which runs in the buffer"):
        plan_of(algorithm_type="ppo", advantage_fn="guide_opmd")
    assert plan_of(algorithm_type="grpo", advantage_fn="guide_opmd").advantage_in == "buffer"


def test_a_loss_asking_for_a_tensor_the_trainer_lacks_fails_at_plan_time(registries: None) -> None:
    from trinity.algorithm.policy_loss_fn import POLICY_LOSS_FN, PolicyLossFn

    @POLICY_LOSS_FN.register_module("needs_values")
    class NeedsValues(PolicyLossFn):
        def __call__(self, logprob, values, **kwargs):  # type: ignore[override]
            return logprob.sum(), {}

        @classmethod
        def default_args(cls) -> dict:
            return {}

    with pytest.raises(PlanError, match=r"asks for \['values'\], which the trainer does not pass"):
        plan_of(algorithm_type="grpo", policy_loss_fn="needs_values")


def test_a_ppo_style_loss_class_reads_old_logprobs_and_gets_them(registries: None) -> None:
    from trinity.algorithm.policy_loss_fn import POLICY_LOSS_FN, PolicyLossFn
    from trinity.algorithm.utils import aggregate_loss

    @POLICY_LOSS_FN.register_module("ratio_loss")
    class RatioLoss(PolicyLossFn):
        def __init__(self, backend: str = "verl", clip: float = 0.2, loss_agg_mode: str = "token-mean") -> None:
            super().__init__(backend)
            self.clip, self.mode = clip, loss_agg_mode

        def __call__(self, logprob, old_logprob, action_mask, advantages, **kwargs):  # type: ignore[override]
            ratio = torch.exp(logprob - old_logprob).clamp(1 - self.clip, 1 + self.clip)
            return aggregate_loss(-advantages * ratio, action_mask, self.mode), {"seen_backend": 1.0}

        @classmethod
        def default_args(cls) -> dict:
            return {"clip": 0.2, "loss_agg_mode": "token-mean"}

    plan = plan_of(algorithm_type="grpo", policy_loss_fn="ratio_loss")
    assert plan.needs_old_logprobs
    logprobs = torch.zeros(2, 3, requires_grad=True)
    inputs = PolicyLossInputs(logprobs=logprobs, response_mask=torch.ones(2, 3, dtype=torch.bool),
                              advantages=torch.ones(2, 3), old_logprobs=torch.zeros(2, 3))
    loss, metrics = compute_policy_loss("ratio_loss", inputs, **plan.policy_loss_options)
    assert loss.item() == pytest.approx(-1.0) and metrics == {"seen_backend": 1.0}


def test_kl_and_entropy_classes_run_where_the_builtins_do(registries: None) -> None:
    from trinity.algorithm.entropy_loss_fn import ENTROPY_LOSS_FN, EntropyLossFn
    from trinity.algorithm.kl_fn import KL_FN, KLFn
    from trinity.algorithm.utils import aggregate_loss

    @KL_FN.register_module("my_k1")
    class MyK1(KLFn):
        def calculate_kl(self, logprob, ref_logprob):  # type: ignore[override]
            return logprob - ref_logprob

    @ENTROPY_LOSS_FN.register_module("my_entropy")
    class MyEntropy(EntropyLossFn):
        def __init__(self, entropy_coef: float) -> None:
            self.entropy_coef = entropy_coef

        def __call__(self, entropy, action_mask, loss_agg_mode="token-mean", **kwargs):  # type: ignore[override]
            value = aggregate_loss(entropy, action_mask, loss_agg_mode=loss_agg_mode)
            return value * self.entropy_coef, {"my_entropy": value.item()}

    logprobs, ref = torch.randn(2, 4), torch.randn(2, 4)
    assert torch.allclose(compute_kl(logprobs, ref, "my_k1"), compute_kl(logprobs, ref, "k1"))
    entropy, mask = torch.rand(2, 4), torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    theirs, metrics = entropy_loss("my_entropy", entropy, mask, entropy_coef=0.1, loss_agg_mode="token-mean")
    ours, _ = entropy_loss("default", entropy, mask, entropy_coef=0.1, loss_agg_mode="token-mean")
    assert theirs.item() == pytest.approx(ours.item(), abs=1e-7)
    assert metrics["my_entropy"] == pytest.approx(ours.item() / 0.1, abs=1e-6)
    plan = plan_of(algorithm_type="grpo_verl", kl_penalty_fn="my_k1", kl_loss_fn="my_k1",
                   entropy_loss_fn="my_entropy", entropy_loss_fn_args={"entropy_coef": 0.01})
    assert plan.kl_penalty is not None and plan.kl_penalty.fn == "my_k1" and plan.entropy_fn == "my_entropy"


def test_an_algorithm_type_with_a_bad_default_config_is_one_line(registries: None) -> None:
    from trinity.algorithm import ALGORITHM_TYPE, AlgorithmType

    @ALGORITHM_TYPE.register_module("typo_algorithm")
    class Typo(AlgorithmType):
        @classmethod
        def default_config(cls) -> dict:
            return {"advantage_fn": "grpo", "policy_loss": "ppo"}

    with pytest.raises(PlanError, match=r"algorithm.algorithm_type: .*unknown keys \['policy_loss'\]"):
        plan_of(algorithm_type="typo_algorithm")


def test_an_advantage_class_that_sets_no_advantages_is_named(registries: None) -> None:
    from trinity.algorithm.advantage_fn import ADVANTAGE_FN, GroupAdvantage

    @ADVANTAGE_FN.register_module("forgetful")
    class Forgetful(GroupAdvantage):
        def group_experiences(self, exps):  # type: ignore[override]
            return group_by(exps, "task")

        def calculate_group_advantage(self, group_id, exps):  # type: ignore[override]
            return exps, {}

    stage = GroupAdvantages("forgetful", {}, group_size=2)
    with pytest.raises(ValueError, match=r"'forgetful' \(Forgetful\) left experience 0 of group 'g' with advantages "
                                         r"of shape None; it must set exp.advantages"):
        stage.process(make_group("g", 2))


def test_the_extending_guides_algorithm_block_runs(registries: None) -> None:
    """docs/extending.md's algorithm example, executed as written: its plan, advantages and loss."""
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "extending.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.DOTALL) if "ALGORITHM_TYPE" in b]
    exec(compile(block, "docs/extending.md", "exec"), {"__name__": "trinity.plugins.extending_md"})
    plan = plan_of(algorithm_type="my_opmd")
    assert (plan.advantage_fn, plan.policy_loss_fn, plan.advantage_in) == ("my_opmd", "my_opmd", "buffer")
    stage = GroupAdvantages("my_opmd", plan.advantage_options, group_size=2)
    got = stage.process(make_group("g", 2, rewards=[0.0, 1.0]))
    assert [e.advantages[0].item() for e in got] == [-0.5, 0.5]
    inputs = PolicyLossInputs(logprobs=torch.full((1, 2), -1.0), response_mask=torch.ones(1, 2, dtype=torch.bool),
                              advantages=torch.ones(1, 2))
    loss, metrics = compute_policy_loss("my_opmd", inputs, **plan.policy_loss_options)
    assert loss.item() == pytest.approx(0.5) and metrics == {"my_opmd_loss": pytest.approx(1.0)}
