"""The one place the framework asks device questions.

The first question selects a backend (:mod:`trinity.device.selection`) and binds the hot-path
functions of this module (and of ``trinity.device``) straight to the chosen
implementations, so ``trinity.device.synchronize()`` costs a plain call.
Nothing here imports torch until a question needs it.
"""

from __future__ import annotations

import datetime
import logging
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from trinity.device import assignment as _assignment
from trinity.device import selection as _selection
from trinity.device.assignment import DeviceAssignment
from trinity.device.backend import Backend
from trinity.device.errors import InvalidDeviceRequestError
from trinity.device.loader import BackendRecord, discover
from trinity.device.types import (
    AttentionChoice,
    CollectiveGroup,
    CompileSupport,
    DoctorCheck,
    DtypeSupport,
    MemoryStats,
    OffloadSupport,
)

logger = logging.getLogger("trinity.device")

_lock = threading.RLock()
_records: dict[str, BackendRecord] | None = None
_current: _selection.Selection | None = None


def list_backends() -> list[BackendRecord]:
    """Return every discovered backend (built-in first, then by name), broken ones included."""
    records = _discovered()
    return sorted(records.values(), key=lambda r: (r.distribution != "trinity-rft", r.name))


def get_backend_record(name: str) -> BackendRecord | None:
    """Return the record of the backend called ``name`` (aliases accepted), or None."""
    wanted = _selection.normalise_choice(name) or name
    return _discovered().get(wanted)


def _discovered() -> dict[str, BackendRecord]:
    global _records
    with _lock:
        if _records is None:
            _records = discover()
        return _records


def select_backend(
    choice: str | None = None, cluster_resources: Mapping[str, float] | None = None
) -> _selection.Selection:
    """Select the backend for this process and bind the façade to it.

    ``choice`` is the config's ``cluster.device`` (``None``/``"auto"`` for
    automatic); ``cluster_resources`` is ``ray.cluster_resources()`` when the
    driver is connected to Ray. Re-selecting replaces the earlier choice.
    Raises a :class:`trinity.device.errors.DeviceError` on a bad choice.
    """
    global _current
    with _lock:
        chosen = _selection.select(_discovered(), choice=choice, cluster_resources=cluster_resources)
        changed = _current is None or _current.backend is not chosen.backend or _current.reason != chosen.reason
        _current = chosen
        _bind(chosen.backend)
    if changed:
        logger.info("device backend: %s (%s)", chosen.name, chosen.reason)
    return chosen


def current_selection() -> _selection.Selection:
    """Return the current selection, selecting automatically on first use."""
    current = _current
    if current is None:
        return select_backend()
    return current


def current_backend() -> Backend:
    """Return the selected backend object (selecting automatically on first use)."""
    return current_selection().backend


def assign_devices(count: int = 1, *, make_current: bool = True) -> DeviceAssignment:
    """Decide the ``count`` devices this process drives on the selected backend (see :mod:`trinity.device.assignment`).

    Inside a Ray actor: the ids Ray assigned when Ray knows the backend's
    resource key, else ``count`` indices claimed on this node; the
    visible-devices mask is written before the device runtime starts and,
    with ``make_current``, the first device is made current. A second call in
    the same process returns the first answer.
    """
    return _assignment.assign_devices(current_backend(), count, make_current=make_current)


def reset() -> None:
    """Forget discovery, selection and this process's device assignment (tests, or after installing a backend)."""
    global _records, _current
    _assignment.release_devices()
    with _lock:
        _records = None
        _current = None
        for name, function in _UNBOUND.items():
            for module in _bound_modules():
                setattr(module, name, function)


# --- questions with an answer fixed by the selection (bound to constants) ----------


def get_device_type() -> str:
    """Return the torch device type of the selected backend (``"cuda"``, ``"npu"``, ``"cpu"``)."""
    return current_backend().info.device_type


def get_device_name() -> str:
    """Return the device name used to build ``torch.device`` and reach ``torch.<name>``.

    The same value as :func:`get_device_type`; kept under this name for the
    established Trinity/verl API.
    """
    return current_backend().info.device_type


def is_cuda() -> bool:
    """Return True when the selected device type is ``cuda``."""
    return current_backend().info.device_type == "cuda"


def is_npu() -> bool:
    """Return True when the selected device type is ``npu`` (Ascend)."""
    return current_backend().info.device_type == "npu"


