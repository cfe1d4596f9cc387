"""Placement groups for engines and trainers, keyed by the device backend's Ray resource."""

from __future__ import annotations

import time
from typing import Any

from trinity.errors import EXIT_USAGE, TrinityError

#: Seconds between two looks at a pending group's scheduling state.
_POLL_S = 0.5


class PlacementError(TrinityError, TimeoutError):
    """A placement group cannot be reserved: no node could ever hold it, or the cluster stayed too busy."""


def bundles(
    count: int, resource_key: str | None, cpus_per_bundle: float, devices: int = 1
) -> list[dict[str, float]]:
    """Return ``count`` bundles of ``devices`` devices plus CPUs (CPU bundles only on the CPU backend)."""
    if count < 1:
        raise ValueError(f"a placement group needs at least one bundle, got {count}")
    bundle: dict[str, float] = {"CPU": float(cpus_per_bundle)}
    if resource_key is not None:
        bundle = {resource_key: float(devices), **bundle}
    return [dict(bundle) for _ in range(count)]


def strategy(count: int, devices_per_node: int, resource_key: str | None) -> str:
    """STRICT_PACK (one node: NVLink/HCCS, and one device mask) when the bundles fit a node, else PACK."""
    if resource_key is None or count <= devices_per_node:
        return "STRICT_PACK"
    return "PACK"


def create_placement_group(
    count: int, resource_key: str | None, cpus_per_bundle: float, devices_per_node: int, *, name: str = "",
    devices: int = 1, timeout_s: float = 120.0,
) -> Any:
    """Create a placement group and wait until Ray has placed it; return it.

    Raises :class:`PlacementError` at once when no node of the cluster could
    ever hold the group (Ray reports it infeasible), or after ``timeout_s``
    seconds when the cluster has room but other jobs hold it. The group is
    removed whenever the call does not return it (an error, Ctrl-C).
    """
    import ray
    from ray.util.placement_group import placement_group

    wanted = bundles(count, resource_key, cpus_per_bundle, devices)
    if name and _named_group_exists(name):
        from trinity.common.config.loader import ConfigError

        project_and_name = name.rsplit("/", 1)[0]
        raise ConfigError(
            f"placement group {name!r} already exists on this Ray cluster: another run with the same "
            f"project/name ({project_and_name}) is running there; give this run another `name`"
        )
    packing = strategy(count, devices_per_node, resource_key)
    group = placement_group(wanted, strategy=packing, name=name)
    try:
        _wait_placed(group, f"{name or '?'} of {count} x {wanted[0]} ({packing})", timeout_s)
    except BaseException:  # an error or Ctrl-C while waiting: the group must not outlive the call
        ray.util.remove_placement_group(group)
        raise
    return group


def _wait_placed(group: Any, what: str, timeout_s: float) -> None:
    """Wait until ``group`` is placed; raise PlacementError when it is infeasible (at once) or after ``timeout_s``."""
    import ray
    from ray.util.placement_group import placement_group_table

    deadline = time.monotonic() + timeout_s
    reserved = group.ready()
    while True:
        left = deadline - time.monotonic()
        ready, _ = ray.wait([reserved], timeout=max(0.0, min(_POLL_S, left)))
        if ready:
            return
        if placement_group_table(group).get("stats", {}).get("scheduling_state") == "INFEASIBLE":
            raise PlacementError(
                f"placement group {what} cannot be placed: no node of the Ray cluster could ever hold it (its "
                f"nodes have {_node_totals(group.bundle_specs[0])}); lower cluster.cpus_per_bundle or the devices "
                "per engine, or add larger nodes",
                exit_code=EXIT_USAGE,
            )
        if left <= 0:
            raise PlacementError(
                f"placement group {what} could not be placed within {timeout_s:g} s; the cluster has "
                f"{ray.available_resources()} free: other jobs hold the rest (see `ray status`)"  # type: ignore[no-untyped-call]
            )


def _node_totals(bundle: dict[str, float]) -> list[dict[str, float]]:
    """Return, for each alive node, its total of each resource ``bundle`` asks for."""
    import ray

    return [{key: float(node.get("Resources", {}).get(key, 0)) for key in bundle}
            for node in ray.nodes() if node.get("Alive")]  # type: ignore[no-untyped-call]


def _named_group_exists(name: str) -> bool:
    """Return True when a live placement group called ``name`` exists in this Ray namespace."""
    from ray.util.placement_group import get_placement_group

    try:
        get_placement_group(name)
    except ValueError:  # Ray's answer for "no such group"
        return False
    return True
