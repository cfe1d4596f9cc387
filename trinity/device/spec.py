"""The DeviceBackend contract: every hook a device backend can implement.

A backend is a module (or an object) whose functions are marked with
``@trinity.device.hookimpl`` and named after the hooks below. It is published
under the ``trinity.backends`` entry-point group; the entry point's name is the
backend's name. Read this file top to bottom and you know the whole contract.

Rules that hold for every hook:

* ``trinity_backend_info`` and ``trinity_probe`` are required. Every other hook
  has a built-in default (``trinity.device.defaults``) written against torch's
  device-agnostic API; implement one only where your device differs.
* An implementation may accept a subset of the arguments declared here, by
  name. New arguments can therefore be added to a hook without breaking
  backends written for an older spec.
* Exactly one implementation answers each call: the backend's if it has one,
  else the default. Returning ``None`` from a value hook is an error, not a
  request to fall through.
* Nothing may initialise the device runtime or import the vendor's torch
  extension at plugin import time, in ``trinity_backend_info`` or in
  ``trinity_probe``: a CUDA/CANN context created in the driver process breaks
  every worker forked from it. Import the heavy module inside the hooks that
  need the device (``set_device``, ``synchronize``, ``device_module``, ...).
* Hooks are validated when the backend is loaded (argument names, unknown
  hook names, spec version), not when first called.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import pluggy

from trinity.device.types import (
    AttentionChoice,
    BackendInfo,
    CollectiveGroup,
    CompileSupport,
    DoctorCheck,
    DtypeSupport,
    MemoryStats,
    OffloadSupport,
    ProbeResult,
)

#: The pluggy project name; markers and entry points use it.
PROJECT_NAME = "trinity"
#: Entry-point group under which backend distributions register.
ENTRY_POINT_GROUP = "trinity.backends"
#: Version of this contract. Bumped when a hook is added or its meaning changes.
SPEC_VERSION = 3
#: Oldest contract version a backend may target and still be loaded.
MIN_SPEC_VERSION = 1
#: The first trinity-rft release speaking each spec version: a backend written for spec N depends on
#: ``trinity-rft>=0.N`` so that pip, not the loader, refuses an older core. The core's minor version moves with
#: the spec while the major version is 0.
FIRST_CORE_BY_SPEC = {1: "0.1", 2: "0.2", 3: "0.3"}
#: The spec version that added each hook after the first; a backend written for an older spec gets the core's
#: default for these unless it implements them.
HOOKS_ADDED_IN = {
    "trinity_stateless_process_group": 2,
    "trinity_supported_dtypes": 2,
    "trinity_attention_implementation": 2,
    "trinity_offload_support": 3,
}


def core_requirement(spec_version: int) -> str:
    """Return the requirement on trinity-rft a backend written for ``spec_version`` declares."""
    first = FIRST_CORE_BY_SPEC[spec_version]
    major, minor = (int(part) for part in first.split("."))
    return f"trinity-rft>={first},<{major}.{minor + 1}"
#: Hooks a backend must implement itself (no default exists).
REQUIRED_HOOKS = ("trinity_backend_info", "trinity_probe")

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec(firstresult=True)
def trinity_backend_info() -> BackendInfo:  # type: ignore[empty-body]
    """Return the backend's static facts (required).

    Called once when the backend is loaded, also on machines without the
    device, so it must be pure data: no device access, no vendor import.
    ``BackendInfo.name`` must equal the entry point's name and
    ``BackendInfo.spec_version`` the ``SPEC_VERSION`` the backend was written for.
    """


@hookspec(firstresult=True)
def trinity_probe() -> ProbeResult:  # type: ignore[empty-body]
    """Say whether the device is usable by this process, without initialising it (required).

    Use driver libraries that create no context (NVML), device files
    (``/dev/davinci*``), environment variables and ``importlib.util.find_spec``.
    Honour the visible-devices variable in ``device_count``. When unavailable,
    ``reason`` tells the user what to install or set. Called at most once per
    process; the core bounds it in time and turns an exception into an
    unavailable result, but a well-behaved probe returns within milliseconds.
    """


@hookspec(firstresult=True)
def trinity_torch_compile_support() -> CompileSupport:  # type: ignore[empty-body]
    """Return whether ``torch.compile`` works on this device, and why not when not.

    Default: supported. The trainer's ``use_torch_compile`` defaults to this
    answer, and an explicit ``true`` is refused with ``reason`` when unsupported.
    """


@hookspec(firstresult=True)
def trinity_device_module() -> ModuleType:  # type: ignore[empty-body]
    """Return the torch device module (``torch.cuda``, ``torch.npu``, ``torch.cpu``).

    Default: ``torch.get_device_module(info.device_type)``. Implement it when
    the module appears only after importing a vendor extension (torch_npu);
    this is the place to do that import.
    """


@hookspec(firstresult=True)
def trinity_set_device(local_rank: int) -> None:
    """Make device ``local_rank`` (an index among the visible devices) current.

    Default: ``device_module.set_device(local_rank)``. Hot path: resolved once.
    """


@hookspec(firstresult=True)
def trinity_current_device_index() -> int:  # type: ignore[empty-body]
    """Return the index of the current device among the visible ones.

    Default: ``device_module.current_device()``.
    """


@hookspec(firstresult=True)
def trinity_synchronize() -> None:
    """Block until all work queued on the current device has finished.

    Default: ``device_module.synchronize()``. Hot path: resolved once after
    selection and then called directly, so keep it a thin call.
    """


@hookspec(firstresult=True)
def trinity_empty_cache() -> None:
    """Return cached, unused device memory to the driver. Default: ``device_module.empty_cache()``."""


@hookspec(firstresult=True)
def trinity_memory_stats() -> MemoryStats:  # type: ignore[empty-body]
    """Return memory figures of the current device.

    Default: ``memory_allocated``/``memory_reserved``/``mem_get_info`` of the
    device module, 0 for what it lacks.
    """


@hookspec(firstresult=True)
def trinity_manual_seed(seed: int) -> None:
    """Seed every random generator that affects this device.

    Default: ``torch.manual_seed(seed)`` plus ``device_module.manual_seed_all``.
    """


@hookspec(firstresult=True)
def trinity_visible_devices_env(device_ids: Sequence[int]) -> dict[str, str]:  # type: ignore[empty-body]
    """Return the environment that restricts a process to ``device_ids``.

    Default: ``{info.visible_devices_env: "i,j,..."}`` in the given order, or
    ``{}`` when the backend has no such variable. Override to impose an order
    (CANN needs ascending ids).
    """


@hookspec(firstresult=True)
def trinity_worker_env(self_managed_devices: bool) -> dict[str, str]:  # type: ignore[empty-body]
    """Return the environment a Ray worker of this backend must be started with.

    ``self_managed_devices`` is True for workers that pick their devices
    themselves (vLLM engines): Ray must then not set the visible-devices
    variable (``RAY_EXPERIMENTAL_NOSET_<VAR>=1``). Default: the driver's
    variables matching ``info.worker_env_prefixes`` (the visible-devices
    variable excluded: Ray owns it) plus that flag when asked.
    """


@hookspec(firstresult=True)
def trinity_supported_dtypes() -> DtypeSupport:  # type: ignore[empty-body]
    """Return the floating-point dtypes models compute in on this device, preferred first.

    Called on the driver when a run is planned (``dtype: auto`` becomes
    ``preferred``; a dtype outside ``supported`` is refused with its entry in
    ``unsupported``) and again in each worker that loads a model. Like the
    probe, it must not initialise the device: answer from static facts or
    context-free driver queries, and say in ``note`` when the device could
    not be asked. Default: ``float32`` (preferred), ``bfloat16``, ``float16``:
    what torch's own kernels compute in on the host CPU.
    """


@hookspec(firstresult=True)
def trinity_attention_implementation(dtype: str) -> AttentionChoice:  # type: ignore[empty-body]
    """Return the attention kernel transformers models are loaded with in ``dtype``.

    ``dtype`` is a torch dtype name from ``trinity_supported_dtypes``. The
    answer's ``implementation`` is passed as ``attn_implementation`` to
    ``from_pretrained`` by the trainer and the ``hf`` engine. Called on the
    driver for the plan and in workers before loading, so the same rule as
    for ``trinity_supported_dtypes`` applies. Default: ``sdpa`` (torch's
    ``scaled_dot_product_attention``, which every torch device type has).
    """


@hookspec(firstresult=True)
def trinity_offload_support() -> OffloadSupport:  # type: ignore[empty-body]
    """Return whether the trainer may offload parameters and optimizer state to host memory.

    Asked when a run is planned with veRL's ``param_offload`` /
    ``optimizer_offload`` / ``offload_policy``: a run asking for offload on a
    backend that answers ``supported=False`` stops with ``reason``. With
    support, parameters are offloaded by FSDP2's ``CPUOffloadPolicy``
    (``pin_memory`` as answered) and optimizer state is moved to the host
    between steps. Same rule as for ``trinity_supported_dtypes``: do not
    initialise the device. Default: supported, pinned on every device but the
    host CPU.
    """


@hookspec
def trinity_doctor() -> list[DoctorCheck]:  # type: ignore[empty-body]
    """Return diagnostic checks for ``trinity backends check``.

    Unlike the other hooks, results are collected from the backend *and* the
    default (which checks the torch install), so a backend adds only its own
    checks: driver, runtime libraries, versions. A check must not raise; report
    a ``fail`` with a fix instead.
    """


@hookspec(firstresult=True)
def trinity_stateless_process_group(  # type: ignore[empty-body]  # noqa: PLR0917 - pluggy passes arguments by name
    collective: str, store: Any, rank: int, world_size: int, timeout: datetime.timedelta, group_name: str
) -> CollectiveGroup:
    """Build a process group of ``world_size`` members over ``store``, without a default process group.

    Used for the weight-sync group between trainer rank 0 and the rollout
    engines, which are in no common ``init_process_group`` world. Called once
    per member, concurrently; the call may block until every member has
    joined (a rendezvous) and must raise when that takes longer than
    ``timeout``.

    * ``collective``: the c10d backend asked for, normally
      ``info.collective_backend``; ``"gloo"`` for CPU tensors.
    * ``store``: a c10d ``Store`` whose keys belong to this group alone.
    * ``rank`` / ``world_size``: this member's rank and the group's size.
    * ``timeout``: how long collectives (and the rendezvous) may wait.
    * ``group_name``: a name unique to this group, for the collective's own
      bookkeeping (communicator names, logs).

    Return a :class:`~trinity.device.types.CollectiveGroup` whose
    ``process_group.broadcast(tensor, root)`` works without registration in
    torch's default world. Default: ``gloo`` through ``ProcessGroupGloo``,
    ``nccl`` through ``ProcessGroupNCCL`` (public torch classes), any other
    name raises :class:`~trinity.device.errors.CollectiveGroupError` saying
    this hook is needed. Implement it for your own collective and hand every
    other name to ``trinity.device.collectives.default_stateless_group``.
    """


#: Hooks whose answer is a single implementation, in declaration order.
SINGLE_ANSWER_HOOKS = (
    "trinity_backend_info",
    "trinity_probe",
    "trinity_torch_compile_support",
    "trinity_device_module",
    "trinity_set_device",
    "trinity_current_device_index",
    "trinity_synchronize",
    "trinity_empty_cache",
    "trinity_memory_stats",
    "trinity_manual_seed",
    "trinity_visible_devices_env",
    "trinity_worker_env",
    "trinity_stateless_process_group",
    "trinity_supported_dtypes",
    "trinity_attention_implementation",
    "trinity_offload_support",
)
