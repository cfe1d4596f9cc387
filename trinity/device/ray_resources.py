"""Turning the backend's Ray resource key into Ray actor / bundle options.

Ray takes its built-in resources as keyword options (``num_gpus``) and
rejects them inside ``resources``; every other key (``NPU``, a vendor's)
goes into ``resources``. Nothing here imports Ray unless a key is given.
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
