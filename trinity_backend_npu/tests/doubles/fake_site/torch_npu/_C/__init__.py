"""Test double of ``torch_npu._C`` (torch_npu's C extension), not the real module: only ``_distributed_c10d``."""

from torch_npu._C import _distributed_c10d

__all__ = ["_distributed_c10d"]
