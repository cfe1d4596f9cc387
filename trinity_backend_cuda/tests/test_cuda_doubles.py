"""The test doubles behave like the real pynvml and torch.cuda where the backend relies on them."""

from __future__ import annotations

from types import ModuleType

import pynvml
import pytest
import torch


def test_nvml_double_has_the_real_error_codes_and_classes(doubles: ModuleType) -> None:
    real_codes = {name: getattr(pynvml, name) for name in dir(pynvml) if name.startswith("NVML_ERROR_")}
    assert dict(doubles.NVML_ERROR_CODES) == real_codes
    fake = doubles.FakeNvml().as_module()
    for code in real_codes.values():
        real_error = pynvml.NVMLError(code)
        fake_error = fake.NVMLError(code)
        assert type(fake_error).__name__ == type(real_error).__name__
        assert isinstance(fake_error, getattr(fake, type(real_error).__name__))
        assert isinstance(fake_error, fake.NVMLError)
        assert fake_error.value == real_error.value == code
        if code in pynvml.NVMLError._errcode_to_string:
            assert str(fake_error) == str(real_error)
    assert fake.NVMLError_DriverNotLoaded().value == pynvml.NVMLError_DriverNotLoaded().value == 9
    assert fake.NVMLError(9) == fake.NVMLError_DriverNotLoaded()


def test_nvml_double_counts_sessions_like_nvml(doubles: ModuleType) -> None:
    nvml = doubles.FakeNvml(gpus=doubles.make_gpus(2))
    module = nvml.as_module()
    with pytest.raises(module.NVMLError_Uninitialized):
        module.nvmlDeviceGetCount()
    with pytest.raises(module.NVMLError_Uninitialized):
        module.nvmlShutdown()
    module.nvmlInit()
    module.nvmlInit()
    module.nvmlShutdown()
    assert module.nvmlDeviceGetCount() == 2, "still open: NVML counts nvmlInit calls"
    handle = module.nvmlDeviceGetHandleByIndex(1)
    assert module.nvmlDeviceGetUUID(handle).startswith("GPU-")
    with pytest.raises(module.NVMLError_InvalidArgument):
        module.nvmlDeviceGetHandleByIndex(2)
    module.nvmlShutdown()
    assert nvml.refcount == 0
    with pytest.raises(module.NVMLError_Uninitialized):
        module.nvmlSystemGetDriverVersion()


def test_real_pynvml_raises_library_not_found_the_same_way(no_driver_library: ModuleType, doubles: ModuleType) -> None:
    with pytest.raises(pynvml.NVMLError) as real:
        pynvml.nvmlInit()
    fake = doubles.FakeNvml(fail={"nvmlInit": doubles.NVML_ERROR_LIBRARY_NOT_FOUND}).as_module()
    with pytest.raises(fake.NVMLError) as double:
        fake.nvmlInit()
    assert type(real.value).__name__ == type(double.value).__name__ == "NVMLError_LibraryNotFound"
    assert str(real.value) == str(double.value)


def test_torch_cuda_double_tracks_and_restores(doubles: ModuleType) -> None:
    originals = {name: getattr(torch.cuda, name) for name in doubles.TORCH_CUDA_FUNCTIONS}
    with pytest.MonkeyPatch.context() as patch:
        runtime = doubles.install(patch, 2)
        assert torch.cuda.is_available() and torch.cuda.device_count() == 2
        torch.cuda.set_device("cuda:1")
        assert torch.cuda.current_device() == 1
        torch.cuda.set_device(-1)  # a no-op in torch
        assert torch.cuda.current_device() == 1
        with pytest.raises(torch.AcceleratorError, match="invalid device ordinal"):
            torch.cuda.set_device(2)
        with pytest.raises(ValueError, match="Expected a cuda device"):
            torch.cuda.set_device(torch.device("cpu"))
        with pytest.raises(RuntimeError, match="Invalid device argument 5"):
            torch.cuda.memory_allocated(5)
        with pytest.raises(torch.AcceleratorError):
            torch.cuda.synchronize(3)
        free, total = torch.cuda.mem_get_info()
        assert free == total == runtime.cuda.gpus[1].total_memory
        torch.manual_seed(3)  # torch seeds every CUDA generator through manual_seed_all
        assert runtime.cuda.seeds == [3]
    assert {name: getattr(torch.cuda, name) for name in doubles.TORCH_CUDA_FUNCTIONS} == originals
