"""Resolving an upstream-shaped ``algorithm`` section into a TrainingPlan: defaults, upstream's rules, errors."""

from __future__ import annotations

from typing import Any

import pytest

from trinity.algorithm.options import UnknownOptionError
from trinity.common.config.schema.algorithm import AlgorithmConfig
from trinity.trainer.plan import GroupFilter, KLTerm, PlanError, TrainingPlan, check_mode, resolve_plan
from trinity.utils.registry import UnknownNameError

K2 = KLTerm(fn="k2", coef=0.001)

# name: (policy loss, advantage, where, kl loss, entropy fn, reference, critic, policy units, needs)
# "needs" lists the plan's other flags that are on: old log-probs (o), teacher log-probs (t), pairs (p),
# expert rows (e), global step (s). Upstream's default entropy_coef is 0, so no entropy term is on by default.
DEFAULTS: dict[str, tuple[Any, ...]] = {
    "sft": ("sft", None, "none", None, None, False, False, "token", ""),
    "ppo": ("ppo", "ppo", "trainer", K2, None, True, True, "token", "o"),
    "grpo": ("ppo", "grpo", "buffer", K2, None, True, False, "token", "o"),
    "reinforceplusplus": ("ppo", "reinforceplusplus", "trainer", K2, None, True, False, "token", "o"),
    "reinforce_plus_plus": ("ppo", "reinforceplusplus", "trainer", K2, None, True, False, "token", "o"),
    "rloo": ("ppo", "rloo", "trainer", K2, None, True, False, "token", "o"),
    "opmd": ("opmd", "opmd", "buffer", K2, None, True, False, "token", ""),
    "asymre": ("opmd", "asymre", "buffer", None, None, False, False, "token", ""),
    "dpo": ("dpo", None, "none", K2, None, True, False, "row", "p"),
    "topr": ("topr", "reinforce", "buffer", K2, None, True, False, "token", "o"),
    "cispo": ("cispo", "grpo", "buffer", K2, None, True, False, "token", "o"),
    "gspo": ("gspo", "grpo", "buffer", K2, None, True, False, "token", "o"),  # token-mean: see below
    "sapo": ("sapo", "grpo", "buffer", K2, None, True, False, "token", "o"),
    "mix": ("mix", "grpo", "buffer", K2, None, True, False, "step", "oe"),
    "mix_chord": ("mix_chord", "grpo", "buffer", K2, None, True, False, "step", "oes"),
    "raft": ("sft", None, "none", None, None, False, False, "token", ""),
    "sppo": ("sppo", "opmd", "buffer", None, None, False, False, "token", "o"),
    "rec": ("rec", "rec", "buffer", K2, None, True, False, "token", "o"),
    "multi_step_grpo": ("ppo", "step_wise_grpo", "buffer", K2, None, True, False, "token", "o"),
    "on_policy_distill": ("ppo", "on_policy_distill", "trainer", None, None, False, False, "token", "ot"),
    "jsd": ("ppo", "jsd", "trainer", None, None, False, False, "token", "ot"),
    "grpo_verl": ("ppo", "grpo", "trainer", K2, None, True, False, "token", "o"),
}


def plan(**fields: Any) -> TrainingPlan:
    return resolve_plan(AlgorithmConfig(**fields))


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_every_type_resolves_with_upstreams_defaults(name: str) -> None:
    p = plan(algorithm_type=name)
    needs = "".join(
        flag for flag, on in (
            ("o", p.needs_old_logprobs), ("t", p.needs_teacher_logprobs), ("p", p.paired), ("e", p.expert_rows),
            ("s", p.needs_global_step),
        ) if on
    )  # fmt: skip
    actual = (
        p.policy_loss_fn, p.advantage_fn, p.advantage_in, p.kl_loss, p.entropy_fn, p.use_reference, p.use_critic,
        p.policy_units, needs,
    )  # fmt: skip
    assert actual == DEFAULTS[name]
    assert p.kl_penalty is None and p.loss_agg_mode == "token-mean" and p.repeat_times == 1
    assert p.entropy_coef == 0.0


