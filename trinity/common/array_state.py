"""Pickle state for records that hold small CPU tensors: the tensors travel as numpy arrays.

Experiences and completions cross process boundaries many times per step
(engine actor -> explorer, explorer -> queue actor -> trainer). Pickling a
torch tensor goes through torch's storage machinery and costs several
times what a numpy array of the same bytes does, and Ray ships numpy arrays
out of band. :func:`tensors_to_arrays` and :func:`arrays_to_tensors` are
the two halves of ``__getstate__`` / ``__setstate__`` for such records.

A tensor numpy cannot hold (bfloat16, one on an accelerator, one that
needs a gradient) is left as it is, so the round trip is always exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

#: Marks a field that was a tensor, so a record's genuine numpy fields stay numpy.
_TENSOR = "__tensor__"


def _as_array(value: torch.Tensor) -> np.ndarray | None:
    if value.device.type != "cpu" or value.requires_grad or value.dtype == torch.bfloat16:
        return None
    try:
        return value.numpy()
    except (TypeError, RuntimeError):  # a dtype numpy lacks
        return None


def tensors_to_arrays(state: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of ``state`` with its CPU tensors as ``(marker, array)`` pairs."""
    out: dict[str, Any] = {}
    for name, value in state.items():
        if isinstance(value, torch.Tensor):
            array = _as_array(value)
            out[name] = value if array is None else (_TENSOR, array)
        else:
            out[name] = value
    return out


def arrays_to_tensors(state: dict[str, Any]) -> dict[str, Any]:
    """Undo :func:`tensors_to_arrays` (arrays Ray hands over read-only are copied)."""
    out: dict[str, Any] = {}
    for name, value in state.items():
        if isinstance(value, tuple) and len(value) == 2 and value[0] == _TENSOR:
            array = value[1]
            out[name] = torch.from_numpy(array if array.flags.writeable else array.copy())
        else:
            out[name] = value
    return out