def is_cpu() -> bool:
    """Return True when the selected device type is ``cpu``."""
    return current_backend().info.device_type == "cpu"


def get_ray_resource_key() -> str | None:
    """Return the Ray resource name of one device (``"GPU"``, ``"NPU"``), None on CPU."""
    return current_backend().info.ray_resource_key


def get_collective_backend() -> str:
    """Return the torch.distributed backend for device tensors (``"nccl"``, ``"hccl"``, ``"gloo"``)."""
    return current_backend().info.collective_backend


def ray_actor_resources(amount: float = 1) -> dict[str, Any]:
    """Return the Ray actor options asking ``amount`` devices of the selected backend (``{}`` on CPU)."""
    from trinity.device.ray_resources import ray_resource_options

    return ray_resource_options(current_backend().info.ray_resource_key, amount)


def local_ray_resources(choice: str | None = None) -> dict[str, float]:
    """Return the custom resources a Ray node started on this machine must declare for its devices.

    The backend is selected from this machine alone (``choice`` as in
    :func:`select_backend`); ``{key: device count}`` when its resource key is
    one Ray does not detect by itself (a vendor's), else ``{}``.
    """
    from trinity.device.ray_resources import local_node_resources

    backend = select_backend(choice).backend
    return local_node_resources(backend.info.ray_resource_key, backend.probe().device_count)


def get_process_group_backend() -> str:
    """Return the backend string for ``init_process_group`` covering CPU and device tensors.

    ``"cpu:gloo,cuda:nccl"`` on CUDA, ``"cpu:gloo,npu:hccl"`` on Ascend, ``"cpu:gloo"`` on CPU.
    """
    return process_group_backend_for(current_backend())


def process_group_backend_for(backend: Backend) -> str:
    """Return the ``init_process_group`` backend string for ``backend``."""
    info = backend.info
    if info.device_type == "cpu":
        return f"cpu:{info.collective_backend}"
    return f"cpu:gloo,{info.device_type}:{info.collective_backend}"


# --- behaviour (bound to the backend's implementation) ------------------------------


def set_device(local_rank: int) -> None:
    """Make device ``local_rank`` (among the visible ones) current for this process."""
    return current_backend().set_device(local_rank)


def synchronize() -> None:
    """Block until all work queued on the current device has finished."""
    return current_backend().synchronize()


def get_device_id() -> int:
    """Return the index of the current device among the visible ones."""
    return current_backend().current_device_index()


def empty_cache() -> None:
    """Return cached, unused device memory to the driver."""
    return current_backend().empty_cache()


def manual_seed(seed: int) -> None:
    """Seed torch and every generator of the selected device."""
    return current_backend().manual_seed(seed)


def memory_stats() -> MemoryStats:
    """Return memory figures of the current device."""
    return current_backend().memory_stats()


def get_torch_device() -> ModuleType:
    """Return the torch device module (``torch.cuda``, ``torch.npu``, ``torch.cpu``)."""
    return current_backend().device_module()


def torch_device(local_rank: int | None = None) -> Any:
    """Return a ``torch.device`` for the selected type; the current device when ``local_rank`` is None."""
    import torch

    device_type = get_device_type()
    if device_type == "cpu":
        return torch.device("cpu")
    current_backend().device_module()  # a vendor extension may register the device type on import
    if local_rank is not None and local_rank < 0:
        raise InvalidDeviceRequestError(f"local_rank must be >= 0, got {local_rank}")
    index = get_device_id() if local_rank is None else local_rank
    return torch.device(device_type, index)


def torch_compile_support() -> CompileSupport:
    """Return whether ``torch.compile`` works on the selected device, and why not when not."""
    return current_backend().compile_support()


def supports_torch_compile() -> bool:
    """Return True when ``torch.compile`` works on the selected device."""
    return torch_compile_support().supported


def supported_dtypes() -> DtypeSupport:
    """Return the dtypes models compute in on the selected device, the preferred one first."""
    return current_backend().supported_dtypes()


def resolve_dtype(requested: str) -> str:
    """Return the dtype to load models in for the config value ``requested`` (``auto``: the device's preferred).

    Raises :class:`~trinity.device.errors.UnsupportedDtypeError` with the
    backend's reason when the selected device cannot compute in it.
    """
    return current_backend().resolve_dtype(requested)