def test_default_options_are_upstreams_default_args() -> None:
    grpo = plan(algorithm_type="grpo")
    assert grpo.policy_loss_options == {
        "clip_range": 0.2, "clip_ratio_c": 3.0, "loss_agg_mode": "token-mean", "enable_sequence_masking": False,
        "delta_sequence_masking": 0.1, "fallback_to_policy_gradient": False,
    }  # fmt: skip
    assert grpo.advantage_options == {
        "epsilon": 1e-6, "std_threshold": None, "duplicate_experiences": False, "rank_penalty": None,
        "std_cal_level": "group",
    }  # fmt: skip
    assert grpo.sample_strategy == "default" and grpo.sample_strategy_options == {}
    # REC's default_args differ from its signature's defaults for the ring primes, as upstream
    rec = plan(algorithm_type="rec")
    assert (rec.policy_loss_options["epsilon_low_prime"], rec.policy_loss_options["epsilon_high_prime"]) == (0.6, 2)
    distill = plan(algorithm_type="jsd")
    assert distill.advantage_options == {"kl_coef": 1.0, "lambda_coef": 0.5}
    mix = plan(algorithm_type="mix")
    assert mix.sample_strategy_options == {"expert_data_ratio": 0.5, "sft_dataset_name": "sft_dataset"}


def test_a_given_mapping_replaces_the_default_args() -> None:
    p = plan(algorithm_type="grpo", policy_loss_fn_args={"clip_range_low": 0.2, "clip_range_high": 0.28})
    assert p.policy_loss_options == {"clip_range_low": 0.2, "clip_range_high": 0.28}  # the loss's defaults fill in
    opd = plan(algorithm_type="on_policy_distill", advantage_fn_args={"kl_coef": 0.5})
    assert opd.advantage_options == {"kl_coef": 0.5}


# ---------------------------------------------------------------- the aggregation mode


def test_loss_agg_mode_replaces_the_policy_losss_own_as_upstream() -> None:
    # GSPO's default args say seq-mean-token-mean, but upstream overrides them with algorithm.loss_agg_mode
    assert plan(algorithm_type="gspo").policy_loss_options["loss_agg_mode"] == "token-mean"
    seq = plan(algorithm_type="gspo", loss_agg_mode="seq-mean-token-mean")
    assert seq.policy_loss_options["loss_agg_mode"] == "seq-mean-token-mean" and seq.policy_units == "seq"
    # a mapping without loss_agg_mode keeps the function's own default (GSPO's), as upstream
    own = plan(algorithm_type="gspo", policy_loss_fn_args={"clip_range": 0.001})
    assert "loss_agg_mode" not in own.policy_loss_options and own.policy_units == "seq"
    norm = plan(algorithm_type="grpo", loss_agg_mode="seq-mean-token-sum-norm")
    assert norm.policy_units == "step" and norm.agg_units == "step" and norm.aggregation == "seq-mean-token-sum-norm"


def test_an_explicit_policy_loss_agg_mode_that_upstream_would_override_is_refused() -> None:
    with pytest.raises(PlanError, match=r"set algorithm.loss_agg_mode: seq-mean-token-mean instead"):
        plan(algorithm_type="gspo", policy_loss_fn_args={"loss_agg_mode": "seq-mean-token-mean"})
    agreed = plan(
        algorithm_type="gspo", loss_agg_mode="seq-mean-token-mean",
        policy_loss_fn_args={"loss_agg_mode": "seq-mean-token-mean"},
    )  # fmt: skip
    assert agreed.policy_loss_options["loss_agg_mode"] == "seq-mean-token-mean"


def test_rec_aggregation_is_fixed_by_its_clip_mode() -> None:
    rec = plan(algorithm_type="rec", loss_agg_mode="seq-mean-token-sum")
    assert rec.policy_units == "token" and rec.agg_units == "seq"
    assert plan(algorithm_type="rec", policy_loss_fn_args={"clip_mode": "gspo-one-side"}).policy_units == "seq"


def test_unknown_aggregation_names_are_unknown_names() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'token-mean'"):
        plan(loss_agg_mode="token_mean")
    with pytest.raises(UnknownNameError, match="sft_loss_agg_mode"):
        plan(algorithm_type="mix", policy_loss_fn_args={"sft_loss_agg_mode": "mean"})


# ---------------------------------------------------------------- KL


def test_kl_penalty_and_kl_loss_can_both_be_on_where_advantages_are_computed_in_the_trainer() -> None:
    p = plan(algorithm_type="grpo_verl", kl_penalty_fn="k1", kl_penalty_fn_args={"kl_coef": 0.05})
    assert p.kl_penalty == KLTerm(fn="k1", coef=0.05) and p.kl_loss == K2
    assert p.use_reference and p.needs_old_logprobs


