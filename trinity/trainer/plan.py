"""What one training step computes, resolved once from the ``algorithm`` config section.

:func:`resolve_plan` turns an upstream-shaped
:class:`~trinity.common.config.schema.algorithm.AlgorithmConfig` into a
:class:`TrainingPlan` with upstream Trinity-RFT's resolution rules:

* a ``*_fn`` left unset takes the algorithm type's default
  (:class:`~trinity.algorithm.algorithms.AlgorithmSpec`); a ``*_args`` left
  unset takes that function's upstream ``default_args()``; a mapping given
  is the function's options, its own defaults filling the rest;
* ``algorithm.loss_agg_mode`` (default ``token-mean``) aggregates the KL and
  entropy terms and replaces the policy loss's ``loss_agg_mode`` when its
  options have one;
* a KL penalty applies to the rewards only where advantages are computed in
  the trainer; a KL loss and a KL penalty may both be on.

Where upstream silently rewrites or ignores what a config explicitly asks for,
this raises a one-line :class:`PlanError` instead. Every name is checked
against its registry (:class:`~trinity.utils.registry.UnknownNameError` with
the closest names) and every option name against the function
(:class:`~trinity.algorithm.options.UnknownOptionError`). Only the light
:mod:`trinity.algorithm.catalog` is read: resolving a plan never imports torch.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from trinity.algorithm.algorithm import is_algorithm_type, spec_of
from trinity.algorithm.algorithms import AdvantagePlace, AlgorithmSpec, Schema
from trinity.algorithm.arguments import (
    PlanError,
    as_number,
    check_decoupled,
    check_value,
    config_name,
    format_options,
    resolve_args,
)
from trinity.algorithm.catalog import (
    ADVANTAGES,
    ALGORITHMS,
    DEFAULT_LOSS_AGG_MODE,
    ENTROPY_OPTIONS,
    ENTROPY_TERMS,
    KL_ESTIMATORS,
    KL_OPTIONS,
    POLICY_LOSSES,
    SAMPLE_STRATEGY_OPTIONS,
    FunctionInfo,
)
from trinity.algorithm.class_adapters import is_class_entry, policy_loss_reads
from trinity.algorithm.options import UnknownOptionError, check_option_names
from trinity.common.config.schema.algorithm import AlgorithmConfig
from trinity.utils.registry import UnknownNameError

#: What a loss term averages over, for weighting the pieces of a split step: tokens, rows that have tokens,
#: every row (DPO pairs), or nothing (``step``: the term is already a sum over the step's pieces).
Units = Literal["token", "seq", "row", "step"]

#: The units of each aggregation mode.
AGG_UNITS: Mapping[str, Units] = {
    "token-mean": "token",
    "seq-mean-token-mean": "seq",
    "seq-mean-token-sum": "seq",
    "seq-mean-token-sum-norm": "step",
}

#: Inputs a custom (non built-in) policy loss is assumed to read.
_CUSTOM_LOSS_READS = frozenset({"old_logprobs", "advantages"})

#: Modes that run an explorer (refused for train-only algorithms, as upstream).
EXPLORING_MODES = frozenset({"both", "colocate", "explore"})

__all__ = ["AGG_UNITS", "GroupFilter", "KLTerm", "PlanError", "TrainingPlan", "Units", "check_mode", "resolve_plan"]


@dataclass(frozen=True)
class KLTerm:
    """One use of the KL to the reference model: which estimator, and its coefficient."""

    #: KL estimator (a :data:`~trinity.algorithm.catalog.KL_FNS` name, never ``none``).
    fn: str
    #: Coefficient (the initial one when adaptive).
    coef: float
    #: Whether the coefficient adapts towards ``target_kl`` (reward penalty only).
    adaptive: bool = False
    #: Target KL of the adaptive controller.
    target_kl: float | None = None
    #: Horizon of the adaptive controller.
    horizon: float | None = None

    def describe(self) -> str:
        """Return ``"<fn> coef <coef>"`` plus the adaptive settings."""
        text = f"{self.fn} coef {self.coef:g}"
        if self.adaptive:
            text += f" (adaptive: target_kl {self.target_kl:g}, horizon {self.horizon:g})"
        return text


@dataclass(frozen=True)
class GroupFilter:
    """Groups the advantage function skips (``std_threshold``), which the buffer should drop."""

    #: Groups with a reward standard deviation at most this (or of one member) are skipped.
    std_threshold: float
    #: Whether to refill the batch with copies of random kept groups.
    duplicate_experiences: bool
    #: Whether a group's members are episodes (``run_index``) scored by their last step.
    by_episode: bool


@dataclass(frozen=True)
class TrainingPlan:
    """Everything the explorer, buffer and trainer need to know about the algorithm."""

    #: Canonical algorithm type.
    algorithm: str
    #: Rollouts per task.
    repeat_times: int
    #: The training data's schema (``experience``, ``sft``, ``dpo``).
    schema: Schema
    #: Whether the algorithm only trains on a dataset (modes ``both`` / ``explore`` refused).
    train_only: bool
    #: Sample strategy and its options.
    sample_strategy: str
    sample_strategy_options: dict[str, Any]
    #: Policy loss and the options it is called with (its own defaults fill the rest).
    policy_loss_fn: str
    policy_loss_options: dict[str, Any]
    #: What the policy loss averages over (for exact weighting across micro-batches and ranks).
    policy_units: Units
    #: ``algorithm.loss_agg_mode``: the aggregation of the KL and entropy terms.
    loss_agg_mode: str
    #: Advantage function and its options; None when no advantages are computed.
    advantage_fn: str | None
    advantage_options: dict[str, Any]
    #: Where advantages are computed.
    advantage_in: AdvantagePlace
    #: KL subtracted from the token rewards before the (trainer-side) advantages; None: no penalty.
    kl_penalty: KLTerm | None
    #: KL added to the loss; None: no KL loss.
    kl_loss: KLTerm | None
    #: Entropy term (an :data:`~trinity.algorithm.catalog.ENTROPY_LOSS_FNS` name); None: no entropy term.
    entropy_fn: str | None
    #: Its coefficient (the term is subtracted from the loss).
    entropy_coef: float
    #: Whether a frozen reference model computes ``ref_logprobs`` (a KL term or the loss reads them).
    use_reference: bool
    #: Whether a critic is trained (the trainer-side advantage reads values).
    use_critic: bool
    #: Whether rows come in interleaved (chosen, rejected) pairs (DPO).
    paired: bool
    #: Whether rows carry ``expert_mask`` (the mix algorithms: expert SFT rows among rollouts).
    expert_rows: bool
    #: Whether the trainer needs the behaviour policy's log-probs (recomputed when experiences lack them).
    needs_old_logprobs: bool
    #: Whether the policy loss reads the policy's log-probs before the update (``ppo``'s ``decoupled``): the
    #: trainer recomputes them, and ``old_logprobs`` must be the engine's.
    needs_proximal_logprobs: bool
    #: Whether experiences must carry ``teacher_logprobs`` (distillation).
    needs_teacher_logprobs: bool
    #: Whether the policy loss reads the global step (``mix_chord``'s schedule).
    needs_global_step: bool
    #: Groups the buffer should drop after computing advantages; None: keep every row.
    group_filter: GroupFilter | None = None
    #: Per-token statistics of the policy before the update that the trainer-side advantage reads
    #: (``entropies``, ``nec``): the trainer computes them with the old log-probs.
    token_statistics: tuple[str, ...] = ()

    @property
    def aggregation(self) -> str:
        """The KL and entropy terms' aggregation (``loss_agg_mode``)."""
        return self.loss_agg_mode

    @property
    def agg_units(self) -> Units:
        """What the KL and entropy terms average over."""
        return AGG_UNITS.get(self.loss_agg_mode, "seq")

    def describe(self) -> list[str]:
        """Return the plan as plain text lines (for ``trinity run --dry-run``)."""
        lines = [
            f"algorithm {self.algorithm} (repeat_times {self.repeat_times}, {self.schema} data"
            + (", train only)" if self.train_only else ")"),
            f"sample strategy {self.sample_strategy}{format_options(self.sample_strategy_options)}",
        ]
        if self.advantage_fn is None:
            lines.append("advantages: none")
        else:
            lines.append(
                f"advantages {self.advantage_fn} in the {self.advantage_in}"
                f"{format_options(self.effective_options('advantage'))}"
            )
        lines.append(f"policy loss {self.policy_loss_fn}{format_options(self.effective_options('policy_loss'))}")
        lines.append("kl penalty " + (self.kl_penalty.describe() if self.kl_penalty else "none"))
        lines.append("kl loss " + (f"{self.kl_loss.describe()} ({self.loss_agg_mode})" if self.kl_loss else "none"))
        lines.append(
            f"entropy {self.entropy_fn} coef {self.entropy_coef:g} ({self.loss_agg_mode})" if self.entropy_fn
            else "entropy none"
        )
        if self.group_filter is not None:
            duplicate = ", refilled by duplicates" if self.group_filter.duplicate_experiences else ""
            lines.append(f"groups with reward std <= {self.group_filter.std_threshold:g} dropped{duplicate}")
        models = ["policy"] + (["reference"] if self.use_reference else []) + (["critic"] if self.use_critic else [])
        lines.append("models: " + ", ".join(models))
        needs = [
            name
            for name, flag in (
                ("old log-probs", self.needs_old_logprobs),
                ("proximal log-probs", self.needs_proximal_logprobs),
                ("teacher log-probs", self.needs_teacher_logprobs),
                ("expert rows", self.expert_rows),
                ("preference pairs", self.paired),
                ("the global step", self.needs_global_step),
                ("the policy's token entropies", "entropies" in self.token_statistics),
                ("Clip_V's N per token", "nec" in self.token_statistics),
            )
            if flag
        ]
        if needs:
            lines.append("reads: " + ", ".join(needs))
        return lines

    def effective_options(self, which: Literal["advantage", "policy_loss"]) -> dict[str, Any]:
        """Return the effective options of the advantage function or policy loss (given ones over defaults)."""
        name, given, family = (
            (self.advantage_fn, self.advantage_options, ADVANTAGES)
            if which == "advantage"
            else (self.policy_loss_fn, self.policy_loss_options, POLICY_LOSSES)
        )
        info = family.info(name) if name else None
        return {**(dict(info.options) if info else {}), **given}

    def mix_units(self) -> tuple[Units, Units]:
        """Return the units of the rollout part and the expert part of a ``mix`` loss (by their aggregation modes)."""
        options = self.effective_options("policy_loss")
        base = str(options.get("loss_agg_mode") or self.loss_agg_mode)
        usual = str(options.get("grpo_loss_agg_mode") or base)
        expert = str(options.get("sft_loss_agg_mode") or base)
        return AGG_UNITS.get(usual, "seq"), AGG_UNITS.get(expert, "seq")


