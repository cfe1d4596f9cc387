"""The CUDA backend's stateless process groups: NCCL on the current GPU, connected as it is built.

torch creates an NCCL communicator lazily, on the first collective; a member
that never arrives would then surface in the middle of the first weight sync.
Here the communicator is connected when the group is built
(``eager_connect_single_device`` on the current GPU, what
``init_process_group(device_id=...)`` does for a default group), so the
constructor is the rendezvous and a missing member fails the group's set-up
within its timeout. Other collectives take the core's public route (gloo).
"""

from __future__ import annotations

import datetime
from typing import Any

from trinity.device.collectives import default_stateless_group, nccl_group
from trinity.device.types import CollectiveGroup
from trinity_backend_cuda.info import INFO


def stateless_process_group(  # noqa: PLR0917 - the hook's arguments, in the hook's order
    collective: str, store: Any, rank: int, world_size: int, timeout: datetime.timedelta, group_name: str
) -> CollectiveGroup:
    """Return a ``collective`` group over ``store``; an NCCL one is connected on the current GPU before returning.

    Raises :class:`~trinity.device.errors.CollectiveGroupError` when torch
    has no NCCL (a CPU build) or ``collective`` has no route, and NCCL's own
    error when the members do not all connect within ``timeout``.
    """
    if collective != INFO.collective_backend:
        return default_stateless_group(
            collective, store, rank, world_size, timeout,
            group_name=group_name, device_type=INFO.device_type, backend_name=INFO.name,
        )
    import torch

    group = nccl_group(store, rank, world_size, timeout, group_name=group_name, device_type=INFO.device_type)
    group.process_group.eager_connect_single_device(torch.device(INFO.device_type, torch.cuda.current_device()))
    return group
