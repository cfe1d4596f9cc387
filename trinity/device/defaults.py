"""Built-in answers for every optional hook, written against torch's device-agnostic API.

Each loaded backend holds one ``DefaultHooks`` bound to its ``BackendInfo``
and calls it for every hook the backend does not implement; a backend
overrides only what differs. The methods carry hook markers so a test can
register the class against the spec and prove the signatures match.
torch is imported on first use, never at load time.
"""

from __future__ import annotations

import datetime
import importlib
import importlib.util
import os
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from trinity.device.collectives import default_stateless_group
from trinity.device.spec import hookimpl
from trinity.device.types import (
    AttentionChoice,
    BackendInfo,
    CollectiveGroup,
    CompileSupport,
    DoctorCheck,
    DtypeSupport,
    MemoryStats,
    OffloadSupport,
)


def forwarded_env(
    info: BackendInfo, environ: Mapping[str, str], self_managed_devices: bool
) -> dict[str, str]:
    """Return the variables of ``environ`` a worker of ``info``'s backend must inherit.

    Variables matching ``info.worker_env_prefixes`` are copied, except the
    visible-devices variable (Ray sets it per worker). When the worker manages
    its devices itself, Ray is told not to set that variable.
    """
    env = {
        key: value
        for key, value in environ.items()
        if key.startswith(info.worker_env_prefixes) and key != info.visible_devices_env
    }
    if self_managed_devices and info.visible_devices_env:
        env[f"RAY_EXPERIMENTAL_NOSET_{info.visible_devices_env}"] = "1"
    return env


#: What torch's own kernels compute in on the host CPU; float32 first: exact, and fastest on CPUs
#: without native bfloat16 instructions.
DEFAULT_DTYPES = DtypeSupport(supported=("float32", "bfloat16", "float16"))
#: torch's ``scaled_dot_product_attention``: every torch device type has it.
DEFAULT_ATTENTION = AttentionChoice("sdpa", "torch scaled_dot_product_attention")
#: The default offload answer on the host CPU: supported, and a no-op (the device memory is host memory).
HOST_OFFLOAD = OffloadSupport(True, pin_memory=False,
                              reason="the device is the host: parameters and optimizer state stay where they are")
#: The default offload answer on an accelerator: FSDP2's CPUOffloadPolicy with pinned host copies.
DEVICE_OFFLOAD = OffloadSupport(True, pin_memory=True, reason="FSDP2 CPUOffloadPolicy with pinned host memory")


class DefaultHooks:
    """Default implementations for one backend, using ``torch.get_device_module``."""

    def __init__(self, info: BackendInfo) -> None:
        self._info = info
        self._module: ModuleType | None = None
        self._module_provider: Callable[[], ModuleType] | None = None

    def use_device_module(self, provider: Callable[[], ModuleType]) -> None:
        """Take the device module from the backend's own ``trinity_device_module`` (e.g. after importing torch_npu)."""
        self._module_provider = provider
        self._module = None

    def _device_module(self) -> ModuleType:
        if self._module is None:
            if self._module_provider is not None:
                self._module = self._module_provider()
            else:
                import torch

                self._module = torch.get_device_module(self._info.device_type)
        return self._module

    @hookimpl(trylast=True)
    def trinity_torch_compile_support(self) -> CompileSupport:
        return CompileSupport(supported=True)

    @hookimpl(trylast=True)
    def trinity_device_module(self) -> ModuleType:
        return self._device_module()

    @hookimpl(trylast=True)
    def trinity_set_device(self, local_rank: int) -> None:
        self._device_module().set_device(local_rank)

    @hookimpl(trylast=True)
    def trinity_current_device_index(self) -> int:
        index = self._device_module().current_device()
        # torch.cpu.current_device() answers "cpu": the host is one device.
        return index if isinstance(index, int) else 0

    @hookimpl(trylast=True)
    def trinity_synchronize(self) -> None:
        self._device_module().synchronize()

    @hookimpl(trylast=True)
    def trinity_empty_cache(self) -> None:
        empty_cache = getattr(self._device_module(), "empty_cache", None)
        if empty_cache is not None:
            empty_cache()

    @hookimpl(trylast=True)
    def trinity_memory_stats(self) -> MemoryStats:
        module = self._device_module()

        def read(name: str) -> int:
            fn = getattr(module, name, None)
            return int(fn()) if fn is not None else 0

        free, total = 0, 0
        mem_get_info = getattr(module, "mem_get_info", None)
        if mem_get_info is not None:
            free, total = (int(x) for x in mem_get_info())
        return MemoryStats(
            allocated=read("memory_allocated"), reserved=read("memory_reserved"), total=total, free=free
        )

    @hookimpl(trylast=True)
    def trinity_manual_seed(self, seed: int) -> None:
        import torch

        torch.manual_seed(seed)
        seed_all = getattr(self._device_module(), "manual_seed_all", None)
        if seed_all is not None:
            seed_all(seed)

    @hookimpl(trylast=True)
    def trinity_visible_devices_env(self, device_ids: Sequence[int]) -> dict[str, str]:
        if not self._info.visible_devices_env:
            return {}
        return {self._info.visible_devices_env: ",".join(str(int(i)) for i in device_ids)}

    @hookimpl(trylast=True)
    def trinity_worker_env(self, self_managed_devices: bool) -> dict[str, str]:
        return forwarded_env(self._info, os.environ, self_managed_devices)

    @hookimpl(trylast=True)
    def trinity_supported_dtypes(self) -> DtypeSupport:
        return DEFAULT_DTYPES

    @hookimpl(trylast=True)
    def trinity_attention_implementation(self, dtype: str) -> AttentionChoice:
        return DEFAULT_ATTENTION

    @hookimpl(trylast=True)
    def trinity_offload_support(self) -> OffloadSupport:
        return HOST_OFFLOAD if self._info.device_type == "cpu" else DEVICE_OFFLOAD

    @hookimpl(trylast=True)
    def trinity_doctor(self) -> list[DoctorCheck]:
        return [torch_install_check()]

    @hookimpl(trylast=True)
    def trinity_stateless_process_group(  # noqa: PLR0917 - pluggy passes arguments by name
        self, collective: str, store: Any, rank: int, world_size: int, timeout: datetime.timedelta, group_name: str
    ) -> CollectiveGroup:
        return default_stateless_group(
            collective, store, rank, world_size, timeout,
            group_name=group_name, device_type=self._info.device_type, backend_name=self._info.name,
        )


def torch_install_check() -> DoctorCheck:
    """Report the installed torch version without importing torch."""
    if importlib.util.find_spec("torch") is None:
        return DoctorCheck(
            "torch", "fail", "torch is not installed", fix="install the torch build for your device (pip install torch)"
        )
    from importlib.metadata import PackageNotFoundError, version

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = "unknown"
    return DoctorCheck("torch", "ok", f"torch {torch_version} installed", facts={"torch": torch_version})


__all__ = ["DEFAULT_ATTENTION", "DEFAULT_DTYPES", "DefaultHooks", "forwarded_env", "torch_install_check"]