def _kl_term(name: str, options: Mapping[str, Any], where: str) -> KLTerm | None:
    """Return the KL term of estimator ``name`` with ``options``; None when it is off (``none`` or coef 0)."""
    coef = as_number(options.get("kl_coef", KL_OPTIONS["kl_coef"]), f"{where}_args.kl_coef")
    if coef < 0:
        raise PlanError(f"{where}_args.kl_coef: must be 0 or more, got {coef:g}")
    adaptive = options.get("adaptive", False)
    if not isinstance(adaptive, bool):
        raise PlanError(f"{where}_args.adaptive: must be true or false, got {adaptive!r}")
    target_kl, horizon = options.get("target_kl"), options.get("horizon")
    if adaptive:
        if target_kl is None or horizon is None:
            raise PlanError(f"{where}_args: adaptive KL needs target_kl and horizon; set both, or adaptive: false")
        if as_number(target_kl, f"{where}_args.target_kl") <= 0 or as_number(horizon, f"{where}_args.horizon") <= 0:
            raise PlanError(f"{where}_args: target_kl and horizon must be positive, got {target_kl} and {horizon}")
    if name == "none" or coef == 0:
        return None
    return KLTerm(
        fn=name,
        coef=coef,
        adaptive=adaptive,
        target_kl=float(target_kl) if adaptive and target_kl is not None else None,
        horizon=float(horizon) if adaptive and horizon is not None else None,
    )


