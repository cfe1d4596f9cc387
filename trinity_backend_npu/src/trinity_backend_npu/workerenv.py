"""The environment of NPU processes: visible-device masks and what a Ray worker inherits."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from trinity.device.defaults import forwarded_env
from trinity.device.errors import InvalidDeviceRequestError
from trinity_backend_npu import cann
from trinity_backend_npu.info import INFO

#: Variables forwarded by exact name, besides the prefixes in ``INFO.worker_env_prefixes``:
#: torch_npu's task queue and core binding switches, and torch's autoload switch, so a
#: worker imports torch the way the driver does (a driver run with
#: ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` must not see its workers autoload torch_npu).
FORWARDED_NAMES = (
    cann.AUTOLOAD_VAR,
    "TASK_QUEUE_ENABLE",
    "CPU_AFFINITY_CONF",
    "INF_NAN_MODE_ENABLE",
)

#: Variables that match a forwarded prefix but describe the driver's own node or process,
#: so forcing them on a worker (possibly on another node) would be wrong: where CANN and
#: NNAL are installed there, the node's container device list, a per-process device id,
#: the node's own HCCL address, and set_env.sh's "already sourced" markers.
NODE_LOCAL_NAMES = frozenset(
    {
        "ASCEND_HOME_PATH",
        "ASCEND_TOOLKIT_HOME",
        "ASCEND_TOOLKIT_LATEST_HOME",
        "ASCEND_OPP_PATH",
        "ASCEND_AICPU_PATH",
        "ASCEND_CUSTOM_OPP_PATH",
        "ASCEND_TOOLKIT_ENV_SET",
        "ASCEND_NNAL_ENV_SET",
        "ASCEND_VISIBLE_DEVICES",
        "ASCEND_DEVICE_ID",
        "ATB_HOME_PATH",
        "ASDOPS_HOME_PATH",
        "HCCL_IF_IP",
    }
)

# Why LD_LIBRARY_PATH, PYTHONPATH and PATH are not forwarded: a Ray worker is started by
# the raylet of its node and inherits the raylet's environment. CANN is therefore sourced
# where the raylet starts (`source set_env.sh && ray start ...`, or in the driver's shell
# when the driver starts a local Ray), and each node's search paths point at that node's
# own CANN install. A runtime_env carries only what must be the same on every worker; the
# driver's search paths also hold its virtualenv and unrelated entries, and would replace
# a correct node setting with the driver's. The install-location variables are kept out
# for the same reason (NODE_LOCAL_NAMES).


def visible_devices_env(device_ids: Iterable[int]) -> dict[str, str]:
    """Return ``{"ASCEND_RT_VISIBLE_DEVICES": "i,j,..."}`` with the ids ascending and de-duplicated.

    CANN misassigns devices when the list is not ascending, so the order given
    is not kept. Raises :class:`~trinity.device.errors.InvalidDeviceRequestError`
    for a negative id.
    """
    given = [int(device_id) for device_id in device_ids]
    ids = sorted(set(given))
    if ids and ids[0] < 0:
        raise InvalidDeviceRequestError(
            f"NPU ids must be >= 0, got {ids[0]} in {given!r}; pass indices among the node's NPUs"
        )
    return {cann.VISIBLE_DEVICES_VAR: ",".join(str(device_id) for device_id in ids)}


def worker_env(environ: Mapping[str, str], self_managed_devices: bool) -> dict[str, str]:
    """Return the variables of ``environ`` an NPU Ray worker must be started with.

    Forwards the CANN/HCCL/ATB/torch_npu tuning variables (``INFO.worker_env_prefixes``)
    and :data:`FORWARDED_NAMES`, never ``ASCEND_RT_VISIBLE_DEVICES`` (Ray sets it
    per worker) nor :data:`NODE_LOCAL_NAMES`. When the worker picks its devices
    itself (vLLM), ``RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1`` tells
    Ray to leave the mask alone.
    """
    env = {
        key: value
        for key, value in forwarded_env(INFO, environ, self_managed_devices).items()
        if key not in NODE_LOCAL_NAMES
    }
    for name in FORWARDED_NAMES:
        value = environ.get(name)
        if value is not None:
            env[name] = value
    return env
