"""Checking the names and ``*_args`` of an ``algorithm`` config section against the catalog, without torch.

These are the rules :func:`trinity.trainer.plan.resolve_plan` applies to
each function a config names: the name must resolve in its registry, the
options are the given mapping or else the function's upstream
``default_args()``, every option name must be one the function takes, and
options with a fixed set of values (aggregation modes, ``std_cal_level``, ...)
must hold one of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trinity.algorithm.catalog import AGGREGATIONS, OPTION_CHOICES, Family, FunctionInfo
from trinity.algorithm.class_adapters import class_default_args, is_class_entry
from trinity.algorithm.options import UnknownOptionError, check_option_names, check_options
from trinity.utils.registry import UnknownNameError


class PlanError(ValueError):
    """The algorithm section asks for a combination the trainer cannot run (one line: what, where, what to do)."""


def config_name(raw: str) -> str:
    """Return a name as the registries key it: stripped, lower-cased unless it is a Python path."""
    name = raw.strip()
    return name if "." in name else name.lower()


def check_name(family: Family, name: str, where: str) -> None:
    """Raise UnknownNameError (naming the config key ``where``) unless ``name`` resolves in ``family``.

    A name that is not registered but is a Python path (``my_pkg.losses.my_loss``) is imported to check it.
    """
    registry = family.registry
    if name in registry:
        return
    if "." in name and registry.allow_import_path:
        registry.get(name)
        return
    raise UnknownNameError(f"{where}: {registry.unknown_message(name)}")


def check_value(key: str, value: Any, where: str) -> None:
    """Check an option's value (naming the config key ``where``).

    Raises UnknownNameError for an unknown aggregation mode (any ``*loss_agg_mode``
    option) and PlanError for a choice option (:data:`~trinity.algorithm.catalog.OPTION_CHOICES`)
    out of its choices.
    """
    if key.endswith("loss_agg_mode"):
        if value is not None and value not in AGGREGATIONS.registry:
            raise UnknownNameError(f"{where}: {AGGREGATIONS.registry.unknown_message(str(value))}")
        return
    choices = OPTION_CHOICES.get(key)
    if choices is not None and value not in choices:
        raise PlanError(f"{where}: must be one of {', '.join(repr(c) for c in choices)}, got {value!r}")


def as_number(value: Any, where: str) -> float:
    """Return ``value`` as a float; raises PlanError (naming ``where``) unless it is an int or float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlanError(f"{where}: must be a number, got {value!r}")
    return float(value)


def check_decoupled(options: Mapping[str, Any], where: str) -> None:
    """Check the options of the decoupled PPO objective in ``options``, the option mapping named ``where``.

    Raises PlanError when ``decoupled`` is not true or false, ``behav_imp_weight_cap``
    is neither null nor a number above 1, a cap is set while ``decoupled`` is
    off, or ``decoupled`` is combined with ``fallback_to_policy_gradient``
    (which ignores the log-probs the objective is built on).
    """
    decoupled = options.get("decoupled", False)
    if not isinstance(decoupled, bool):
        raise PlanError(f"{where}.decoupled: must be true or false, got {decoupled!r}")
    cap = options.get("behav_imp_weight_cap")
    if cap is not None:
        if as_number(cap, f"{where}.behav_imp_weight_cap") <= 1.0:
            raise PlanError(f"{where}.behav_imp_weight_cap: must be greater than 1 (null: no cap), got {cap}")
        if not decoupled:
            raise PlanError(
                f"{where}.behav_imp_weight_cap: applies to the decoupled objective only; set decoupled: true "
                "or remove behav_imp_weight_cap"
            )
    if decoupled and options.get("fallback_to_policy_gradient"):
        raise PlanError(
            f"{where}.decoupled: excludes fallback_to_policy_gradient (which ignores the behaviour log-probs "
            "the decoupled objective weights by); turn one of them off"
        )


def resolve_args(
    family: Family,
    name: str,
    given: Mapping[str, Any] | None,
    where: str,
    *,
    defaults: Mapping[str, Any] | None = None,
    shared_options: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], FunctionInfo | None]:
    """Check ``name`` (the config key ``where``) and its options; return ``(options, catalog info)``.

    The options are ``given`` when set, else ``defaults`` when set, else the
    function's upstream default args (``shared_options`` for a user's function
    of a family whose functions all take the same options: KL, entropy). The
    catalog info is None for a user's function, whose signature is then
    inspected (importing it). Raises UnknownNameError, UnknownOptionError or PlanError.
    """
    check_name(family, name, where)
    info = family.info(name)
    if given is not None:
        options = dict(given)
    elif defaults is not None:
        options = dict(defaults)
    elif info is not None:
        options = info.upstream_defaults()
    else:
        entry = family.registry.get(name)
        options = class_default_args(entry) if is_class_entry(entry) else dict(shared_options or {})
    try:
        if info is not None:
            check_option_names(family.kind, name, info.options, options)
        elif shared_options is not None:
            check_option_names(family.kind, name, shared_options, options)
        else:
            check_options(family.kind, name, family.registry.get(name), options)
    except UnknownOptionError as exc:
        raise UnknownOptionError(f"{where}_args: {exc}") from None
    for key, value in options.items():
        check_value(key, value, f"{where}_args.{key}")
    return options, info


#: Options :func:`format_options` leaves out while they keep this value (bookkeeping, or inert by default).
_QUIET = {
    "use_dynamic_bsz": None,
    "ppo_mini_batch_size": 1,
    "ppo_micro_batch_size_per_gpu": 1,
    "ngpus_trainer": 1,
    "train_batch_size_usual": 1,
    "train_batch_size_expert": 1,
    "delta_sequence_masking": 0.1,
    "mask_clip_range_low": 1.0,
    "mask_clip_range_high": 0.28,
    "std_normalize": True,
}


def format_options(options: Mapping[str, Any]) -> str:
    """Return `` (key value, ...)`` for the set options (the aggregation mode bare), or ``""`` when none is shown."""
    shown = []
    for key, value in options.items():
        if value is None or value is False or (key in _QUIET and _QUIET[key] == value):
            continue
        if key.endswith("loss_agg_mode"):
            shown.append(str(value) if key == "loss_agg_mode" else f"{key} {value}")
        elif isinstance(value, float):
            shown.append(f"{key} {value:g}")
        else:
            shown.append(f"{key} {value}")
    return f" ({', '.join(shown)})" if shown else ""