def _policy_aggregation(name: str, info: FunctionInfo | None, options: Mapping[str, Any]) -> str:
    """Return the aggregation the policy loss reduces with (REC's is fixed by its clip mode, as upstream)."""
    if name == "rec":
        clip_mode = options.get("clip_mode", "none")
        return "seq-mean-token-mean" if clip_mode == "gspo-one-side" else "token-mean"
    default = info.options.get("loss_agg_mode", DEFAULT_LOSS_AGG_MODE) if info else DEFAULT_LOSS_AGG_MODE
    return str(options.get("loss_agg_mode") or default)


#: What the trainer computes per token from the policy before the update, for a trainer-side advantage.
TOKEN_STATISTICS = ("entropies", "nec")


def _advantage_reads(name: str | None, info: FunctionInfo | None, options: Mapping[str, Any]) -> frozenset[str]:
    if name is None or info is None:
        return frozenset()
    if name == "grpo" and options.get("rank_penalty") is None:
        return info.reads - {"old_logprobs"}
    return info.reads


def _custom_loss_reads(name: str) -> frozenset[str]:
    """What a user's policy loss reads: a class names it in its ``__call__``; a function is assumed to read
    old log-probs and advantages."""
    entry = POLICY_LOSSES.registry.get(name)
    if not is_class_entry(entry):
        return _CUSTOM_LOSS_READS
    try:
        return policy_loss_reads(entry, name)
    except ValueError as exc:
        raise PlanError(f"algorithm.policy_loss_fn: {exc}") from None


