"""Placement groups for engines and trainers, keyed by the device backend's Ray resource."""

from __future__ import annotations

from typing import Any


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
    """Create and wait for a placement group; raises TimeoutError naming what could not be placed."""
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
    group = placement_group(wanted, strategy=strategy(count, devices_per_node, resource_key), name=name)
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        ray.util.remove_placement_group(group)
        raise TimeoutError(
            f"placement group {name or '?'} of {count} x {wanted[0]} could not be placed within {timeout_s:g} s; "
            f"the cluster offers {ray.available_resources()}"  # type: ignore[no-untyped-call]
        )
    return group


def _named_group_exists(name: str) -> bool:
    """Return True when a live placement group called ``name`` exists in this Ray namespace."""
    from ray.util.placement_group import get_placement_group

    try:
        get_placement_group(name)
    except ValueError:  # Ray's answer for "no such group"
        return False
    return True
