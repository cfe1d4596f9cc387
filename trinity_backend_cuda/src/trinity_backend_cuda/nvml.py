"""Questions to the NVIDIA driver through NVML, which creates no CUDA context.

``pynvml`` (the ``nvidia-ml-py`` distribution) is a thin ctypes wrapper around
``libnvidia-ml.so.1``: importing it loads nothing, ``nvmlInit`` loads the
library and talks to the kernel driver. Every session here is balanced
(``nvmlInit`` ... ``nvmlShutdown``; NVML counts them) and every NVML error is
turned into a reason and a fix a user can act on.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

# NVML return codes (nvml.h; stable ABI values, also pynvml's NVML_ERROR_* constants).
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_INSUFFICIENT_RESOURCES = 23

#: What to do when there is no NVIDIA driver at all.
INSTALL_DRIVER_FIX = (
    "install the NVIDIA driver (`nvidia-smi` must work); in a container, start it with GPU access "
    "(`--gpus all` and the NVIDIA container toolkit); to run without a GPU choose another backend, "
    "e.g. TRINITY_DEVICE=cpu"
)
_RESET_FIX = "check `nvidia-smi` and `dmesg`; reset the GPU (`nvidia-smi -r`) or reboot the machine"

#: What each NVML error means for a user, and what to do: code -> (reason, fix).
_EXPLANATIONS: dict[int, tuple[str, str]] = {
    NVML_ERROR_LIBRARY_NOT_FOUND: (
        "no NVIDIA driver found: the NVML library libnvidia-ml.so.1 cannot be loaded",
        INSTALL_DRIVER_FIX,
    ),
    NVML_ERROR_DRIVER_NOT_LOADED: (
        "the NVIDIA driver is installed but its kernel module is not loaded",
        "load it (`sudo modprobe nvidia`) or reboot after installing the driver; `nvidia-smi` must list the GPUs",
    ),
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "the NVIDIA driver's user-space library and kernel module have different versions "
        "(usually a driver upgrade without a reboot)",
        "reboot the machine, or unload and reload the nvidia kernel modules",
    ),
    NVML_ERROR_NO_PERMISSION: (
        "this user may not open the NVIDIA devices (/dev/nvidia*)",
        "add the user to the group that owns /dev/nvidia* (often `video`), or start the container with GPU access",
    ),
    NVML_ERROR_GPU_IS_LOST: ("a GPU has fallen off the bus (NVML: GPU is lost)", _RESET_FIX),
    NVML_ERROR_RESET_REQUIRED: ("a GPU needs a reset before it can be used", _RESET_FIX),
    NVML_ERROR_IRQ_ISSUE: ("the NVIDIA kernel driver has an interrupt problem with a GPU", _RESET_FIX),
    NVML_ERROR_CORRUPTED_INFOROM: (
        "a GPU's infoROM is corrupted",
        "run `nvidia-smi -q` to find the GPU and have it serviced; exclude it with CUDA_VISIBLE_DEVICES meanwhile",
    ),
    NVML_ERROR_FUNCTION_NOT_FOUND: (
        "the NVIDIA driver is too old for the installed nvidia-ml-py",
        "upgrade the NVIDIA driver, or install an older nvidia-ml-py matching it",
    ),
    NVML_ERROR_OPERATING_SYSTEM: (
        "the operating system blocked access to the GPUs",
        "check `dmesg` and the container or security policy (cgroups, SELinux/AppArmor) for /dev/nvidia*",
    ),
    NVML_ERROR_TIMEOUT: ("the NVIDIA driver did not answer in time", "check `nvidia-smi`; " + _RESET_FIX),
    NVML_ERROR_INSUFFICIENT_RESOURCES: (
        "the NVIDIA driver is out of resources",
        "check `nvidia-smi` for stuck processes and free them, or reboot",
    ),
}


class NvmlUnavailable(Exception):
    """NVML could not answer; carries a reason and a fix for the user."""

    def __init__(self, reason: str, fix: str, code: int | None = None) -> None:
        super().__init__(f"{reason}; {fix}")
        #: What is wrong.
        self.reason = reason
        #: What to do about it.
        self.fix = fix
        #: The NVML error code, None when the failure was not an NVML error.
        self.code = code


@dataclass(frozen=True)
class NvmlReport:
    """What the driver reported in one NVML session."""

    #: Physical GPUs the driver sees (``CUDA_VISIBLE_DEVICES`` not applied).
    device_count: int
    #: Driver version, e.g. ``"570.124.06"``; empty unless details were asked for.
    driver_version: str = ""
    #: Newest CUDA version the driver supports, as NVML encodes it (12040 for 12.4); 0 when unknown.
    cuda_driver_version: int = 0
    #: UUIDs by NVML index (``"GPU-..."``, ``""`` where unreadable); empty unless asked for.
    uuids: tuple[str, ...] = ()
    #: Product names by NVML index; empty unless details or capabilities were asked for.
    names: tuple[str, ...] = ()
    #: CUDA compute capability ``(major, minor)`` by NVML index (None where unreadable); empty unless asked for.
    capabilities: tuple[tuple[int, int] | None, ...] = ()

    @property
    def cuda_driver_version_text(self) -> str:
        """The driver's CUDA version as ``"major.minor"``, ``""`` when unknown."""
        return format_cuda_version(self.cuda_driver_version)


