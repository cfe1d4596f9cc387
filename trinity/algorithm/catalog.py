"""The one list of built-in algorithm pieces, importable without torch.

This module owns the registries the algorithm config names things in:
:data:`ADVANTAGE_FNS`, :data:`POLICY_LOSS_FNS`, :data:`KL_FNS`,
:data:`ENTROPY_LOSS_FNS`, :data:`LOSS_AGGREGATIONS` and :data:`ALGORITHMS`.
Every built-in entry is *declared* here (``name -> "module:attr"``): the name
is known at once, the function is imported on its first ``get``. Next to each
declaration sits what the config layer needs to know without importing the
function (:class:`FunctionInfo`): its config options and their defaults,
upstream Trinity-RFT's ``default_args()`` (used when the config's ``*_args``
is left unset), and which inputs it reads. A test checks every declared
target resolves and agrees with this metadata.

Nothing heavy is imported here: ``trinity run --dry-run`` resolves a whole
algorithm section from this module alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from trinity.utils.registry import Registry

#: Inputs a function may read, beyond the response mask (and, for losses, the policy's log-probs).
READABLE = frozenset(
    {
        "advantages",  # per-token advantages (policy losses)
        "old_logprobs",  # behaviour-policy log-probs
        "proximal_logprobs",  # the trained policy's log-probs before this step's update (recomputed by the trainer)
        "ref_logprobs",  # frozen reference model's log-probs
        "teacher_logprobs",  # a teacher model's log-probs of the sampled tokens (distillation)
        "values",  # critic values
        "group_index",  # which rows are rollouts of one task
        "run_index",  # which rows are steps of one episode (multi-step)
        "token_level_rewards",  # rewards per token (after any KL penalty)
        "reward_baselines",  # a per-row baseline reward (ReMax: the greedy rollout's reward)
        "entropies",  # the policy's per-token entropy before the update (recomputed by the trainer)
        "nec",  # Clip_V's per-token N = H * sum p^2 + sum p^2 log p before the update (recomputed by the trainer)
        "expert_mask",  # which rows are expert (SFT) data (mix algorithms)
        "global_step",  # the training step being taken (schedules)
        "pairs",  # rows come as interleaved (chosen, rejected) pairs
    }
)


@dataclass(frozen=True)
class FunctionInfo:
    """What the catalog knows about one built-in function, without importing it."""

    #: Where it lives: ``module:attribute``.
    target: str
    #: Config options (keyword-only parameters a config may set) and their defaults when a mapping is given.
    options: Mapping[str, Any] = field(default_factory=dict)
    #: Upstream's ``default_args()``: the options used when the config leaves ``*_args`` unset (None: ``options``).
    default_args: Mapping[str, Any] | None = None
    #: Inputs it reads (names from :data:`READABLE`).
    reads: frozenset[str] = frozenset()
    #: Inputs it also reads while the option of that name is set to a true value (names from :data:`READABLE`).
    option_reads: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: Advantage functions only: a row's result depends on its own group alone (so the buffer may compute it).
    group_local: bool = False
    #: One line for documentation and ``--dry-run``.
    summary: str = ""

    def __post_init__(self) -> None:
        unknown = set(self.reads).union(*self.option_reads.values()) - READABLE
        if unknown:
            raise ValueError(f"{self.target}: unknown inputs {sorted(unknown)} (known: {sorted(READABLE)})")
        stray = set(self.option_reads) - set(self.options)
        if stray:
            raise ValueError(f"{self.target}: option_reads {sorted(stray)} are not options")
        if self.default_args is not None:
            extra = set(self.default_args) - set(self.options)
            if extra:
                raise ValueError(f"{self.target}: default_args {sorted(extra)} are not options")
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        object.__setattr__(self, "option_reads", MappingProxyType(dict(self.option_reads)))
        if self.default_args is not None:
            object.__setattr__(self, "default_args", MappingProxyType(dict(self.default_args)))

    def reads_with(self, options: Mapping[str, Any]) -> frozenset[str]:
        """Return the inputs it reads when called with ``options`` (its own defaults filling the rest)."""
        effective = {**self.options, **options}
        extra = [needed for name, needed in self.option_reads.items() if effective.get(name)]
        return self.reads.union(*extra)

    def upstream_defaults(self) -> dict[str, Any]:
        """Return the options used when the config gives no ``*_args`` (upstream's ``default_args()``)."""
        return dict(self.options if self.default_args is None else self.default_args)


class Family:
    """One registry of functions plus the catalog's :class:`FunctionInfo` for each built-in."""

    def __init__(self, kind: str) -> None:
        #: The registry configs name functions in.
        self.registry: Registry[Callable[..., Any]] = Registry(kind)
        self._infos: dict[str, FunctionInfo] = {}

    @property
    def kind(self) -> str:
        """What the functions are, for messages ("policy loss")."""
        return self.registry.kind

    def declare(self, names: str | Iterable[str], info: FunctionInfo) -> None:
        """Declare ``info.target`` under each of ``names`` (the first is the main name, the rest aliases)."""
        for name in [names] if isinstance(names, str) else names:
            self.registry.declare(name, info.target)
            self._infos[name.strip().lower()] = info

    def info(self, name: str) -> FunctionInfo | None:
        """Return the catalog entry of a built-in ``name``; None for anything registered by a user."""
        return self._infos.get(name.strip().lower())

    def builtins(self) -> dict[str, FunctionInfo]:
        """Return ``{name: info}`` for every built-in name (aliases included)."""
        return dict(self._infos)


ADVANTAGES = Family("advantage function")
POLICY_LOSSES = Family("policy loss")
KL_ESTIMATORS = Family("KL function")
ENTROPY_TERMS = Family("entropy loss function")
AGGREGATIONS = Family("loss aggregation")

#: Advantage functions: ``(AdvantageInputs, **options) -> (advantages, returns)``.
ADVANTAGE_FNS = ADVANTAGES.registry
#: Policy losses: ``(PolicyLossInputs, **options) -> (loss, metrics)``.
POLICY_LOSS_FNS = POLICY_LOSSES.registry
#: KL estimators: ``(logprobs, ref_logprobs, old_logprobs=None) -> per-token KL``.
KL_FNS = KL_ESTIMATORS.registry
#: Entropy terms: ``(entropy, response_mask, *, entropy_coef, loss_agg_mode, ...) -> (term, metrics)``.
ENTROPY_LOSS_FNS = ENTROPY_TERMS.registry
#: Loss aggregation modes: ``(values, mask, *, normalizer=None) -> scalar``.
LOSS_AGGREGATIONS = AGGREGATIONS.registry
#: Algorithm types (:class:`~trinity.algorithm.algorithms.AlgorithmSpec`), by name.
ALGORITHMS: Registry[Any] = Registry("algorithm")

#: Options every KL function takes in ``kl_loss_fn_args`` / ``kl_penalty_fn_args`` (upstream's ``KLFn``).
KL_OPTIONS: Mapping[str, Any] = MappingProxyType(
    {"adaptive": False, "kl_coef": 0.001, "target_kl": None, "horizon": None}
)
#: Upstream's ``KLFn.default_args()``.
KL_DEFAULT_ARGS: Mapping[str, Any] = MappingProxyType({"adaptive": False, "kl_coef": 0.001})
#: Options every entropy term takes in ``entropy_loss_fn_args`` (upstream's ``EntropyLossFn``).
ENTROPY_OPTIONS: Mapping[str, Any] = MappingProxyType({"entropy_coef": 0.0})
#: The aggregation used when ``algorithm.loss_agg_mode`` is unset.
DEFAULT_LOSS_AGG_MODE = "token-mean"
#: Options whose value must be one of a few choices, checked when a config is loaded (any function, any family).
OPTION_CHOICES: Mapping[str, tuple[Any, ...]] = MappingProxyType(
    {
        "std_cal_level": ("group", "batch"),
        "opmd_baseline": ("mean", "logavgexp"),
        "drop": (None, "balance"),
        "clip_mode": ("none", "one-side", "gspo-one-side", "two-side", "ring"),
        "weight": ("none", "importance_sampling", "gspo_importance_sampling", "advantage"),
        "regularizer": ("none", "k2", "forward-kl"),
    }
)

#: Sample strategies an upstream config may name, with their options and defaults. The buffer implements
#: them; they are listed here so that a config is checked without importing the buffer.
SAMPLE_STRATEGY_OPTIONS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "default": {},
        "warmup": {},  # upstream: a deprecated alias of "default"
        "staleness_control": {"max_staleness": float("inf")},
        "mix": {"expert_data_ratio": 0.5, "sft_dataset_name": "sft_dataset"},
        # (trinity-rft) drop or down-weight groups more than max_staleness versions old
        "staleness": {"max_staleness": 1, "mode": "drop", "decay": 0.5},
    }
)

