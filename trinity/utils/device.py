"""The established Trinity device API (``trinity.utils.device``), served by :mod:`trinity.device`.

Attributes are looked up on ``trinity.device`` at each access, so they always
reflect the current selection and its hot-path binding.
"""

from __future__ import annotations

from typing import Any

import trinity.device as _device

__all__ = list(_device.__all__)


def __getattr__(name: str) -> Any:
    if name in _device.__all__:
        return getattr(_device, name)
    raise AttributeError(f"module 'trinity.utils.device' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
