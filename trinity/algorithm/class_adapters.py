"""Running algorithm pieces written in upstream Trinity-RFT's class shapes inside trinity-rft's trainer and buffer.

trinity-rft's built-in pieces are functions (``fn(inputs, **options)``);
upstream's are classes built once with the config's ``*_args`` and then
called. Both live in the same registries. This module is the one place that
tells them apart and bridges them:

* :func:`build` makes the instance (``*_args`` bound to the constructor;
  a ``loss_agg_mode`` the constructor does not take becomes the instance's
  attribute, as upstream's guide code expects);
* :func:`call_policy_loss` passes a :class:`~trinity.algorithm.policy_loss_fn.PolicyLossFn`
  the tensors its ``__call__`` names, in upstream's names;
* :func:`run_advantage` gives an :class:`~trinity.algorithm.advantage_fn.AdvantageFn`
  the experiences of complete groups, with upstream's ``eid`` and ``action_mask``;
* :func:`call_kl` and :func:`call_entropy` do the same for KL and entropy classes.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Mapping
from typing import Any, TypeGuard

from trinity.algorithm.options import UnknownOptionError

#: Upstream's tensor names a policy loss may read, and the field of trinity-rft's PolicyLossInputs behind each.
LOSS_TENSORS: Mapping[str, str] = {
    "old_logprob": "old_logprobs",
    "action_mask": "response_mask",
    "advantages": "advantages",
    "ref_logprob": "ref_logprobs",
    "expert_mask": "expert_mask",
}
#: What a policy loss class reading each of those makes the plan provide (names of the catalog's READABLE).
LOSS_READS: Mapping[str, str] = {"old_logprob": "old_logprobs", "advantages": "advantages",
                                 "ref_logprob": "ref_logprobs", "expert_mask": "expert_mask"}

_instances: dict[tuple[type, str], Any] = {}
_lock = threading.Lock()


def is_class_entry(entry: object) -> TypeGuard[type]:
    """Whether a registry entry is a class (upstream's shape) rather than one of trinity-rft's functions."""
    return isinstance(entry, type)


def class_default_args(cls: type) -> dict[str, Any]:
    """Return ``cls.default_args()`` (upstream's defaults when a config gives no ``*_args``), or ``{}``."""
    default_args = getattr(cls, "default_args", None)
    if default_args is None:
        return {}
    result = default_args()
    if not isinstance(result, Mapping):
        raise ValueError(f"{cls.__name__}.default_args() must return a dict, got {type(result).__name__}")
    return dict(result)


def _accepts(cls: type, name: str) -> bool:
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return True
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def constructor_options(cls: type, options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``options`` into what ``cls``'s constructor takes and the ``loss_agg_mode`` it does not take."""
    given = dict(options)
    attributes = {}
    if "loss_agg_mode" in given and not _accepts(cls, "loss_agg_mode"):
        attributes["loss_agg_mode"] = given.pop("loss_agg_mode")
    return given, attributes


def check_class_options(kind: str, name: str, cls: type, options: Mapping[str, Any]) -> None:
    """Raise :class:`UnknownOptionError` (one line) unless ``cls(**options)`` binds to the constructor."""
    given, _ = constructor_options(cls, options)
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(**given)
    except TypeError as exc:
        names = [p for p, v in signature.parameters.items() if v.kind not in (v.VAR_KEYWORD, v.VAR_POSITIONAL)]
        raise UnknownOptionError(
            f"{kind} {name!r} ({cls.__name__}) cannot be built with {given}: {exc} "
            f"(its arguments: {', '.join(names) or 'none'})"
        ) from None


def build(cls: type, options: Mapping[str, Any], *, backend: str | None = None) -> Any:
    """Return ``cls`` built with ``options`` (and ``backend`` when its constructor takes one), cached per options."""
    key = (cls, repr(sorted(dict(options).items())))  # the class itself: an id could be reused by a later class
    with _lock:
        instance = _instances.get(key)
        if instance is None:
            given, attributes = constructor_options(cls, options)
            if backend is not None and _accepts(cls, "backend") and "backend" not in given:
                given["backend"] = backend
            instance = cls(**given)
            for attribute, value in attributes.items():
                setattr(instance, attribute, value)
            _instances[key] = instance
    return instance


def call_parameters(fn: Any) -> tuple[list[str], list[str]]:
    """Return ``(named, required)`` parameters of ``fn.__call__`` (``self`` and ``**kwargs`` left out)."""
    params = inspect.signature(fn.__call__).parameters
    named = [n for n, p in params.items() if n != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    required = [n for n in named if params[n].default is inspect.Parameter.empty]
    return named, required


def policy_loss_reads(cls: type, name: str) -> frozenset[str]:
    """Return what a policy loss class reads (READABLE names); raises ValueError for a parameter it cannot get."""
    named, required = call_parameters(cls)
    known = {"logprob", "step", *LOSS_TENSORS}
    missing = [n for n in required if n not in known]
    if missing:
        raise ValueError(
            f"policy loss {name!r} ({cls.__name__}) asks for {missing}, which the trainer does not pass; a policy "
            f"loss's __call__ may name: logprob, {', '.join(LOSS_TENSORS)}, step"
        )
    reads = {LOSS_READS[n] for n in named if n in LOSS_READS}
    if "step" in named:
        reads.add("global_step")
    return frozenset(reads)


def call_policy_loss(cls: type, inputs: Any, options: Mapping[str, Any]) -> tuple[Any, dict[str, float]]:
    """Return ``(loss, metrics)`` of the policy loss class ``cls`` on trinity-rft's ``PolicyLossInputs``."""
    import torch

    instance = build(cls, options, backend="trinity")
    named, _ = call_parameters(instance)
    mask = inputs.mask
    kwargs: dict[str, Any] = {}
    for param in named:
        if param == "logprob":
            continue
        if param == "step":
            kwargs["step"] = inputs.global_step
        elif param == "action_mask":
            kwargs["action_mask"] = mask.to(inputs.logprobs.dtype)
        elif param in LOSS_TENSORS:
            value = getattr(inputs, LOSS_TENSORS[param])
            if value is not None and value.dim() == 2:
                value = torch.where(mask, value, value.new_zeros(()))
            kwargs[param] = value
    loss, metrics = instance(logprob=inputs.masked_logprobs(), **kwargs)
    return loss, {k: float(v.item() if hasattr(v, "item") else v) for k, v in dict(metrics or {}).items()}


def call_kl(cls: type, logprobs: Any, ref_logprobs: Any) -> Any:
    """Return the per-token KL of the KL class ``cls`` (built with its defaults; the coefficient is the plan's)."""
    return build(cls, {}).calculate_kl(logprobs, ref_logprobs)


def call_entropy(
    cls: type, entropy: Any, response_mask: Any, options: Mapping[str, Any]
) -> tuple[Any, dict[str, float]]:
    """Return ``(term, metrics)`` of the entropy class ``cls``: built with ``entropy_coef``, called with the rest."""
    options = dict(options)
    coef = options.pop("entropy_coef", 0.0)
    instance = build(cls, {"entropy_coef": coef})
    named, _ = call_parameters(instance)
    kwargs = {k: v for k, v in options.items() if k in named or k == "loss_agg_mode"}
    if "loss_agg_mode" not in named and not _var_keyword(instance):
        kwargs.pop("loss_agg_mode", None)
    term, metrics = instance(entropy, response_mask.to(entropy.dtype), **kwargs)
    return term, {k: float(v.item() if hasattr(v, "item") else v) for k, v in dict(metrics or {}).items()}


def _var_keyword(instance: Any) -> bool:
    params = inspect.signature(instance.__call__).parameters.values()
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def run_advantage(
    cls: type, name: str, options: Mapping[str, Any], experiences: list[Any]
) -> tuple[list[Any], dict[str, float]]:
    """Return ``experiences`` (complete groups) with advantages and returns set by the advantage class ``cls``,
    and its numeric metrics.

    Each experience without one gets an ``eid`` whose task is its group (so
    ``group_by(exps, "task")`` finds the groups). Raises ValueError (one line)
    when the class leaves an experience without advantages of its response's length.
    """
    import dataclasses

    from trinity.common.experience import EID

    prepared = []
    for exp in experiences:
        eid = exp.eid
        if eid is None or str(eid.task) == "":
            eid = EID(batch="" if eid is None else eid.batch, task=exp.group_id, run=exp.run_id,
                      step=0 if eid is None else eid.step)
        prepared.append(dataclasses.replace(exp, eid=eid))
    instance = build(cls, options)
    result = instance(prepared)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ValueError(f"advantage function {name!r} ({cls.__name__}) must return (experiences, metrics), "
                         f"got {type(result).__name__}")
    out, metrics = result
    for exp in out:
        response = len(exp.tokens) - exp.prompt_length
        if exp.advantages is None or tuple(exp.advantages.shape) != (response,):
            shape = None if exp.advantages is None else tuple(exp.advantages.shape)
            raise ValueError(
                f"advantage function {name!r} ({cls.__name__}) left experience {exp.run_id} of group "
                f"{exp.group_id!r} with advantages of shape {shape}; it must set exp.advantages (and exp.returns) "
                f"to a tensor over the response tokens, shape ({response},)"
            )
        if exp.returns is None:
            exp.returns = exp.advantages.clone()
        exp.advantages = exp.advantages.detach().float()
        exp.returns = exp.returns.detach().float()
    numeric = {k: float(v.item() if hasattr(v, "item") else v) for k, v in dict(metrics or {}).items()
               if isinstance(v, (int, float)) or hasattr(v, "item")}
    return list(out), numeric


__all__ = [
    "build",
    "call_entropy",
    "call_kl",
    "call_policy_loss",
    "check_class_options",
    "class_default_args",
    "is_class_entry",
    "policy_loss_reads",
    "run_advantage",
]