_ADV = "trinity.algorithm.advantages"
_LOSS = "trinity.algorithm.losses"

# --- advantage functions ------------------------------------------------------------------------

ADVANTAGES.declare(
    ("ppo", "gae"),
    FunctionInfo(
        f"{_ADV}.discounted:gae_advantages",
        options={"gamma": 1.0, "lam": 1.0},
        reads=frozenset({"values", "token_level_rewards"}),
        summary="GAE from critic values; advantages whitened over the batch",
    ),
)
ADVANTAGES.declare(
    ("reinforceplusplus", "reinforce_plus_plus"),
    FunctionInfo(
        f"{_ADV}.discounted:reinforce_plus_plus_advantages",
        options={"gamma": 1.0},
        reads=frozenset({"token_level_rewards"}),
        summary="discounted returns whitened over the batch",
    ),
)
ADVANTAGES.declare(
    "remax",
    FunctionInfo(
        f"{_ADV}.discounted:remax_advantages",
        reads=frozenset({"token_level_rewards", "reward_baselines"}),
        summary="returns minus a per-row baseline reward (the greedy rollout's)",
    ),
)
ADVANTAGES.declare(
    "grpo",
    FunctionInfo(
        f"{_ADV}.grpo:grpo_advantages",
        options={
            "epsilon": 1e-6,
            "std_threshold": None,
            "duplicate_experiences": False,
            "rank_penalty": None,
            "std_cal_level": "group",
            "std_normalize": True,
        },
        default_args={
            "epsilon": 1e-6,
            "std_threshold": None,
            "duplicate_experiences": False,
            "rank_penalty": None,
            "std_cal_level": "group",
        },
        reads=frozenset({"token_level_rewards", "group_index", "old_logprobs"}),
        group_local=True,
        summary="(r - group mean) / (group or batch std + epsilon)",
    ),
)
ADVANTAGES.declare(
    "grpo_verl",
    FunctionInfo(
        f"{_ADV}.grpo:grpo_verl_advantages",
        options={"epsilon": 1e-6},
        reads=frozenset({"group_index", "token_level_rewards"}),
        group_local=True,
        summary="grpo with only epsilon settable (upstream's trainer-side GRPO)",
    ),
)
ADVANTAGES.declare(
    "clipb",
    FunctionInfo(
        f"{_ADV}.entropy_clip:clipb_advantages",
        options={"epsilon": 1e-6, "mu": 2.5},
        reads=frozenset({"group_index", "token_level_rewards", "old_logprobs", "entropies"}),
        summary="GRPO advantages; negative-advantage tokens whose p(H + log p) is far below the batch's leave the loss",
    ),
)
ADVANTAGES.declare(
    "clipv",
    FunctionInfo(
        f"{_ADV}.entropy_clip:clipv_advantages",
        options={"epsilon": 1e-6, "mu": 2.0, "max_frac": 1e-4},
        default_args={"epsilon": 1e-6, "mu": 8.5, "max_frac": 1e-4},
        reads=frozenset({"group_index", "token_level_rewards", "old_logprobs", "entropies", "nec"}),
        summary="GRPO advantages; negative-advantage tokens whose N - p(H + log p) is far above the batch's leave "
        "the loss, at most max_frac of the tokens",
    ),
)
ADVANTAGES.declare(
    "step_wise_grpo",
    FunctionInfo(
        f"{_ADV}.grpo:step_wise_grpo_advantages",
        options={"epsilon": 1e-6, "enable_step_norm": False, "std_cal_level": "group", "std_threshold": None},
        reads=frozenset({"token_level_rewards", "group_index", "run_index"}),
        group_local=True,
        summary="GRPO over each episode's last-step reward, broadcast to all its steps",
    ),
)
ADVANTAGES.declare(
    "reinforce",
    FunctionInfo(
        f"{_ADV}.baselines:reinforce_advantages",
        reads=frozenset({"token_level_rewards"}),
        group_local=True,
        summary="the raw reward, no baseline",
    ),
)
ADVANTAGES.declare(
    "rloo",
    FunctionInfo(
        f"{_ADV}.baselines:rloo_advantages",
        reads=frozenset({"group_index", "token_level_rewards"}),
        group_local=True,
        summary="reward minus the mean of the other members of the group",
    ),
)
ADVANTAGES.declare(
    ("opmd", "opmd_verl"),
    FunctionInfo(
        f"{_ADV}.baselines:opmd_advantages",
        options={"opmd_baseline": "mean", "tau": 1.0},
        reads=frozenset({"token_level_rewards", "group_index"}),
        group_local=True,
        summary="reward minus the group's mean or tau-log-mean-exp",
    ),
)
ADVANTAGES.declare(
    ("asymre", "asymre_verl"),
    FunctionInfo(
        f"{_ADV}.baselines:asymre_advantages",
        options={"baseline_shift": -0.1},
        reads=frozenset({"token_level_rewards", "group_index"}),
        group_local=True,
        summary="reward minus (group mean + baseline_shift)",
    ),
)
ADVANTAGES.declare(
    "rec",
    FunctionInfo(
        f"{_ADV}.baselines:rec_advantages",
        options={"epsilon": 1e-6, "std_normalize": False, "drop": None},
        reads=frozenset({"token_level_rewards", "group_index"}),
        group_local=True,
        summary="reward minus group mean (optionally std-normalised, negatives balanced)",
    ),
)
ADVANTAGES.declare(
    "on_policy_distill",
    FunctionInfo(
        f"{_ADV}.distill:on_policy_distill_advantages",
        options={"kl_coef": 1.0},
        reads=frozenset({"teacher_logprobs", "old_logprobs"}),
        summary="kl_coef * (teacher log-prob - student log-prob) per token",
    ),
)
ADVANTAGES.declare(
    "jsd",
    FunctionInfo(
        f"{_ADV}.distill:jsd_advantages",
        options={"lambda_coef": 0.5, "kl_coef": 1.0, "temperature": 1.0, "chunk_size": None},
        reads=frozenset({"teacher_logprobs", "old_logprobs"}),
        summary="-kl_coef * per-token Jensen-Shannon divergence to the teacher",
    ),
)

