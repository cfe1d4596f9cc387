"""The hook implementations of the CUDA backend (entry point ``cuda`` in ``trinity.backends``).

Only what differs from the core's defaults is implemented: the defaults already
call ``torch.cuda`` through ``torch.get_device_module("cuda")`` for
``set_device``, ``synchronize``, ``current_device``, ``empty_cache``, memory
statistics and seeding, and build ``CUDA_VISIBLE_DEVICES=i,j`` in the order
given (CUDA accepts any order). Importing this module imports neither torch
nor pynvml.
"""

from __future__ import annotations

import datetime
import os
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
from trinity_backend_cuda import compile_support, doctor, dtypes, probe, process_groups, workerenv
from trinity_backend_cuda.info import INFO


@hookimpl
def trinity_backend_info() -> BackendInfo:
    """Return the CUDA backend's static facts."""
    return INFO


@hookimpl
def trinity_probe() -> ProbeResult:
    """Return whether CUDA GPUs are usable, through NVML and without importing torch."""
    return probe.probe()


@hookimpl
def trinity_torch_compile_support() -> CompileSupport:
    """Return whether ``torch.compile`` works: it needs triton."""
    return compile_support.compile_support()


@hookimpl
def trinity_device_module() -> ModuleType:
    """Return ``torch.cuda`` (importing torch, so only call this where the GPU is used)."""
    import torch

    return torch.cuda


@hookimpl
def trinity_worker_env(self_managed_devices: bool) -> dict[str, str]:
    """Return the core's forwarded environment plus what NCCL weight sync with vLLM needs."""
    return workerenv.worker_env(os.environ, self_managed_devices)


@hookimpl
def trinity_supported_dtypes() -> DtypeSupport:
    """Return the dtypes the GPUs compute in (bfloat16 from compute capability 8.0 on), read through NVML."""
    return dtypes.supported_dtypes()


@hookimpl
def trinity_attention_implementation(dtype: str) -> AttentionChoice:
    """Return ``flash_attention_2`` where flash_attn is installed and usable in ``dtype``, else ``sdpa``."""
    return dtypes.attention_implementation(dtype)


@hookimpl
def trinity_doctor() -> list[DoctorCheck]:
    """Return the driver, CUDA_VISIBLE_DEVICES, torch build, NCCL and triton checks."""
    return doctor.run_checks()


@hookimpl
def trinity_stateless_process_group(  # noqa: PLR0917 - pluggy passes arguments by name
    collective: str, store: Any, rank: int, world_size: int, timeout: datetime.timedelta, group_name: str
) -> CollectiveGroup:
    """Return an NCCL group connected on the current GPU (gloo and others: the core's route)."""
    return process_groups.stateless_process_group(collective, store, rank, world_size, timeout, group_name)
