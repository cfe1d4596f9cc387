"""Keeping a model's parameters or optimizer state in host memory between uses (veRL's offload keys).

Parameters go through FSDP2's ``CPUOffloadPolicy``: the sharded parameters,
their gradients and so the optimizer state live on the host, and FSDP2 copies
each layer's shard to the device for its forward and backward. Optimizer
state alone is moved to the host after each optimizer step and back before
the next. Whether the device allows either, and whether host copies are
pinned, is the device backend's answer (``trinity.device.offload_support``).
"""

from __future__ import annotations

from typing import Any

import torch

from trinity.common.config.plan.trainer import OffloadPlan
from trinity.device.types import OffloadSupport


class OffloadUnsupportedError(RuntimeError):
    """The config asks for offload and the device backend says it cannot."""


def shard_options(plan: OffloadPlan, support: OffloadSupport, owner: str) -> dict[str, Any]:
    """Return the ``fully_shard`` keyword arguments that offload ``plan``'s parameters ({} when it does not).

    Raises OffloadUnsupportedError, with the backend's reason, when the plan
    offloads anything and the backend does not support it.
    """
    if not plan.any:
        return {}
    if not support.supported:
        raise OffloadUnsupportedError(f"the {owner} asks for offload (param_offload / optimizer_offload), but the "
                                      f"device backend cannot: {support.reason}")
    if not plan.params:
        return {}
    from torch.distributed.fsdp import CPUOffloadPolicy

    return {"offload_policy": CPUOffloadPolicy(pin_memory=support.pin_memory)}


def move_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device | str) -> int:
    """Move every tensor of ``optimizer``'s state to ``device``; return the bytes moved (0 when already there)."""
    moved = 0
    target = torch.device(device)
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.device != target:
                local = value.to_local() if hasattr(value, "to_local") else value
                moved += local.numel() * local.element_size()
                state[key] = value.to(target, non_blocking=True)
    return moved