def test_a_kl_penalty_where_advantages_are_computed_in_the_buffer_is_refused() -> None:
    with pytest.raises(PlanError, match="upstream ignores the 'k1' reward penalty"):
        plan(algorithm_type="grpo", kl_penalty_fn="k1")
    assert plan(algorithm_type="grpo", kl_penalty_fn="k1", kl_penalty_fn_args={"kl_coef": 0.0}).kl_penalty is None


def test_kl_coefficient_zero_or_none_turns_the_term_and_the_reference_off() -> None:
    off = plan(algorithm_type="grpo", kl_loss_fn_args={"kl_coef": 0.0})
    assert off.kl_loss is None and not off.use_reference
    assert plan(algorithm_type="grpo", kl_loss_fn="none").kl_loss is None
    low_var = plan(algorithm_type="grpo", kl_loss_fn="low_var_kl", kl_loss_fn_args={"kl_coef": 0.01})
    assert low_var.kl_loss == KLTerm(fn="low_var_kl", coef=0.01)
    corrected = plan(algorithm_type="asymre", kl_loss_fn="corrected_k3")  # the reference follows the KL term
    assert corrected.use_reference and corrected.needs_old_logprobs
    assert corrected.kl_loss == KLTerm("corrected_k3", 0.001)


def test_adaptive_kl() -> None:
    adaptive = {"adaptive": True, "kl_coef": 0.1, "target_kl": 0.5, "horizon": 1000}
    p = plan(algorithm_type="ppo", kl_penalty_fn="k1", kl_penalty_fn_args=adaptive)
    assert p.kl_penalty == KLTerm(fn="k1", coef=0.1, adaptive=True, target_kl=0.5, horizon=1000.0)
    with pytest.raises(PlanError, match="needs target_kl and horizon"):
        plan(algorithm_type="ppo", kl_penalty_fn="k1", kl_penalty_fn_args={"adaptive": True})
    with pytest.raises(PlanError, match="reward penalty only"):
        plan(algorithm_type="ppo", kl_loss_fn_args=adaptive)
    with pytest.raises(PlanError, match="true or false"):
        plan(algorithm_type="ppo", kl_loss_fn_args={"adaptive": "yes"})


def test_dpo_keeps_its_kl_loss_as_upstream() -> None:
    with pytest.raises(PlanError, match=r"to turn it off set kl_loss_fn_args\.kl_coef: 0"):
        plan(algorithm_type="dpo", kl_loss_fn="none")
    off = plan(algorithm_type="dpo", kl_loss_fn_args={"kl_coef": 0})
    assert off.kl_loss is None and off.use_reference  # the DPO loss itself reads the reference


def test_kl_option_errors() -> None:
    with pytest.raises(UnknownOptionError, match="did you mean 'kl_coef'"):
        plan(kl_loss_fn_args={"kl_coeff": 0.1})
    with pytest.raises(PlanError, match="must be 0 or more"):
        plan(kl_loss_fn_args={"kl_coef": -1})
    with pytest.raises(PlanError, match="must be a number"):
        plan(kl_loss_fn_args={"kl_coef": "high"})


# ---------------------------------------------------------------- advantages, entropy, sample strategies


def test_where_advantages_are_computed_constrains_the_function() -> None:
    with pytest.raises(PlanError, match="needs the whole batch in the trainer"):
        plan(algorithm_type="grpo", advantage_fn="reinforceplusplus")
    critic = plan(algorithm_type="grpo_verl", advantage_fn="ppo")  # GAE in the trainer: a critic is trained
    assert critic.use_critic and critic.advantage_options == {"gamma": 1.0, "lam": 1.0}
    grouped = plan(algorithm_type="ppo", advantage_fn="rloo")  # no value reader: no critic to train
    assert not grouped.use_critic


def test_types_without_advantages_refuse_advantage_settings() -> None:
    with pytest.raises(PlanError, match="computes no advantages"):
        plan(algorithm_type="sft", advantage_fn="grpo")
    with pytest.raises(PlanError, match="reads advantages"):
        plan(algorithm_type="raft", policy_loss_fn="ppo")


def test_group_filter_follows_std_threshold() -> None:
    p = plan(algorithm_type="grpo", advantage_fn_args={"std_threshold": 0.0001, "duplicate_experiences": True})
    assert p.group_filter == GroupFilter(std_threshold=0.0001, duplicate_experiences=True, by_episode=False)
    steps = plan(algorithm_type="multi_step_grpo", advantage_fn_args={"std_threshold": 0.01})
    assert steps.group_filter == GroupFilter(std_threshold=0.01, duplicate_experiences=False, by_episode=True)
    assert plan(algorithm_type="grpo").group_filter is None


