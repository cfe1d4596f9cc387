"""The CUDA backend against the core's conformance kit on the real device: no test doubles.

``trinity_backend_cuda/tests/test_cuda_conformance.py`` runs the same kit with
NVML and ``torch.cuda`` replaced by doubles (its ``device_runtime`` fixture
installs them). Here ``device_runtime`` keeps the kit's default, the real
machine, so every check talks to the driver and the GPU. A few checks the
doubles cannot make are added (probe against torch, real allocations); on the
driver's CPU smoke run (``GPU_CHECK_DEVICE=cpu``) the kit runs against the
CPU backend and those device-only checks are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import pytest
from gpu_support import EXPECTED_DEVICE

from trinity.device import facade
from trinity.device.backend import Backend
from trinity.device.selection import DEVICE_ENV, RESOLVED_ENV
from trinity.device.testing import BackendConformance

BACKEND = EXPECTED_DEVICE
needs_device = pytest.mark.skipif(BACKEND == "cpu", reason="needs an accelerator (CPU smoke run)")


class TestRealBackendConformance(BackendConformance):
    """Every contract check of the kit on the real device, plus what only real hardware can show."""

    backend_name: ClassVar[str] = BACKEND
    heavy_modules: ClassVar[tuple[str, ...]] = ("triton", "vllm") if BACKEND == "cuda" else ()

    @pytest.fixture(autouse=True)
    def _unselected(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        """Each test starts without a device choice from the caller's shell, and unselected."""
        for name in (DEVICE_ENV, RESOLVED_ENV):
            monkeypatch.delenv(name, raising=False)
        facade.reset()
        yield
        facade.reset()

    @needs_device
    def test_probe_agrees_with_torch(self, available_backend: Backend) -> None:
        """The NVML probe counts the devices torch sees (after CUDA_VISIBLE_DEVICES)."""
        module = available_backend.device_module()
        assert available_backend.probe().device_count == module.device_count()

    @needs_device
    def test_memory_stats_see_a_real_allocation(self, available_backend: Backend) -> None:
        """64 MiB allocated on device 0 show up in memory_stats; total and free come from the driver."""
        import torch

        available_backend.set_device(0)
        before = available_backend.memory_stats()
        block = torch.empty(64 << 20, dtype=torch.uint8, device=torch.device(available_backend.info.device_type, 0))
        during = available_backend.memory_stats()
        assert during.allocated - before.allocated >= 64 << 20
        assert 0 < during.free <= during.total
        del block
        available_backend.empty_cache()

    @needs_device
    def test_seeded_device_generator(self, available_backend: Backend) -> None:
        """manual_seed makes the device's own generator reproducible too."""
        import torch

        device = torch.device(available_backend.info.device_type, 0)
        available_backend.manual_seed(7)
        first = torch.rand(8, device=device)
        available_backend.manual_seed(7)
        assert torch.equal(first, torch.rand(8, device=device))

    @needs_device
    def test_torch_device_through_the_facade(self, selected: Backend) -> None:
        """The façade hands out ``cuda:0`` and computing there works."""
        import torch

        device = facade.torch_device()
        assert device == torch.device(selected.info.device_type, 0)
        value = (torch.ones(1024, device=device) * 2).sum()
        facade.synchronize()
        assert float(value) == 2048.0
