"""Turning the backend's Ray resource key into Ray actor / bundle options, and into a local node's resources.

Ray takes its built-in resources as keyword options (``num_gpus``) and
rejects them inside ``resources``; every other key (``NPU``, a vendor's)
goes into ``resources``. Ray detects the devices of the accelerators it knows
when a node starts; a vendor's own key must be declared. Nothing here imports
Ray unless a key is given.
"""

from __future__ import annotations

from typing import Any


def ray_resource_options(key: str | None, amount: float) -> dict[str, Any]:
    """Return Ray actor options asking ``amount`` of resource ``key``; ``{}`` for no key (CPU backend)."""
    if not key or amount <= 0:
        return {}
    keywords: set[str]
    try:
        from ray._common.ray_option_utils import actor_options

        keywords = set(actor_options)
    except ImportError:  # Ray moved its option table: Ray's own error then names the keyword to use
        keywords = {"num_cpus", "num_gpus"}
    keyword = f"num_{key.lower()}s"
    if keyword in keywords:
        return {keyword: amount}
    return {"resources": {key: amount}}


def ray_detects(key: str) -> bool:
    """Return True when a Ray node finds devices of resource ``key`` by itself (``GPU``, ``NPU``, ...)."""
    try:
        from ray._private.accelerators import get_all_accelerator_resource_names
    except ImportError:  # Ray moved its accelerator table: count the key as undetected, declaring it is harmless
        return "resources" not in ray_resource_options(key, 1)
    return key in get_all_accelerator_resource_names() or "resources" not in ray_resource_options(key, 1)


def local_node_resources(key: str | None, device_count: int) -> dict[str, float]:
    """Return the custom resources a Ray node started here must declare to offer ``device_count`` devices of ``key``.

    ``{}`` for no key, no device, or a key Ray detects by itself.
    """
    if not key or device_count <= 0 or ray_detects(key):
        return {}
    return {key: float(device_count)}
