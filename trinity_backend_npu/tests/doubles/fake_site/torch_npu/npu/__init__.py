"""Test double of ``torch_npu.npu`` (registered as ``torch.npu``), not the real module.

Keeps per-process device state in Python: the current device, a byte count
per device that :func:`_double_allocate` moves (there are no real NPU
tensors), and the seed. Invalid device ids raise ``RuntimeError`` the way
torch_npu does when ``aclrtSetDevice`` rejects an id (error code 107001).
"""

import os

import torch

#: Lets the double recognise its own earlier registration.
IS_TORCH_NPU_DOUBLE = True

#: HBM of one Ascend 910B3.
_TOTAL_BYTES = 64 * 1024**3

_state = {"current": 0, "seed": 0}
_allocated: dict[int, int] = {}
_reserved: dict[int, int] = {}


def _physical_count() -> int:
    return int(os.environ.get("FAKE_TORCH_NPU_DEVICES", "8"))


def device_count() -> int:
    """Return the NPUs this process sees: the double's count masked by ASCEND_RT_VISIBLE_DEVICES."""
    physical = _physical_count()
    raw = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    if raw is None:
        return physical
    ids = {int(x) for x in raw.split(",") if x.strip().isdigit()}
    return len([i for i in ids if i < physical])


def is_available() -> bool:
    """Return True when at least one NPU is visible."""
    return device_count() > 0


def _is_in_bad_fork() -> bool:
    """torch.manual_seed asks this before seeding a privateuse1 device."""
    return False


def _get_device_index(device=None) -> int:
    if device is None:
        return _state["current"]
    if isinstance(device, torch.device):
        if device.type != "npu":
            raise ValueError(f"Expected a npu device, but got: {device}")
        return _state["current"] if device.index is None else device.index
    if isinstance(device, str):
        return _get_device_index(torch.device(device) if "npu" in device else int(device))
    if isinstance(device, int):
        return device
    raise TypeError(f"invalid device {device!r}")


def _check(index: int, api: str) -> int:
    if index < 0 or index >= device_count():
        raise RuntimeError(
            f"{api}:torch_npu/csrc/core/npu/NPUFunctions.cpp: NPU function error: aclrtSetDevice({index}), "
            f"error code is 107001\n[ERROR] Invalid device ID. Check whether the device ID is valid "
            f"({device_count()} NPU(s) visible)."
        )
    return index


def set_device(device) -> None:
    """Make ``device`` current; raises RuntimeError for an id outside the visible NPUs."""
    _state["current"] = _check(_get_device_index(device), "set_device")


def current_device() -> int:
    """Return the current NPU index."""
    return _state["current"]


def synchronize(device=None) -> None:
    """Wait for the device (nothing is queued in the double); validates the id."""
    _check(_get_device_index(device), "synchronize")


def empty_cache() -> None:
    """Release cached blocks: reserved memory drops to what is allocated."""
    for index in list(_reserved):
        _reserved[index] = _allocated.get(index, 0)


def memory_allocated(device=None) -> int:
    """Return bytes held by tensors on ``device``."""
    return _allocated.get(_get_device_index(device), 0)


def memory_reserved(device=None) -> int:
    """Return bytes held by the caching allocator on ``device``."""
    return _reserved.get(_get_device_index(device), 0)


def mem_get_info(device=None) -> tuple:
    """Return ``(free, total)`` bytes of ``device``."""
    index = _check(_get_device_index(device), "mem_get_info")
    return _TOTAL_BYTES - _reserved.get(index, 0), _TOTAL_BYTES


def manual_seed(seed: int) -> None:
    """Seed the current NPU's generator."""
    _state["seed"] = int(seed)


def manual_seed_all(seed: int) -> None:
    """Seed the generators of every NPU."""
    _state["seed"] = int(seed)


def initial_seed() -> int:
    """Return the last seed set."""
    return _state["seed"]


def get_device_name(device=None) -> str:
    """Return the chip name."""
    _check(_get_device_index(device), "get_device_name")
    return "Ascend910B3"


def _double_allocate(nbytes: int, device=None) -> None:
    """Double-only: pretend tensors of ``nbytes`` were allocated on ``device`` (negative frees)."""
    index = _check(_get_device_index(device), "allocate")
    _allocated[index] = max(0, _allocated.get(index, 0) + nbytes)
    _reserved[index] = max(_reserved.get(index, 0), _allocated[index])
