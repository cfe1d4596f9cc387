"""The memory sync method: the full state dict goes through the Ray object store.

Trainer rank 0 puts its gathered weights once (:func:`put_state_dict`); every
engine gets the same object reference as the argument of
``load_state_dict.remote(ref, version)`` and Ray hands it the dict itself
(zero-copy reads of the tensors' buffers on the same node). Slower than a
collective for large models (every tensor is serialised into the object store
and read back), but it needs no process group at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def put_state_dict(state_dict: Mapping[str, torch.Tensor]) -> Any:
    """Put ``state_dict`` (CPU tensors) into the Ray object store and return its ObjectRef."""
    import ray

    cpu = {name: tensor.detach().to("cpu").contiguous() for name, tensor in state_dict.items()}
    return ray.put(cpu)


def put_payload(payload: Any) -> Any:
    """Put ``payload`` (plain data and CPU tensors) into the Ray object store and return its ObjectRef."""
    import ray

    return ray.put(payload)
