"""The hook implementations of the ``npu`` backend (entry point ``trinity_backend_npu.plugin``).

Loading this module, its info and its probe import neither torch nor
torch_npu. Hooks that need the device reach torch_npu through
:func:`trinity_backend_npu.runtime.device_module`, which imports it on first
use. Because ``trinity_device_module`` is implemented, the core's defaults
for ``set_device``, ``synchronize``, ``empty_cache``, memory figures and
seeding call ``torch.npu`` through it, so they are not repeated here.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from trinity.device.spec import hookimpl
from trinity.device.types import (
    AttentionChoice,
    BackendInfo,
    CollectiveGroup,
    CompileSupport,
    DoctorCheck,
    DtypeSupport,
    ProbeResult,
)
from trinity_backend_npu import doctor as _doctor
from trinity_backend_npu import probe as _probe
from trinity_backend_npu import process_groups as _process_groups
from trinity_backend_npu import runtime as _runtime
from trinity_backend_npu import workerenv as _workerenv
from trinity_backend_npu.info import ATTENTION, COMPILE_SUPPORT, DTYPE_SUPPORT, INFO


@hookimpl
def trinity_backend_info() -> BackendInfo:
    """Return the NPU backend's static facts."""
    return INFO


@hookimpl
def trinity_probe() -> ProbeResult:
    """Probe for NPUs from device files, torch_npu's presence and the CANN environment."""
    return _probe.probe()


@hookimpl
def trinity_torch_compile_support() -> CompileSupport:
    """torch.compile is not supported: inductor has no NPU driver."""
    return COMPILE_SUPPORT


@hookimpl
def trinity_device_module() -> ModuleType:
    """Return ``torch.npu``, importing torch_npu on first use."""
    return _runtime.device_module()


@hookimpl
def trinity_visible_devices_env(device_ids: Sequence[int]) -> dict[str, str]:
    """Return ``ASCEND_RT_VISIBLE_DEVICES`` for ``device_ids``, ascending (CANN requires it)."""
    return _workerenv.visible_devices_env(device_ids)


@hookimpl
def trinity_worker_env(self_managed_devices: bool) -> dict[str, str]:
    """Return the CANN/HCCL environment an NPU Ray worker must inherit from the driver."""
    return _workerenv.worker_env(os.environ, self_managed_devices)


@hookimpl
def trinity_supported_dtypes() -> DtypeSupport:
    """Return bfloat16 (preferred), float16 and float32: what Ascend 910B and newer compute models in."""
    return DTYPE_SUPPORT


@hookimpl
def trinity_attention_implementation(dtype: str) -> AttentionChoice:
    """Return ``sdpa``: FlashAttention-2 does not exist for Ascend; torch_npu fuses sdpa itself."""
    return ATTENTION


@hookimpl
def trinity_doctor() -> list[DoctorCheck]:
    """Return the NPU checks: devices, driver, CANN, NNAL/ATB, torch_npu, vllm-ascend, autoload."""
    return _doctor.run_checks()


@hookimpl
def trinity_stateless_process_group(  # noqa: PLR0917 - pluggy passes arguments by name
    collective: str, store: Any, rank: int, world_size: int, timeout: datetime.timedelta, group_name: str
) -> CollectiveGroup:
    """Return an HCCL group built from torch_npu's ProcessGroupHCCL (gloo and others: the core's route)."""
    return _process_groups.stateless_process_group(collective, store, rank, world_size, timeout, group_name)
