"""The core's conformance kit, run against the npu backend with the torch_npu double."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trinity.device.testing import BackendConformance

_FAKE_SITE = Path(__file__).resolve().parent / "doubles" / "fake_site"


class TestNpuConformance(BackendConformance):
    """Every contract check of the kit; the device is a fake 16-NPU host (davinci0..davinci15)."""

    backend_name = "npu"
    heavy_modules = ("torch_npu",)
    # The double's ProcessGroupHCCL moves CPU tensors: the torch_npu double has no NPU tensors.
    collective_tensor_device = "cpu"
    # The double is findable in the probe's fresh interpreter: the probe must still not import it.
    probe_subprocess_env = {
        "PYTHONPATH": os.pathsep.join(p for p in (str(_FAKE_SITE), os.environ.get("PYTHONPATH", "")) if p)
    }

    @pytest.fixture
    def device_runtime(self, npu_runtime: Any) -> Iterator[None]:
        """A fake Ascend host with 16 NPUs, CANN sourced and the torch_npu double importable."""
        yield
