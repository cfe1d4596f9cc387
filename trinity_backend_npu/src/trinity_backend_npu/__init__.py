"""Huawei Ascend NPU (910B and newer) device backend for trinity-rft.

The plugin object is :mod:`trinity_backend_npu.plugin`, published under the
``trinity.backends`` entry point ``npu``. Importing this package (or the
plugin) imports neither torch nor torch_npu: the Ascend runtime is loaded only
by the hooks that need the device (see :mod:`trinity_backend_npu.runtime`).
"""

from __future__ import annotations

__version__ = "0.3.0"

__all__ = ["__version__"]
