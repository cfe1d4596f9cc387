"""The CUDA backend passes the core's conformance kit, with NVML and torch.cuda replaced by test doubles."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest

from trinity.device.testing import BackendConformance


class TestCudaConformance(BackendConformance):
    """Every contract check of the kit, on two double GPUs (the probe-import check runs for real)."""

    backend_name: ClassVar[str] = "cuda"
    heavy_modules: ClassVar[tuple[str, ...]] = ("triton", "vllm")
    # The ProcessGroupNCCL double moves CPU tensors: there are no CUDA tensors without a GPU.
    collective_tensor_device: ClassVar[str | None] = "cpu"

    @pytest.fixture
    def device_runtime(self, cuda_doubles: Callable[..., Any]) -> Iterator[None]:
        """Two GPUs, a driver, a CUDA build of torch and its ProcessGroupNCCL, all doubles."""
        cuda_doubles(gpus=2)
        yield