# --- policy losses ------------------------------------------------------------------------------

_PG = frozenset({"old_logprobs", "advantages"})
_MIX_BOOKKEEPING = {
    "use_dynamic_bsz": None,
    "ppo_mini_batch_size": 1,
    "ppo_micro_batch_size_per_gpu": 1,
    "ngpus_trainer": 1,
    "train_batch_size_usual": 1,
    "train_batch_size_expert": 1,
}
_MIX_SHARED = {
    "clip_range": 0.2,
    "clip_range_low": None,
    "clip_range_high": None,
    **_MIX_BOOKKEEPING,
    "loss_agg_mode": "token-mean",
    "sft_loss_agg_mode": None,
    "grpo_loss_agg_mode": None,
}

POLICY_LOSSES.declare(
    "ppo",
    FunctionInfo(
        f"{_LOSS}.clipped:ppo_loss",
        options={
            "clip_range": 0.2,
            "clip_range_low": None,
            "clip_range_high": None,
            "clip_ratio_c": 3.0,
            "loss_agg_mode": "token-mean",
            "enable_sequence_masking": False,
            "delta_sequence_masking": 0.1,
            "fallback_to_policy_gradient": False,
            "decoupled": False,
            "behav_imp_weight_cap": None,
        },
        default_args={
            "clip_range": 0.2,
            "clip_ratio_c": 3.0,
            "loss_agg_mode": "token-mean",
            "enable_sequence_masking": False,
            "delta_sequence_masking": 0.1,
            "fallback_to_policy_gradient": False,
        },
        reads=_PG,
        option_reads={"decoupled": frozenset({"proximal_logprobs"})},
        summary="clipped surrogate with dual clip; decoupled: clipped against the proximal policy, "
        "weighted by proximal / behaviour",
    ),
)
POLICY_LOSSES.declare(
    "gspo",
    FunctionInfo(
        f"{_LOSS}.clipped:gspo_loss",
        options={
            "clip_range": None,
            "clip_range_low": None,
            "clip_range_high": None,
            "loss_agg_mode": "seq-mean-token-mean",
        },
        default_args={"clip_range_low": 3e-4, "clip_range_high": 4e-4, "loss_agg_mode": "seq-mean-token-mean"},
        reads=_PG,
        summary="clipped sequence-level (geometric-mean) ratio, GSPO-token form",
    ),
)
POLICY_LOSSES.declare(
    "importance_sampling",
    FunctionInfo(
        f"{_LOSS}.clipped:importance_sampling_loss",
        options={"loss_agg_mode": "token-mean"},
        reads=_PG,
        summary="-A * ratio, no clipping",
    ),
)
POLICY_LOSSES.declare(
    "topr",
    FunctionInfo(
        f"{_LOSS}.reweighted:topr_loss",
        options={"advantage_threshold": 0.0, "loss_agg_mode": "token-mean"},
        reads=_PG,
        summary="-sg(alpha) A logp, alpha = clamp(ratio, 0, 1) at A <= threshold else 1",
    ),
)
POLICY_LOSSES.declare(
    "cispo",
    FunctionInfo(
        f"{_LOSS}.reweighted:cispo_loss",
        options={
            "clip_range_low": 1.0,
            "clip_range_high": 0.28,
            "enable_mask_clip": False,
            "mask_clip_range_low": 1.0,
            "mask_clip_range_high": 0.28,
            "loss_agg_mode": "token-mean",
        },
        reads=_PG,
        summary="-sg(clipped ratio) A logp",
    ),
)
POLICY_LOSSES.declare(
    "sapo",
    FunctionInfo(
        f"{_LOSS}.reweighted:sapo_loss",
        options={"tau_pos": 1.0, "tau_neg": 1.05, "loss_agg_mode": "token-mean"},
        reads=_PG,
        summary="-sg(soft gate of the ratio) A logp",
    ),
)
POLICY_LOSSES.declare(
    "sppo",
    FunctionInfo(
        f"{_LOSS}.reweighted:sppo_loss",
        options={"epsilon": 0.3, "loss_agg_mode": "token-mean"},
        reads=_PG,
        summary="-A (logp - old logp) inside [1/(1+eps), 1+eps], else 0",
    ),
)
POLICY_LOSSES.declare(
    "rec",
    FunctionInfo(
        f"{_LOSS}.reweighted:rec_loss",
        options={
            "epsilon_low": 0.2,
            "epsilon_high": 0.2,
            "epsilon_low_prime": 0.4,
            "epsilon_high_prime": 0.4,
            "clip_mode": "none",
            "weight": "none",
            "regularizer": "none",
            "regularizer_coef": 0.0,
            "temp": 1.0,
        },
        default_args={
            "epsilon_low": 0.2,
            "epsilon_high": 0.2,
            "epsilon_low_prime": 0.6,
            "epsilon_high_prime": 2,
            "clip_mode": "none",
            "weight": "none",
            "regularizer": "none",
            "regularizer_coef": 0.0,
            "temp": 1.0,
        },
        reads=_PG,
        summary="-A' logp on in-range tokens, with optional weights and regulariser",
    ),
)
POLICY_LOSSES.declare(
    "opmd",
    FunctionInfo(
        f"{_LOSS}.supervised:opmd_loss",
        options={"tau": 1.0, "loss_agg_mode": "token-mean"},
        reads=frozenset({"advantages"}),
        summary="-A logp / (1 + tau)",
    ),
)
POLICY_LOSSES.declare(
    "sft",
    FunctionInfo(
        f"{_LOSS}.supervised:sft_loss",
        options={"loss_agg_mode": "token-mean"},
        summary="negative log-likelihood",
    ),
)
POLICY_LOSSES.declare(
    "sft_is",
    FunctionInfo(
        f"{_LOSS}.supervised:sft_is_loss",
        options={"loss_agg_mode": "token-mean"},
        summary="negative log-likelihood weighted by sg(p)",
    ),
)
POLICY_LOSSES.declare(
    "sft_phi",
    FunctionInfo(
        f"{_LOSS}.supervised:sft_phi_loss",
        options={"loss_agg_mode": "token-mean", "cutoff_prob": 1.0},
        summary="negative log-likelihood weighted by sg(p (1 - p))",
    ),
)
POLICY_LOSSES.declare(
    "dpo",
    FunctionInfo(
        f"{_LOSS}.supervised:dpo_loss",
        options={"beta": 0.1, "label_smoothing": 0.0},
        reads=frozenset({"ref_logprobs", "pairs"}),
        summary="DPO over interleaved (chosen, rejected) rows",
    ),
)
POLICY_LOSSES.declare(
    "mix",
    FunctionInfo(
        f"{_LOSS}.mixed:mix_loss",
        options={"mu": 0.1, **_MIX_SHARED},
        default_args={"mu": 0.1, "clip_range": 0.2, "loss_agg_mode": "token-mean"},
        reads=_PG | {"expert_mask"},
        summary="(1 - mu) PPO on rollout rows + mu SFT on expert rows",
    ),
)
POLICY_LOSSES.declare(
    "mix_chord",
    FunctionInfo(
        f"{_LOSS}.mixed:mix_chord_loss",
        options={
            "mu_warmup_steps": 0,
            "mu_decay_steps": 0,
            "mu_peak": 0.1,
            "mu_valley": 0.1,
            "enable_phi_function": True,
            **_MIX_SHARED,
        },
        default_args={
            "mu_warmup_steps": 0,
            "mu_decay_steps": 0,
            "mu_peak": 0.1,
            "mu_valley": 0.1,
            "clip_range": 0.2,
            "enable_phi_function": True,
            "loss_agg_mode": "token-mean",
        },
        reads=_PG | {"expert_mask", "global_step"},
        summary="(1 - mu(step)) PPO on rollout rows + mu(step) SFT (or SFT-phi) on expert rows",
    ),
)

