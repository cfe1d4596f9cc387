"""What a worker on a simulated cluster sees, asked the same way on the GPU and the NPU clusters."""

from __future__ import annotations

import os
import sys
from typing import Any

import ray
from ray import cloudpickle

from trinity import device
from trinity.device.selection import Selection

# Ray's workers may not import test helpers by name: ship these functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: Modules a worker must not import just to answer device questions.
DEVICE_RUNTIMES = ("torch", "torch_npu", "pynvml", "acl")


def select_from_cluster() -> Selection:
    """Select the backend from the connected cluster's resources, as a CPU-only driver does."""
    return device.select_backend(cluster_resources=ray.cluster_resources())


def probe_answers(visible_var: str, resource: str, extra_env: tuple[str, ...] = ()) -> dict[str, Any]:
    """Return what a worker sees: its node, mask, Ray's assignment of ``resource`` and the façade's answers."""
    import trinity.device as worker_device

    context = ray.get_runtime_context()
    return {
        "node": context.get_node_id(),
        "visible": os.environ.get(visible_var),
        "noset": os.environ.get(f"RAY_EXPERIMENTAL_NOSET_{visible_var}"),
        "ids": list(context.get_accelerator_ids().get(resource, [])),
        "env": {name: os.environ.get(name) for name in extra_env},
        "trinity_device": (os.environ.get("TRINITY_DEVICE"), os.environ.get("TRINITY_DEVICE_RESOLVED")),
        "assigned_env": worker_device.ray_assigned_devices_env(),
        "device_type": worker_device.get_device_type(),
        "collective": worker_device.get_collective_backend(),
        "pg": worker_device.get_process_group_backend(),
        "source": worker_device.current_selection().source,
        "imported": [m for m in DEVICE_RUNTIMES if m in sys.modules],
    }