def test_rank_penalty_makes_trainer_side_grpo_read_old_logprobs() -> None:
    base = {"algorithm_type": "grpo_verl", "policy_loss_fn": "opmd"}
    assert not plan(**base).needs_old_logprobs
    assert plan(**base, advantage_fn_args={"rank_penalty": 0.1}).needs_old_logprobs


def test_option_values_are_checked() -> None:
    with pytest.raises(PlanError, match=r"std_cal_level: must be one of 'group', 'batch'"):
        plan(algorithm_type="grpo", advantage_fn_args={"std_cal_level": "task"})
    with pytest.raises(PlanError, match="clip_mode"):
        plan(algorithm_type="rec", policy_loss_fn_args={"clip_mode": "both"})


def test_entropy() -> None:
    on = plan(algorithm_type="grpo", entropy_loss_fn_args={"entropy_coef": 0.01})
    assert (on.entropy_fn, on.entropy_coef) == ("default", 0.01)
    mix = plan(algorithm_type="mix", entropy_loss_fn_args={"entropy_coef": 0.01})
    assert mix.entropy_fn == "mix"
    off = plan(algorithm_type="grpo", entropy_loss_fn="none", entropy_loss_fn_args={"entropy_coef": 1})
    assert off.entropy_fn is None
    with pytest.raises(PlanError, match="'mix' needs expert rows"):
        plan(algorithm_type="grpo", entropy_loss_fn="mix")


def test_pieces_that_need_special_data_are_checked_against_the_type() -> None:
    with pytest.raises(PlanError, match="needs preference pairs"):
        plan(algorithm_type="grpo", policy_loss_fn="dpo")
    with pytest.raises(PlanError, match="sample_strategy: mix"):
        plan(algorithm_type="grpo", policy_loss_fn="mix")


def test_sample_strategies() -> None:
    stale = plan(sample_strategy="staleness_control", sample_strategy_args={"max_staleness": 2})
    assert (stale.sample_strategy, stale.sample_strategy_options) == ("staleness_control", {"max_staleness": 2})
    with pytest.raises(UnknownNameError, match="did you mean 'default'"):
        plan(sample_strategy="defualt")
    with pytest.raises(UnknownOptionError, match="expert_data_ratio"):
        plan(algorithm_type="mix", sample_strategy_args={"expert_ratio": 0.2})


def test_names_are_checked_with_suggestions() -> None:
    with pytest.raises(UnknownNameError, match=r"algorithm.algorithm_type: .*did you mean 'grpo'"):
        plan(algorithm_type="grpoo")
    with pytest.raises(UnknownNameError, match=r"algorithm.policy_loss_fn: .*did you mean 'cispo'"):
        plan(policy_loss_fn="cispoo")
    with pytest.raises(UnknownNameError, match="KL function 'k9'"):
        plan(kl_loss_fn="k9")
    with pytest.raises(UnknownNameError, match="did you mean 'default'"):
        plan(entropy_loss_fn="defaults")
    with pytest.raises(UnknownOptionError, match="did you mean 'clip_range'"):
        plan(policy_loss_fn_args={"clip_rnage": 0.1})
    with pytest.raises(PlanError, match="repeat_times"):
        plan(repeat_times=0)


def test_a_users_python_path_is_accepted_and_its_options_checked() -> None:
    path = "trinity.algorithm.losses.supervised.sft_loss"
    p = plan(algorithm_type="grpo", policy_loss_fn=path, policy_loss_fn_args={"loss_agg_mode": "token-mean"})
    assert p.policy_loss_fn == path and p.needs_old_logprobs  # a user's loss is assumed to be PPO-like
    with pytest.raises(UnknownOptionError, match="beta"):
        plan(algorithm_type="grpo", policy_loss_fn=path, policy_loss_fn_args={"beta": 1})


# ---------------------------------------------------------------- upstream example configs resolve