# --- KL estimators, entropy terms, aggregation modes ---------------------------------------------

for _name, _attr, _summary in (
    ("none", "kl_none", "no KL (0)"),
    ("k1", "kl_k1", "logp - ref"),
    ("k2", "kl_k2", "(logp - ref)^2 / 2"),
    ("k3", "kl_k3", "exp(ref - logp) - (ref - logp) - 1"),
    ("low_var_kl", "kl_low_var", "k3 with the log-ratio clamped to [-20, 20], the result to [-10, 10]"),
    ("abs", "kl_abs", "|logp - ref|"),
):
    KL_ESTIMATORS.declare(
        _name,
        FunctionInfo(f"trinity.algorithm.kl_estimators:{_attr}", options=KL_OPTIONS,
                     default_args=KL_DEFAULT_ARGS, summary=_summary),
    )
KL_ESTIMATORS.declare(
    "corrected_k3",
    FunctionInfo(
        "trinity.algorithm.kl_estimators:kl_corrected_k3",
        options=KL_OPTIONS,
        default_args=KL_DEFAULT_ARGS,
        reads=frozenset({"old_logprobs"}),
        summary="k3 times clamp(pi / pi_old, 0, 2) (k3 without old log-probs)",
    ),
)

for _name, _attr, _reads, _summary in (
    ("default", "default_entropy_loss", frozenset(), "entropy_coef * aggregated entropy"),
    ("mix", "mix_entropy_loss", frozenset({"expert_mask"}), "entropy_coef * aggregated entropy of non-expert rows"),
    ("none", "no_entropy_loss", frozenset(), "no entropy term"),
):
    ENTROPY_TERMS.declare(
        _name,
        FunctionInfo(f"trinity.algorithm.entropy_terms:{_attr}", options=ENTROPY_OPTIONS, reads=_reads,
                     summary=_summary),
    )

