"""Plain values exchanged between the core and device backends.

Backends return these from their hooks; the core never hands out a backend's
own objects. All are immutable so a cached answer cannot be changed by a caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class BackendInfo:
    """Static facts about a backend. Must be cheap to compute and touch no device."""

    #: Backend name; must equal the name of the ``trinity.backends`` entry point.
    name: str
    #: The torch device type tensors live on (``"cuda"``, ``"npu"``, ``"cpu"``).
    device_type: str
    #: Higher wins in ``auto`` selection. The built-in CPU backend has 0.
    priority: int
    #: The spec version this backend was written against (see ``SPEC_VERSION``).
    spec_version: int
    #: The torch.distributed backend for device tensors (``"nccl"``, ``"hccl"``, ``"gloo"``).
    collective_backend: str
    #: Ray resource name one device is scheduled by (``"GPU"``, ``"NPU"``); None when
    #: the backend needs no device resource (CPU).
    ray_resource_key: str | None = None
    #: Environment variable that masks the devices a process sees
    #: (``"CUDA_VISIBLE_DEVICES"``); None when there is none.
    visible_devices_env: str | None = None
    #: Prefixes of environment variables a Ray worker must inherit (``"HCCL_"``).
    worker_env_prefixes: tuple[str, ...] = ()
    #: One line for humans: what hardware this drives.
    description: str = ""


@dataclass(frozen=True)
class ProbeResult:
    """Whether the backend can run here, found without initialising the device."""

    #: True when at least one device is usable by this process.
    available: bool
    #: Devices this process may use (after visible-device masking).
    device_count: int = 0
    #: Why the backend is not available, phrased so a user knows what to fix.
    reason: str = ""

    @classmethod
    def unavailable(cls, reason: str) -> ProbeResult:
        """A probe result saying the backend cannot run here, and why."""
        return cls(available=False, device_count=0, reason=reason)


@dataclass(frozen=True)
class CompileSupport:
    """Whether ``torch.compile`` works on this backend, and whether the trainer should use it by default."""

    #: True when ``torch.compile`` can be used for models on this device.
    supported: bool
    #: Why not (or a note when it is); shown to users who ask for compile anyway, and by ``--dry-run``.
    reason: str = ""
    #: Whether the trainer compiles when ``trainer.use_torch_compile`` is unset; None: exactly when supported.
    #: A backend where compiling works but costs more than it saves sets it False (and says why in ``reason``).
    advised: bool | None = None

    @property
    def on_by_default(self) -> bool:
        """Whether ``use_torch_compile`` left unset means compile: ``advised``, else ``supported``."""
        return self.supported and (self.supported if self.advised is None else self.advised)


@dataclass(frozen=True)
class MemoryStats:
    """Device memory of the current device, in bytes."""

    #: Bytes held by live tensors.
    allocated: int
    #: Bytes held by the caching allocator (allocated plus cached).
    reserved: int
    #: Total device memory; 0 when unknown.
    total: int = 0
    #: Free device memory as the driver reports it; 0 when unknown.
    free: int = 0


CheckStatus = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class DoctorCheck:
    """One diagnostic finding of ``trinity backends check``."""

    #: Short name of what was checked ("CANN environment", "NVIDIA driver").
    name: str
    #: ``ok``, ``warn`` (works but suspicious) or ``fail`` (will not work).
    status: CheckStatus
    #: What was found.
    detail: str = ""
    #: What to do about a ``warn`` or ``fail``; empty when nothing is needed.
    fix: str = ""
    #: Extra structured facts (versions, paths) for ``--json`` output.
    facts: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CollectiveGroup:
    """A process group built without a default process group (``trinity_stateless_process_group``)."""

    #: The c10d process-group object. ``process_group.broadcast(tensor, root)`` returns a work
    #: handle whose ``wait()`` blocks until the tensor is in place; ``shutdown()``, when present,
    #: releases the group.
    process_group: Any
    #: Device type the group's tensors must live on (``"cpu"`` for gloo, the backend's otherwise).
    device_type: str
    #: The collective the group runs (``"gloo"``, ``"nccl"``, ``"hccl"``).
    collective: str


@dataclass(frozen=True)
class DtypeSupport:
    """The floating-point dtypes models compute in on a device, by torch name (``"bfloat16"``)."""

    #: Dtypes the device computes models in, the preferred one first (what ``dtype: auto`` becomes).
    supported: tuple[str, ...]
    #: Why a dtype is not supported, by name, phrased so a user knows what to choose instead.
    unsupported: dict[str, str] = field(default_factory=dict)
    #: A remark on how the answer was found (e.g. the device could not be asked here); may be empty.
    note: str = ""

    @property
    def preferred(self) -> str:
        """The dtype models are loaded in when the config leaves the choice to the device."""
        return self.supported[0]

    def reason(self, dtype: str) -> str:
        """Return why ``dtype`` cannot be used (the backend's reason when it gave one)."""
        return self.unsupported.get(dtype) or f"{dtype} is not among the supported {', '.join(self.supported)}"


@dataclass(frozen=True)
class OffloadSupport:
    """Whether FSDP2 may keep parameters and optimizer state in host memory between uses on this device."""

    #: True when torch's FSDP2 ``CPUOffloadPolicy`` and moving optimizer state to the host work here.
    supported: bool
    #: Whether host copies are pinned (page-locked) for faster, asynchronous transfers.
    pin_memory: bool = False
    #: Why not, or what offload means here; shown in the plan of a run that asks for offload.
    reason: str = ""


@dataclass(frozen=True)
class AttentionChoice:
    """The attention kernel models are loaded with (transformers' ``attn_implementation``)."""

    #: ``"sdpa"``, ``"eager"``, ``"flash_attention_2"``, ... as ``from_pretrained`` accepts it.
    implementation: str
    #: Why this one (shown in the plan), e.g. what to install for a faster kernel.
    reason: str = ""
