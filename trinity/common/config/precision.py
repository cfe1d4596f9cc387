"""The model dtype, attention kernel and offload of a run, decided by the device backend.

``explorer.rollout_model.dtype`` (the engines' weights and the trainer's
compute dtype) and each auxiliary model's ``dtype`` are checked against the
dtypes the backend computes in; ``auto`` becomes the backend's preferred one.
The trainer and the engines ask the backend again where they load the model,
so a worker whose device knows better (a GPU seen from a CPU-only head node)
has the last word. A run asking for offload (veRL's ``param_offload``,
``optimizer_offload``, ``offload_policy``) is refused here when the backend
says its device cannot, with the backend's reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from trinity.common.config.loader import ConfigError, in_file
from trinity.common.config.plan.run import RunPlan
from trinity.device import facade
from trinity.device.backend import AUTO_DTYPE, Backend
from trinity.device.errors import UnsupportedDtypeError
from trinity.device.selection import DEVICE_ENV, normalise_choice
from trinity.device.types import AttentionChoice, DtypeSupport, OffloadSupport


@dataclass(frozen=True)
class Precision:
    """The policy model's dtype and attention kernel on one backend."""

    #: Name of the backend that decided.
    backend: str
    #: What the config asked for (``auto`` or a dtype name).
    requested: str
    #: The dtype models are loaded in.
    dtype: str
    #: What the backend computes in.
    support: DtypeSupport
    #: The attention kernel models are loaded with in ``dtype``.
    attention: AttentionChoice
    #: The backend's offload answer, when the run asks for offload; with what is offloaded, per model.
    offload: OffloadSupport | None = None
    offloaded: tuple[str, ...] = ()

    def describe(self) -> list[str]:
        """Plain lines for ``trinity run --dry-run``."""
        if self.requested == AUTO_DTYPE:
            how = f"auto: the {self.backend} backend's preferred"
        else:
            how = "as configured"
        lines = [
            f"dtype {self.dtype} ({how}; the device computes in {', '.join(self.support.supported)})",
            f"attention {self.attention.implementation}"
            + (f" ({self.attention.reason})" if self.attention.reason else ""),
        ]
        if self.support.note:
            lines.append(f"dtypes: {self.support.note}")
        if self.offload is not None:
            lines.append(f"offload: {'; '.join(self.offloaded)}"
                         + (f" ({self.offload.reason})" if self.offload.reason else ""))
        return lines


def _check(backend: Backend, requested: str, where: str) -> str:
    try:
        return backend.resolve_dtype(requested)
    except UnsupportedDtypeError as exc:
        raise ConfigError(f"{where}.dtype: {exc}") from None


def resolve_precision(plan: RunPlan, backend: Backend) -> Precision:
    """Return the policy model's :class:`Precision` on ``backend``; every engine's dtype is checked too.

    Raises ConfigError, with the backend's reason, for a dtype the device cannot compute in.
    """
    requested = plan.model.dtype
    dtype = _check(backend, requested, "explorer.rollout_model")
    if plan.uses_explorer:
        for index, aux in enumerate(plan.explorer.auxiliary):
            if aux.external is None:  # an external endpoint computes elsewhere
                _check(backend, aux.dtype, f"explorer.auxiliary_models[{index}] ({aux.name})")
    offload, offloaded = _offload(plan, backend)
    return Precision(backend=backend.name, requested=requested, dtype=dtype, support=backend.supported_dtypes(),
                     attention=backend.attention_implementation(dtype), offload=offload, offloaded=offloaded)


def _offload(plan: RunPlan, backend: Backend) -> tuple[OffloadSupport | None, tuple[str, ...]]:
    """Return the backend's offload answer and what each model offloads; ConfigError when the device cannot."""
    trainer = plan.trainer
    if trainer is None or not trainer.offloads:
        return None, ()
    models = [("actor", trainer.offload), ("reference model", trainer.reference_offload)]
    if trainer.critic is not None:
        models.append(("critic", trainer.critic.offload))
    offloaded = tuple(f"{name} {offload.describe()}" for name, offload in models if offload.any)
    support = backend.offload_support()
    if not support.supported:
        raise ConfigError(
            f"trainer.trainer_config: the {' and '.join(n for n, o in models if o.any)} ask(s) for offload "
            f"(fsdp_config.param_offload / optimizer_offload / offload_policy), but the {backend.name} backend "
            f"cannot: {support.reason or 'no reason given'}; set those keys false"
        )
    return support, offloaded


def check_named_backend(plan: RunPlan) -> None:
    """Refuse a dtype the explicitly chosen backend cannot compute in, before Ray is started or joined.

    The choice is ``cluster.device`` or ``TRINITY_DEVICE``; with ``auto`` the
    cluster decides the backend, so the check waits for the layout. A backend
    that is not installed or does not load is left to the selection, which
    reports it. Raises ConfigError with the backend's reason.
    """
    name = normalise_choice(plan.cluster.device) or normalise_choice(os.environ.get(DEVICE_ENV))
    record = facade.get_backend_record(name) if name else None
    if record is None or record.backend is None:
        return
    try:
        resolve_precision(plan, record.backend)
    except ConfigError as exc:
        raise in_file(plan.config, exc) from None