def attention_implementation(dtype: str) -> AttentionChoice:
    """Return the attention kernel (transformers' ``attn_implementation``) for models in ``dtype`` here."""
    return current_backend().attention_implementation(dtype)


def offload_support() -> OffloadSupport:
    """Return whether the trainer may offload parameters and optimizer state to host memory here."""
    return current_backend().offload_support()


def visible_devices_env(device_ids: Sequence[int]) -> dict[str, str]:
    """Return the environment restricting a process to ``device_ids`` on the selected backend."""
    return current_backend().visible_devices_env(device_ids)


def ray_assigned_devices_env() -> dict[str, str]:
    """Return the visible-devices environment for the devices Ray assigned to this actor or task.

    A worker started with ``worker_env(self_managed_devices=True)`` gets no
    mask from Ray; before it initialises its device runtime it writes this one
    itself (the backend decides the variable and the order: ascending on NPU).
    ``{}`` on the CPU backend, outside Ray, or when Ray assigned no device.
    """
    key = get_ray_resource_key()
    if key is None:
        return {}
    import ray

    if not ray.is_initialized():
        return {}
    assigned = ray.get_runtime_context().get_accelerator_ids().get(key) or []
    if not assigned:
        return {}
    return visible_devices_env([int(i) for i in assigned])


def worker_env(self_managed_devices: bool = False) -> dict[str, str]:
    """Return the environment every Ray worker must get: the decision and the backend's needs."""
    return _selection.worker_environment(current_selection(), self_managed_devices)


def stateless_process_group(
    collective: str, store: Any, *, rank: int, world_size: int, timeout: datetime.timedelta, group_name: str
) -> CollectiveGroup:
    """Return a ``collective`` group over ``store`` built by the selected backend, with no default process group.

    Every member calls this concurrently (it is a rendezvous). Raises
    :class:`~trinity.device.errors.CollectiveGroupError` when the backend has
    no route for ``collective``.
    """
    return current_backend().stateless_process_group(
        collective, store, rank=rank, world_size=world_size, timeout=timeout, group_name=group_name
    )


def doctor(name: str | None = None) -> list[DoctorCheck]:
    """Run the doctor checks of backend ``name`` (the selected one when None)."""
    if name is None:
        return current_backend().doctor()
    record = get_backend_record(name)
    if record is None or record.backend is None:
        raise InvalidDeviceRequestError(f"no loadable backend named {name!r}")
    return record.backend.doctor()


# --- hot-path binding -----------------------------------------------------------------

#: Functions replaced by direct references once a backend is selected.
_HOT_PATH = (
    "get_device_type", "get_device_name", "is_cuda", "is_npu", "is_cpu", "get_ray_resource_key",
    "get_collective_backend", "get_process_group_backend", "set_device", "synchronize",
    "get_device_id", "empty_cache", "manual_seed",
)
_UNBOUND: dict[str, Callable[..., Any]] = {name: globals()[name] for name in _HOT_PATH}


def _constant(name: str, value: Any) -> Callable[[], Any]:
    def answer() -> Any:
        return value

    answer.__name__ = name
    answer.__doc__ = _UNBOUND[name].__doc__
    return answer


def _bound_functions(backend: Backend) -> dict[str, Callable[..., Any]]:
    info = backend.info
    return {
        "get_device_type": _constant("get_device_type", info.device_type),
        "get_device_name": _constant("get_device_name", info.device_type),
        "is_cuda": _constant("is_cuda", info.device_type == "cuda"),
        "is_npu": _constant("is_npu", info.device_type == "npu"),
        "is_cpu": _constant("is_cpu", info.device_type == "cpu"),
        "get_ray_resource_key": _constant("get_ray_resource_key", info.ray_resource_key),
        "get_collective_backend": _constant("get_collective_backend", info.collective_backend),
        "get_process_group_backend": _constant("get_process_group_backend", process_group_backend_for(backend)),
        "set_device": backend.set_device,
        "synchronize": backend.synchronize,
        "get_device_id": backend.current_device_index,
        "empty_cache": backend.empty_cache,
        "manual_seed": backend.manual_seed,
    }


def _bound_modules() -> list[ModuleType]:
    return [m for m in (sys.modules.get(__name__), sys.modules.get("trinity.device")) if m is not None]


def _bind(backend: Backend) -> None:
    for name, function in _bound_functions(backend).items():
        for module in _bound_modules():
            setattr(module, name, function)