def format_cuda_version(encoded: int) -> str:
    """Return NVML's encoded CUDA version (1000 * major + 10 * minor) as ``"major.minor"``."""
    if encoded <= 0:
        return ""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def explain(code: int | None, text: str) -> tuple[str, str]:
    """Return ``(reason, fix)`` for an NVML error ``code`` whose message is ``text``."""
    if code is not None and code in _EXPLANATIONS:
        reason, fix = _EXPLANATIONS[code]
        return f"{reason} (NVML: {text})", fix
    where = f"error {code}: {text}" if code is not None else text
    return f"the NVIDIA driver could not be queried (NVML {where})", "run `nvidia-smi` to diagnose the driver"


def _unavailable(exc: BaseException) -> NvmlUnavailable:
    code = getattr(exc, "value", None)
    return NvmlUnavailable(*explain(code if isinstance(code, int) else None, str(exc)), code=code)


def read_nvml(*, uuids: bool = False, details: bool = False, capabilities: bool = False) -> NvmlReport:
    """Ask the driver how many GPUs it has (and, when asked, UUIDs, names, compute capabilities, driver versions).

    Opens and closes one NVML session; creates no CUDA context. Raises
    :class:`NvmlUnavailable` when ``pynvml`` is missing or NVML fails.
    """
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable(
            "nvidia-ml-py (the pynvml module) is not installed",
            "pip install nvidia-ml-py (trinity-backend-cuda depends on it; reinstall the package)",
        ) from exc
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise _unavailable(exc) from exc
    try:
        count = int(pynvml.nvmlDeviceGetCount())
        found_uuids = tuple(_device_string(pynvml, "nvmlDeviceGetUUID", i) for i in range(count)) if uuids else ()
        names = (
            tuple(_device_string(pynvml, "nvmlDeviceGetName", i) for i in range(count))
            if details or capabilities
            else ()
        )
        found_capabilities = tuple(_capability(pynvml, i) for i in range(count)) if capabilities else ()
        if not details:
            return NvmlReport(device_count=count, uuids=found_uuids, names=names, capabilities=found_capabilities)
        return NvmlReport(
            device_count=count,
            driver_version=str(pynvml.nvmlSystemGetDriverVersion()),
            cuda_driver_version=_cuda_driver_version(pynvml),
            uuids=found_uuids,
            names=names,
            capabilities=found_capabilities,
        )
    except pynvml.NVMLError as exc:
        raise _unavailable(exc) from exc
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def _device_string(pynvml: Any, function: str, index: int) -> str:
    """Return ``function(handle of GPU index)``, ``""`` when that GPU cannot answer."""
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return str(getattr(pynvml, function)(handle))
    except pynvml.NVMLError:
        return ""


def _capability(pynvml: Any, index: int) -> tuple[int, int] | None:
    """Return GPU ``index``'s CUDA compute capability ``(major, minor)``, None when it cannot answer."""
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        return int(major), int(minor)
    except pynvml.NVMLError:
        return None


def _cuda_driver_version(pynvml: Any) -> int:
    try:
        return int(pynvml.nvmlSystemGetCudaDriverVersion())
    except pynvml.NVMLError:
        return 0
