"""The NPU backend's stateless process groups: HCCL through torch_npu's ``ProcessGroupHCCL``.

torch has no HCCL of its own; torch_npu exposes the c10d backend class as
``torch_npu._C._distributed_c10d.ProcessGroupHCCL``, built like torch's NCCL
class: ``ProcessGroupHCCL(store, rank, size, options)`` with a
``ProcessGroupHCCL.Options`` that carries the timeout (``_timeout``), the
stream priority and the group's id. That is the class torch_npu's own
``hccl`` factory for ``init_process_group``/``new_group`` builds, here without
a default process group. The communicator is created on the first
collective, on the device of its tensor. Other collectives take the core's
public route (gloo).
"""

from __future__ import annotations

import datetime
from typing import Any

from trinity.device.collectives import default_stateless_group
from trinity.device.errors import CollectiveGroupError
from trinity.device.types import CollectiveGroup
from trinity_backend_npu import runtime
from trinity_backend_npu.info import INFO


def hccl_group_class() -> Any:
    """Return torch_npu's ``ProcessGroupHCCL`` class (importing torch_npu).

    Raises :class:`~trinity.device.errors.BackendUnavailableError` when
    torch_npu cannot be imported and :class:`CollectiveGroupError` when this
    torch_npu has no such class.
    """
    torch_npu = runtime.import_torch_npu()
    c10d = getattr(getattr(torch_npu, "_C", None), "_distributed_c10d", None)
    group_class = getattr(c10d, "ProcessGroupHCCL", None)
    if group_class is None:
        version = getattr(torch_npu, "__version__", "unknown")
        raise CollectiveGroupError(
            f"torch_npu {version} has no torch_npu._C._distributed_c10d.ProcessGroupHCCL, so no 'hccl' "
            "weight-sync group can be built; install a torch-npu release that matches the installed torch "
            "(`trinity backends check npu`)"
        )
    return group_class


def stateless_process_group(  # noqa: PLR0917 - the hook's arguments, in the hook's order
    collective: str, store: Any, rank: int, world_size: int, timeout: datetime.timedelta, group_name: str
) -> CollectiveGroup:
    """Return a ``collective`` group over ``store``: an HCCL ``ProcessGroupHCCL`` for ``hccl``, else the core's.

    Raises :class:`CollectiveGroupError` when torch_npu lacks the class or
    ``collective`` has no route.
    """
    if collective != INFO.collective_backend:
        return default_stateless_group(
            collective, store, rank, world_size, timeout,
            group_name=group_name, device_type=INFO.device_type, backend_name=INFO.name,
        )
    group_class = hccl_group_class()
    options = group_class.Options()
    options.is_high_priority_stream = False
    # torch_npu's own hccl factory sets the timeout through this attribute; it has no other setter.
    options._timeout = timeout
    options.group_id = group_name
    return CollectiveGroup(group_class(store, rank, world_size, options), INFO.device_type, INFO.collective_backend)