for _name, _attr, _summary in (
    ("token-mean", "token_mean", "mean over every kept token"),
    ("seq-mean-token-sum", "seq_mean_token_sum", "mean over rows of each row's token sum"),
    ("seq-mean-token-mean", "seq_mean_token_mean", "mean over rows of each row's token mean"),
    ("seq-mean-token-sum-norm", "seq_mean_token_sum_norm", "sum over kept tokens / a fixed length"),
):
    AGGREGATIONS.declare(_name, FunctionInfo(f"trinity.algorithm.aggregation_modes:{_attr}", summary=_summary))

# --- algorithm types ------------------------------------------------------------------------------

#: ``{algorithm type: constant in trinity.algorithm.algorithms}``; aliases share a constant.
ALGORITHM_TARGETS: Mapping[str, str] = MappingProxyType(
    {
        "sft": "SFT",
        "ppo": "PPO",
        "grpo": "GRPO",
        "reinforceplusplus": "REINFORCE_PLUS_PLUS",
        "reinforce_plus_plus": "REINFORCE_PLUS_PLUS",
        "rloo": "RLOO",
        "opmd": "OPMD",
        "asymre": "ASYMRE",
        "dpo": "DPO",
        "topr": "TOPR",
        "cispo": "CISPO",
        "gspo": "GSPO",
        "sapo": "SAPO",
        "mix": "MIX",
        "mix_chord": "MIX_CHORD",
        "raft": "RAFT",
        "sppo": "SPPO",
        "rec": "REC",
        "multi_step_grpo": "MULTI_STEP_GRPO",
        "on_policy_distill": "ON_POLICY_DISTILL",
        "jsd": "JSD",
        "grpo_verl": "GRPO_VERL",
    }
)
for _name, _const in ALGORITHM_TARGETS.items():
    ALGORITHMS.declare(_name, f"trinity.algorithm.algorithms:{_const}")


#: Every family, for tests and documentation.
FAMILIES: tuple[Family, ...] = (ADVANTAGES, POLICY_LOSSES, KL_ESTIMATORS, ENTROPY_TERMS, AGGREGATIONS)
