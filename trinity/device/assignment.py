"""Which devices of its node a Ray actor drives, on every backend.

Ray hands out device ids (and sets the visible-devices variable) only for the
accelerator resources it knows, such as ``GPU`` and ``NPU``. For any other
resource key an actor gets the resource but no id, so trinity claims the
indices itself: per node and key, one lock file per device index under
``<tmp>/trinity-devices/<ray node id>/<key>/<index>.lock``, taken with
``fcntl.flock`` and held for the life of the process, lowest free index
first. The operating system drops the lock when its holder dies, so a device
is free again as soon as its process is gone, whichever job it belonged to.
Ray's accounting already guarantees that the actors holding the key on a node
never ask for more devices than the node has, so a free index always exists.

With the indices known, the backend's visible-devices variable is set (before
the device runtime starts) and the first of them is made current.
"""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trinity.device.errors import DeviceError
from trinity.utils.flock import try_lock, write_record

if TYPE_CHECKING:
    from trinity.device.backend import Backend

#: Folder under the temporary directory holding the per-node claims.
CLAIMS_FOLDER = "trinity-devices"
#: How the devices were decided: Ray assigned them, trinity claimed them, or none were needed.
SOURCE_RAY = "ray"
SOURCE_CLAIMED = "claimed"
SOURCE_NONE = "none"


class DeviceAssignmentError(DeviceError):
    """No device could be assigned to this process (none free on its node, or the node offers none)."""


@dataclass(frozen=True)
class DeviceAssignment:
    """The devices one process drives and how they were decided."""

    #: Ray resource key the devices are counted by; None on the CPU backend.
    resource_key: str | None
    #: Device indices on the node, in the order this process sees them; empty when it holds none.
    devices: tuple[int, ...]
    #: ``"ray"`` (Ray assigned the ids), ``"claimed"`` (trinity's per-node claim) or ``"none"``.
    source: str
    #: Index of the first device among those this process sees (what ``set_device`` takes); None without one.
    local_index: int | None
    #: The backend's visible-devices variable; None when the backend has none.
    visible_devices_env: str | None
    #: Its value in this process after the assignment; None when unset.
    visible_devices: str | None
    #: Ray node id of this process; None outside a Ray actor.
    node_id: str | None
    #: IP address of that node; None outside a Ray actor.
    node_ip: str | None
    #: Hex id of the Ray placement group this process runs in; None outside one.
    placement_group_id: str | None = None

    def as_record(self) -> dict[str, Any]:
        """Return the assignment as a JSON-ready dict (``devices`` as a list)."""
        record = asdict(self)
        record["devices"] = list(self.devices)
        return record


_lock = threading.Lock()
_current: DeviceAssignment | None = None
_held: list[int] = []


def assign_devices(backend: Backend, count: int = 1, *, make_current: bool = True) -> DeviceAssignment:
    """Decide the ``count`` devices of ``backend`` this process drives, set its mask and make the first current.

    Inside a Ray actor: the ids Ray assigned for the backend's resource key
    when Ray knows that key (then ``count`` is not used: the actor's resource
    request decided), otherwise ``count`` indices claimed on this node. The
    mask is written to ``os.environ``, so call this before the device runtime
    starts. Outside a Ray actor, or on the CPU backend, nothing is claimed or
    masked (one device is then index 0, as before any assignment existed).
    ``make_current`` calls ``set_device`` with the first device's local index
    (0 under a mask, the node index without one). A second call
    in the same process returns the first answer. Raises
    :class:`DeviceAssignmentError` when no device is free or the node offers
    none of the key.
    """
    global _current
    with _lock:
        if _current is not None:
            return _current
        _current = _assign(backend, count, make_current)
        return _current


def current_assignment() -> DeviceAssignment | None:
    """Return this process's assignment, or None before :func:`assign_devices`."""
    return _current


def release_devices() -> None:
    """Give up this process's claimed devices and forget its assignment (a process's death does the same)."""
    global _current
    with _lock:
        while _held:
            os.close(_held.pop())
        _current = None


def claims_folder(node_id: str, resource_key: str) -> Path:
    """Return the folder of the lock files for ``resource_key`` on Ray node ``node_id``."""
    return Path(tempfile.gettempdir()) / CLAIMS_FOLDER / node_id / resource_key


def _assign(backend: Backend, count: int, make_current: bool) -> DeviceAssignment:
    info = backend.info
    key, var = info.ray_resource_key, info.visible_devices_env
    context = _actor_context()
    if key is None or context is None:
        local = 0 if count > 0 else None
        if make_current and local is not None:
            backend.set_device(local)
        return DeviceAssignment(key, (), SOURCE_NONE, local, var, os.environ.get(var) if var else None,
                                *_node(context))
    assigned = context.get_accelerator_ids()
    if key in assigned:
        devices, source = tuple(int(i) for i in assigned[key]), SOURCE_RAY
    else:
        devices, source = _claim(context.get_node_id(), key, count), SOURCE_CLAIMED
    if var and devices:
        os.environ.update(backend.visible_devices_env(devices))
    local = (0 if var else devices[0]) if devices else None
    if make_current and local is not None:
        backend.set_device(local)
    return DeviceAssignment(key, devices, source, local, var, os.environ.get(var) if var else None,
                            *_node(context))


def _actor_context() -> Any:
    """Return Ray's runtime context when this process is a Ray actor, else None."""
    try:
        import ray
    except ImportError:  # pragma: no cover - ray is a dependency
        return None
    if not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    return context if context.get_actor_id() is not None else None


def _node(context: Any) -> tuple[str | None, str | None, str | None]:
    """Return ``(node id, node address, placement group id)`` of this actor (Nones outside Ray)."""
    if context is None:
        return None, None, None
    import ray

    return (context.get_node_id(), ray.util.get_node_ip_address(),  # type: ignore[no-untyped-call]
            context.get_placement_group_id())


def _node_device_count(node_id: str, key: str) -> int:
    import ray

    for node in ray.nodes():  # type: ignore[no-untyped-call]
        if node.get("NodeID") == node_id:
            return int(node.get("Resources", {}).get(key, 0))
    return 0


def _claim(node_id: str, key: str, count: int) -> tuple[int, ...]:
    """Lock ``count`` free device indices of ``key`` on this node, lowest first; the locks stay held."""
    if count <= 0:
        return ()
    total = _node_device_count(node_id, key)
    if total < count:
        raise DeviceAssignmentError(
            f"this process needs {count} {key} device(s) but its Ray node {node_id} offers {total}; start the node "
            f"with its {key} resource (ray start --resources) or lower the devices this actor asks for"
        )
    folder = claims_folder(node_id, key)
    taken: list[int] = []
    claimed: list[int] = []
    for index in range(total):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = try_lock(folder / f"{index}.lock")
        except OSError as exc:
            for held in taken:
                os.close(held)
            raise DeviceAssignmentError(
                f"cannot claim a {key} device: {exc.strerror} ({folder / f'{index}.lock'}); every process claiming "
                f"devices on this node must be able to write to {folder.parent.parent}"
            ) from None
        if fd is None:
            continue
        write_record(fd, f"{os.getpid()}\n")
        taken.append(fd)
        claimed.append(index)
        if len(claimed) == count:
            _held.extend(taken)
            return tuple(claimed)
    for fd in taken:
        os.close(fd)
    raise DeviceAssignmentError(
        f"no {count} free {key} device(s) on Ray node {node_id}: {total - len(claimed)} of {total} are held by other "
        f"processes (see the pids in {folder}); a process outside Ray's accounting holds a device, or an earlier "
        "job's workers still run"
    )