def _spec(cfg: AlgorithmConfig) -> AlgorithmSpec:
    name = config_name(cfg.algorithm_type)
    if name not in ALGORITHMS and "." not in name:
        raise UnknownNameError(f"algorithm.algorithm_type: {ALGORITHMS.unknown_message(name)}")
    spec = ALGORITHMS.get(name)
    if is_algorithm_type(spec):
        try:
            spec = spec_of(name, spec)
        except ValueError as exc:
            raise PlanError(f"algorithm.algorithm_type: {exc}") from None
    if not isinstance(spec, AlgorithmSpec):
        raise PlanError(
            f"algorithm.algorithm_type: {cfg.algorithm_type!r} is a {type(spec).__name__}, not an AlgorithmSpec; "
            "register an AlgorithmSpec (trinity.algorithm.register_algorithm) or an AlgorithmType subclass"
        )
    return spec


def _sample_strategy(cfg: AlgorithmConfig, spec: AlgorithmSpec) -> tuple[str, dict[str, Any]]:
    name = config_name(cfg.sample_strategy or spec.sample_strategy)
    known = SAMPLE_STRATEGY_OPTIONS.get(name)
    if known is None:
        if "." in name:
            return name, dict(cfg.sample_strategy_args or {})
        close = difflib.get_close_matches(name, SAMPLE_STRATEGY_OPTIONS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        known_names = ", ".join(sorted(SAMPLE_STRATEGY_OPTIONS))
        raise UnknownNameError(
            f"algorithm.sample_strategy: unknown sample strategy {name!r}{hint} (known: {known_names})"
        )
    options = dict(known) if cfg.sample_strategy_args is None else dict(cfg.sample_strategy_args)
    try:
        check_option_names("sample strategy", name, known, options)
    except UnknownOptionError as exc:
        raise UnknownOptionError(f"algorithm.sample_strategy_args: {exc}") from None
    return name, options


def _policy_loss(
    cfg: AlgorithmConfig, spec: AlgorithmSpec, loss_agg_mode: str
) -> tuple[str, dict[str, Any], FunctionInfo | None]:
    name = config_name(cfg.policy_loss_fn or spec.policy_loss_fn)
    options, info = resolve_args(POLICY_LOSSES, name, cfg.policy_loss_fn_args, "algorithm.policy_loss_fn")
    if info is not None and "decoupled" in info.options:
        check_decoupled(options, "algorithm.policy_loss_fn_args")
    if "loss_agg_mode" in options:
        given = options["loss_agg_mode"]
        if cfg.policy_loss_fn_args is not None and given != loss_agg_mode:
            raise PlanError(
                f"algorithm.policy_loss_fn_args.loss_agg_mode: {given!r} is overridden by algorithm.loss_agg_mode "
                f"({loss_agg_mode!r}) as upstream does; set algorithm.loss_agg_mode: {given} instead"
            )
        options["loss_agg_mode"] = loss_agg_mode
    return name, options, info


def _advantage(
    cfg: AlgorithmConfig, spec: AlgorithmSpec
) -> tuple[str | None, dict[str, Any], FunctionInfo | None]:
    if spec.advantage_in == "none":
        if (cfg.advantage_fn and config_name(cfg.advantage_fn) != "none") or cfg.advantage_fn_args:
            raise PlanError(
                f"algorithm.advantage_fn: algorithm {spec.name!r} computes no advantages (upstream ignores it); "
                "remove advantage_fn and advantage_fn_args"
            )
        return None, {}, None
    name = config_name(cfg.advantage_fn or str(spec.advantage_fn))
    defaults = spec.advantage_fn_args if name == spec.advantage_fn else None
    options, info = resolve_args(ADVANTAGES, name, cfg.advantage_fn_args, "algorithm.advantage_fn", defaults=defaults)
    if spec.advantage_in == "trainer" and info is None and is_class_entry(ADVANTAGES.registry.get(name)):
        raise PlanError(
            f"algorithm.advantage_fn: {name!r} is an advantage class, which runs in the buffer on a step's "
            f"experiences, but algorithm {spec.name!r} computes advantages in the trainer; use it with an "
            "algorithm_type computing them in the buffer (grpo, opmd, or your AlgorithmType with "
            "compute_advantage_in_trainer = False)"
        )
    if spec.advantage_in == "buffer" and info is not None and not info.group_local:
        raise PlanError(
            f"algorithm.advantage_fn: {name!r} needs the whole batch in the trainer, but algorithm {spec.name!r} "
            "computes advantages group by group in the buffer; pick a group advantage (grpo, rloo, opmd, ...) or an "
            "algorithm_type computing them in the trainer (ppo, reinforceplusplus, grpo_verl)"
        )
    return name, options, info


def resolve_plan(cfg: AlgorithmConfig) -> TrainingPlan:
    """Return the :class:`TrainingPlan` of the ``algorithm`` section ``cfg``.

    Raises UnknownNameError for an unknown algorithm type or function name,
    UnknownOptionError for an option a function does not take, and PlanError
    for a combination that cannot run or that upstream would silently change.
    """
    spec = _spec(cfg)
    if cfg.repeat_times < 1:
        raise PlanError(f"algorithm.repeat_times: must be at least 1, got {cfg.repeat_times}")
    loss_agg_mode = cfg.loss_agg_mode or DEFAULT_LOSS_AGG_MODE
    check_value("loss_agg_mode", loss_agg_mode, "algorithm.loss_agg_mode")
    sample_strategy, sample_options = _sample_strategy(cfg, spec)

    loss_name, loss_options, loss_info = _policy_loss(cfg, spec, loss_agg_mode)
    loss_reads = loss_info.reads_with(loss_options) if loss_info else _custom_loss_reads(loss_name)
    paired = "pairs" in loss_reads
    expert_rows = "expert_mask" in loss_reads
    if paired and spec.schema != "dpo":
        raise PlanError(
            f"algorithm.policy_loss_fn: {loss_name!r} needs preference pairs, which algorithm {spec.name!r} does "
            "not train on; use algorithm_type: dpo"
        )
    if expert_rows and sample_strategy != "mix" and "." not in sample_strategy:
        raise PlanError(
            f"algorithm.policy_loss_fn: {loss_name!r} needs expert rows, which only the 'mix' sample strategy "
            f"provides; set algorithm.sample_strategy: mix (it is {sample_strategy!r})"
        )

    advantage_name, advantage_options, advantage_info = _advantage(cfg, spec)
    if advantage_name is None and "advantages" in loss_reads:
        raise PlanError(
            f"algorithm.policy_loss_fn: {loss_name!r} reads advantages, which algorithm {spec.name!r} does not "
            "compute; pick a loss without advantages (sft, dpo) or another algorithm_type"
        )
    advantage_reads = _advantage_reads(advantage_name, advantage_info, advantage_options)
    in_trainer = spec.advantage_in == "trainer"

    penalty_name = config_name(cfg.kl_penalty_fn or spec.kl_penalty_fn)
    penalty_options, _ = resolve_args(
        KL_ESTIMATORS, penalty_name, cfg.kl_penalty_fn_args, "algorithm.kl_penalty_fn",
        shared_options=KL_OPTIONS,
    )
    kl_penalty = _kl_term(penalty_name, penalty_options, "algorithm.kl_penalty_fn")
    if kl_penalty is not None and not in_trainer:
        raise PlanError(
            f"algorithm.kl_penalty_fn: algorithm {spec.name!r} computes no advantages in the trainer, so upstream "
            f"ignores the {penalty_name!r} reward penalty; use kl_loss_fn, or an algorithm_type computing advantages "
            "in the trainer (grpo_verl, ppo, reinforceplusplus, rloo)"
        )

    if spec.kl_loss_required and cfg.kl_loss_fn is not None and config_name(cfg.kl_loss_fn) == "none":
        raise PlanError(
            f"algorithm.kl_loss_fn: algorithm {spec.name!r} always has a KL loss (upstream turns 'none' into 'k2'); "
            "to turn it off set kl_loss_fn_args.kl_coef: 0"
        )
    kl_loss_name = config_name(cfg.kl_loss_fn or spec.kl_loss_fn)
    kl_loss_options, kl_loss_info = resolve_args(
        KL_ESTIMATORS, kl_loss_name, cfg.kl_loss_fn_args, "algorithm.kl_loss_fn",
        shared_options=KL_OPTIONS,
    )
    kl_loss = _kl_term(kl_loss_name, kl_loss_options, "algorithm.kl_loss_fn")
    if kl_loss is not None and kl_loss.adaptive:
        raise PlanError(
            "algorithm.kl_loss_fn_args.adaptive: an adaptive coefficient applies to the KL reward penalty only "
            "(upstream never updates the KL loss's); set adaptive: false"
        )

    entropy_name = config_name(cfg.entropy_loss_fn or spec.entropy_loss_fn)
    entropy_options, _ = resolve_args(
        ENTROPY_TERMS, entropy_name, cfg.entropy_loss_fn_args, "algorithm.entropy_loss_fn",
        shared_options=ENTROPY_OPTIONS,
    )
    entropy_coef = as_number(entropy_options.get("entropy_coef", 0.0), "algorithm.entropy_loss_fn_args.entropy_coef")
    if entropy_name == "mix" and not expert_rows:
        raise PlanError(
            f"algorithm.entropy_loss_fn: 'mix' needs expert rows, which policy loss {loss_name!r} does not have; "
            "use entropy_loss_fn: default"
        )

    group_filter = None
    threshold = advantage_options.get("std_threshold")
    if advantage_name in ("grpo", "step_wise_grpo") and threshold is not None:
        group_filter = GroupFilter(
            std_threshold=as_number(threshold, "algorithm.advantage_fn_args.std_threshold"),
            duplicate_experiences=bool(advantage_options.get("duplicate_experiences", False)),
            by_episode=advantage_name == "step_wise_grpo",
        )

    kl_loss_reads = kl_loss_info.reads if kl_loss is not None and kl_loss_info else frozenset()
    if paired:
        policy_units: Units = "row"
    elif expert_rows:
        policy_units = "step"
    else:
        policy_units = AGG_UNITS.get(_policy_aggregation(loss_name, loss_info, loss_options), "seq")
    return TrainingPlan(
        algorithm=spec.name,
        repeat_times=int(cfg.repeat_times),
        schema=spec.schema,
        train_only=spec.train_only,
        sample_strategy=sample_strategy,
        sample_strategy_options=sample_options,
        policy_loss_fn=loss_name,
        policy_loss_options=loss_options,
        policy_units=policy_units,
        loss_agg_mode=loss_agg_mode,
        advantage_fn=advantage_name,
        advantage_options=advantage_options,
        advantage_in=spec.advantage_in,
        kl_penalty=kl_penalty,
        kl_loss=kl_loss,
        entropy_fn=None if entropy_name == "none" or entropy_coef == 0 else entropy_name,
        entropy_coef=entropy_coef,
        use_reference=kl_penalty is not None or kl_loss is not None or "ref_logprobs" in loss_reads,
        use_critic=in_trainer and "values" in advantage_reads,
        paired=paired,
        expert_rows=expert_rows,
        needs_old_logprobs=(
            "old_logprobs" in loss_reads
            or kl_penalty is not None
            or "old_logprobs" in kl_loss_reads
            or (in_trainer and "old_logprobs" in advantage_reads)
        ),
        needs_proximal_logprobs="proximal_logprobs" in loss_reads,
        needs_teacher_logprobs="teacher_logprobs" in advantage_reads,
        needs_global_step="global_step" in loss_reads,
        group_filter=group_filter,
        token_statistics=tuple(name for name in TOKEN_STATISTICS if in_trainer and name in advantage_reads),
    )


def check_mode(plan: TrainingPlan, mode: str) -> None:
    """Raise PlanError when ``mode`` (``both``, ``explore``, ...) runs an explorer for a train-only algorithm."""
    if plan.train_only and mode in EXPLORING_MODES:
        raise PlanError(
            f"mode: algorithm {plan.algorithm!r} trains on a dataset only and does not support mode {mode!r}; "
            "use mode: train with buffer.trainer_input.experience_buffer"
        )