def test_upstream_example_sections() -> None:
    frozen_lake = plan(
        algorithm_type="grpo", repeat_times=8, policy_loss_fn_args={"clip_range_low": 0.2, "clip_range_high": 0.28},
        kl_loss_fn_args={"kl_coef": 0.0}, loss_agg_mode="seq-mean-token-sum",
    )  # fmt: skip
    assert frozen_lake.kl_loss is None and frozen_lake.policy_units == "token" and frozen_lake.agg_units == "seq"
    email = plan(
        algorithm_type="multi_step_grpo", policy_loss_fn="rec",
        policy_loss_fn_args={
            "epsilon_low": 0.2, "epsilon_high": 0.2, "clip_mode": "one-side", "weight": "none", "temp": 1.0,
            "regularizer": "none", "regularizer_coef": 0.0,
        },
        kl_loss_fn="k2", kl_loss_fn_args={"kl_coef": 0.0}, advantage_fn_args={"std_cal_level": "batch"},
    )  # fmt: skip
    assert email.advantage_fn == "step_wise_grpo" and email.kl_loss is None
    agent = plan(
        algorithm_type="multi_step_grpo", kl_loss_fn="low_var_kl", kl_loss_fn_args={"kl_coef": 0},
        advantage_fn_args={"epsilon": 1e-6, "std_threshold": 0.0001, "enable_step_norm": True},
    )  # fmt: skip
    assert agent.group_filter is not None and agent.group_filter.by_episode
    dpo = plan(algorithm_type="dpo", kl_loss_fn="k1", kl_loss_fn_args={"kl_coef": 0.1})
    assert dpo.kl_loss == KLTerm(fn="k1", coef=0.1)
    chord = plan(
        algorithm_type="mix_chord", repeat_times=8, kl_loss_fn_args={"kl_coef": 0.0}, entropy_loss_fn="mix",
        sample_strategy_args={"expert_data_ratio": 0.2},
        policy_loss_fn_args={
            "mu_warmup_steps": 200, "mu_decay_steps": 400, "mu_peak": 0.5, "mu_valley": 0.02,
            "enable_phi_function": True, "clip_range": 0.2, "sft_loss_agg_mode": "token-mean",
            "use_dynamic_bsz": True, "ppo_mini_batch_size": 320, "ppo_micro_batch_size_per_gpu": 4,
            "ngpus_trainer": 4, "train_batch_size_expert": 64, "train_batch_size_usual": 256,
        },
    )  # fmt: skip
    assert chord.needs_global_step and chord.expert_rows and chord.sample_strategy_options == {"expert_data_ratio": 0.2}
    asymre = plan(algorithm_type="asymre", policy_loss_fn_args={"tau": 0}, advantage_fn_args={"baseline_shift": -0.1})
    assert asymre.policy_loss_options == {"tau": 0}
    ask = plan(
        algorithm_type="grpo", policy_loss_fn="ppo", advantage_fn="grpo", kl_penalty_fn="none", kl_loss_fn="k2",
        entropy_loss_fn="default",
    )  # fmt: skip
    assert ask == plan(algorithm_type="grpo")


# ---------------------------------------------------------------- modes and description


def test_train_only_types_refuse_exploring_modes() -> None:
    for name in ("sft", "dpo"):
        p = plan(algorithm_type=name)
        check_mode(p, "train")
        with pytest.raises(PlanError, match="does not support mode 'both'"):
            check_mode(p, "both")
    check_mode(plan(algorithm_type="grpo"), "explore")


def test_describe_lists_the_resolved_pieces() -> None:
    lines = plan(algorithm_type="grpo", entropy_loss_fn_args={"entropy_coef": 0.01}).describe()
    assert lines == [
        "algorithm grpo (repeat_times 1, experience data)",
        "sample strategy default",
        "advantages grpo in the buffer (epsilon 1e-06, std_cal_level group)",
        "policy loss ppo (clip_range 0.2, clip_ratio_c 3, token-mean)",
        "kl penalty none",
        "kl loss k2 coef 0.001 (token-mean)",
        "entropy default coef 0.01 (token-mean)",
        "models: policy, reference",
        "reads: old log-probs",
    ]
    sft = plan(algorithm_type="sft").describe()
    assert "algorithm sft (repeat_times 1, sft data, train only)" in sft and "advantages: none" in sft
    adaptive = plan(
        algorithm_type="ppo", kl_penalty_fn="k1",
        kl_penalty_fn_args={"adaptive": True, "kl_coef": 0.1, "target_kl": 0.5, "horizon": 1000},
    ).describe()  # fmt: skip
    assert "kl penalty k1 coef 0.1 (adaptive: target_kl 0.5, horizon 1000)" in adaptive
    assert "models: policy, reference, critic" in adaptive
