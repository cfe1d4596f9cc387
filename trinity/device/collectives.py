"""Process groups that need no default process group, built from torch's public classes.

These are the built-in answers of ``trinity_stateless_process_group``. A
backend that implements the hook for its own collective hands every other
collective name to :func:`default_stateless_group`, so a ``gloo`` group is
always available. torch is imported on first use, never at load time.

* ``gloo``: ``torch.distributed.ProcessGroupGloo(store, rank, size, timeout)``;
  tensors live on the CPU.
* ``nccl``: ``torch.distributed.ProcessGroupNCCL(store, rank, size, options)``
  with a ``ProcessGroupNCCL.Options`` carrying the timeout and the group's
  name; tensors live on the backend's device. The communicator is created on
  the first collective, on the device of its tensor.
* anything else: :class:`~trinity.device.errors.CollectiveGroupError` naming
  the hook a backend must implement.
"""

from __future__ import annotations

import datetime
from typing import Any

from trinity.device.errors import CollectiveGroupError
from trinity.device.types import CollectiveGroup

#: The hook a backend implements when its collective has no public route here.
HOOK_NAME = "trinity_stateless_process_group"
#: Collectives :func:`default_stateless_group` can build.
PUBLIC_ROUTES = ("gloo", "nccl")
#: Upstream Trinity-RFT's spelling of online weight sync (its default ``synchronizer.sync_method``): a config
#: word, not a device choice; the collective is always the selected backend's.
UPSTREAM_ONLINE_SYNC_METHOD = PUBLIC_ROUTES[1]


def gloo_group(store: Any, rank: int, world_size: int, timeout: datetime.timedelta) -> CollectiveGroup:
    """Return a gloo group of ``world_size`` members over ``store`` (CPU tensors).

    The constructor is a rendezvous: it returns once every member has joined,
    and raises (torch's ``DistStoreError`` or ``RuntimeError``) when they do
    not within ``timeout``.
    """
    from torch.distributed import ProcessGroupGloo

    return CollectiveGroup(ProcessGroupGloo(store, rank, world_size, timeout), "cpu", "gloo")


def nccl_group(
    store: Any, rank: int, world_size: int, timeout: datetime.timedelta, *, group_name: str, device_type: str
) -> CollectiveGroup:
    """Return an NCCL group of ``world_size`` members over ``store``, its tensors on ``device_type``.

    Raises :class:`CollectiveGroupError` when this torch build has no NCCL
    (a CPU or ROCm-less build), naming the hook that would provide another route.
    """
    import torch
    import torch.distributed as dist

    process_group_nccl = getattr(dist, "ProcessGroupNCCL", None)
    if process_group_nccl is None or not dist.is_nccl_available():
        raise CollectiveGroupError(
            f"this torch build ({torch.__version__}) has no NCCL, so no 'nccl' process group can be built; "
            f"install a CUDA build of torch, or implement the {HOOK_NAME} hook in the device backend"
        )
    options = process_group_nccl.Options()
    options.is_high_priority_stream = False
    # torch itself sets the timeout of a group's options through this attribute; it has no other setter.
    options._timeout = timeout
    options.group_name = group_name
    return CollectiveGroup(process_group_nccl(store, rank, world_size, options), device_type, "nccl")


def default_stateless_group(
    collective: str,
    store: Any,
    rank: int,
    world_size: int,
    timeout: datetime.timedelta,
    *,
    group_name: str,
    device_type: str,
    backend_name: str = "",
) -> CollectiveGroup:
    """Return a group for ``collective`` through torch's public classes (see the module docstring).

    ``device_type`` is where non-gloo tensors live (the backend's device type);
    ``backend_name`` only improves the error. Raises
    :class:`CollectiveGroupError` when ``collective`` has no public route.
    """
    if collective == "gloo":
        return gloo_group(store, rank, world_size, timeout)
    if collective == "nccl":
        return nccl_group(store, rank, world_size, timeout, group_name=group_name, device_type=device_type)
    owner = f"backend {backend_name!r}" if backend_name else "the device backend"
    raise CollectiveGroupError(
        f"no public torch route builds a stateless {collective!r} process group (built in: "
        f"{', '.join(PUBLIC_ROUTES)}); {owner} must implement the {HOOK_NAME} hook for {collective!r}"
    )


__all__ = ["HOOK_NAME", "PUBLIC_ROUTES", "default_stateless_group", "gloo_group", "nccl_group"]
