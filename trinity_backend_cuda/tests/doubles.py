"""Test doubles of the NVIDIA runtime, so the CUDA backend can be tested on a machine without a GPU.

* :class:`FakeNvml` is a double of ``pynvml`` (nvidia-ml-py): the functions the
  backend calls, under the same names, with NVML's reference counting, its
  "Uninitialized" errors and the same ``NVMLError`` class hierarchy (one
  subclass per ``NVML_ERROR_*`` code, ``NVMLError(code)`` returning the
  subclass, ``.value``, equality by code, the same messages). It is installed
  as ``sys.modules["pynvml"]``, which is where the probe's ``import pynvml``
  finds it.
* :class:`FakeCuda` is a double of the ``torch.cuda`` functions the backend and
  the core's defaults call; it tracks the current device and raises like
  torch.cuda on an invalid ordinal. It is installed with ``monkeypatch.setattr``
  on the real ``torch.cuda`` module, so pytest restores the real functions after
  each test.
* "torch is a CUDA build" is pretended by replacing the seam
  ``trinity_backend_cuda.torchbuild.read_torch_build``.
* The driver's device files (``nvidiactl``, ``nvidia<N>``) are empty files in
  a folder of the test's own, which ``trinity_backend_cuda.driver.DEVICE_DIR``
  is pointed at: the probe only lists that folder, as it lists ``/dev``.
* :class:`FakeProcessGroupNCCL` is a double of ``torch.distributed.ProcessGroupNCCL``
  (constructor, ``Options``, lazy connection, ``broadcast``), installed as
  ``torch.distributed.ProcessGroupNCCL`` with ``is_nccl_available()`` true.

:func:`install` puts them all in place; ``conftest.py`` exposes it as the
``cuda_doubles`` fixture.
"""

from __future__ import annotations

import datetime
import string
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from trinity_backend_cuda import driver, torchbuild

GIB = 1 << 30

# --- the NVML double ------------------------------------------------------------------------

NVML_SUCCESS = 0
#: Every NVML_ERROR_* code nvidia-ml-py 13 defines, by name.
NVML_ERROR_CODES: Mapping[str, int] = {
    "NVML_ERROR_UNINITIALIZED": 1,
    "NVML_ERROR_INVALID_ARGUMENT": 2,
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_ALREADY_INITIALIZED": 5,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_INSUFFICIENT_SIZE": 7,
    "NVML_ERROR_INSUFFICIENT_POWER": 8,
    "NVML_ERROR_DRIVER_NOT_LOADED": 9,
    "NVML_ERROR_TIMEOUT": 10,
    "NVML_ERROR_IRQ_ISSUE": 11,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_ERROR_CORRUPTED_INFOROM": 14,
    "NVML_ERROR_GPU_IS_LOST": 15,
    "NVML_ERROR_RESET_REQUIRED": 16,
    "NVML_ERROR_OPERATING_SYSTEM": 17,
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": 18,
    "NVML_ERROR_IN_USE": 19,
    "NVML_ERROR_MEMORY": 20,
    "NVML_ERROR_NO_DATA": 21,
    "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED": 22,
    "NVML_ERROR_INSUFFICIENT_RESOURCES": 23,
    "NVML_ERROR_FREQ_NOT_SUPPORTED": 24,
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH": 25,
    "NVML_ERROR_DEPRECATED": 26,
    "NVML_ERROR_NOT_READY": 27,
    "NVML_ERROR_GPU_NOT_FOUND": 28,
    "NVML_ERROR_INVALID_STATE": 29,
    "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED": 30,
    "NVML_ERROR_UNKNOWN": 999,
}
NVML_ERROR_UNINITIALIZED = NVML_ERROR_CODES["NVML_ERROR_UNINITIALIZED"]
NVML_ERROR_INVALID_ARGUMENT = NVML_ERROR_CODES["NVML_ERROR_INVALID_ARGUMENT"]
NVML_ERROR_NO_PERMISSION = NVML_ERROR_CODES["NVML_ERROR_NO_PERMISSION"]
NVML_ERROR_DRIVER_NOT_LOADED = NVML_ERROR_CODES["NVML_ERROR_DRIVER_NOT_LOADED"]
NVML_ERROR_LIBRARY_NOT_FOUND = NVML_ERROR_CODES["NVML_ERROR_LIBRARY_NOT_FOUND"]
NVML_ERROR_GPU_IS_LOST = NVML_ERROR_CODES["NVML_ERROR_GPU_IS_LOST"]
NVML_ERROR_LIB_RM_VERSION_MISMATCH = NVML_ERROR_CODES["NVML_ERROR_LIB_RM_VERSION_MISMATCH"]
NVML_ERROR_UNKNOWN = NVML_ERROR_CODES["NVML_ERROR_UNKNOWN"]

#: The messages ``str(NVMLError(code))`` gives without asking the library (pynvml's table).
_NVML_MESSAGES = {
    1: "Uninitialized",
    2: "Invalid Argument",
    3: "Not Supported",
    4: "Insufficient Permissions",
    5: "Already Initialized",
    6: "Not Found",
    7: "Insufficient Size",
    8: "Insufficient External Power",
    9: "Driver Not Loaded",
    10: "Timeout",
    11: "Interrupt Request Issue",
    12: "NVML Shared Library Not Found",
    13: "Function Not Found",
    14: "Corrupted infoROM",
    15: "GPU is lost",
    16: "GPU requires restart",
    17: "The operating system has blocked the request.",
    18: "RM has detected an NVML/RM version mismatch.",
    20: "Insufficient Memory",
    999: "Unknown Error",
}


class NVMLError(Exception):
    """Double of ``pynvml.NVMLError``: ``NVMLError(code)`` is an instance of the code's subclass."""

    _valClassMapping: ClassVar[dict[int, type[NVMLError]]] = {}
    value: int

    def __new__(cls, value: int = NVML_ERROR_UNKNOWN) -> NVMLError:
        kind = NVMLError._valClassMapping.get(value, cls) if cls is NVMLError else cls
        error = Exception.__new__(kind)
        error.value = value
        return error

    def __str__(self) -> str:
        # pynvml asks the library for codes outside its table; without a loaded
        # library that query fails and this is what it prints.
        return _NVML_MESSAGES.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return self.value == getattr(other, "value", None)

    __hash__ = None  # type: ignore[assignment] - pynvml defines __eq__ only, so errors are unhashable


def _error_class_name(constant: str) -> str:
    """``NVML_ERROR_DRIVER_NOT_LOADED`` -> ``NVMLError_DriverNotLoaded`` (pynvml's naming)."""
    words = string.capwords(constant.removeprefix("NVML_ERROR_"), "_")
    return "NVMLError_" + words.replace("_", "")


def _make_error_class(constant: str, code: int) -> type[NVMLError]:
    def new(cls: type[NVMLError], *args: Any) -> NVMLError:
        return NVMLError.__new__(cls, code)

    subclass = type(_error_class_name(constant), (NVMLError,), {"__new__": new})
    NVMLError._valClassMapping[code] = subclass
    return subclass


#: ``NVMLError_DriverNotLoaded`` and friends, by class name.
NVML_ERROR_CLASSES: dict[str, type[NVMLError]] = {
    _error_class_name(name): _make_error_class(name, code) for name, code in NVML_ERROR_CODES.items()
}


@dataclass(frozen=True)
class FakeGpu:
    """One GPU as the doubles present it."""

    name: str = "NVIDIA H200"
    uuid: str = ""
    total_memory: int = 141 * GIB
    #: NVML error code this GPU's handle lookup fails with (e.g. GPU is lost), or None.
    handle_error: int | None = None
    #: CUDA compute capability ``(major, minor)``: 9.0 for Hopper, 8.0 for A100, 7.0 for V100.
    compute_capability: tuple[int, int] = (9, 0)


def make_gpus(count: int, name: str = "NVIDIA H200", compute_capability: tuple[int, int] = (9, 0)) -> list[FakeGpu]:
    """Return ``count`` identical GPUs with distinct, realistic UUIDs."""
    return [
        FakeGpu(name=name, uuid=f"GPU-{index:08x}-1111-2222-3333-44445555{index:04x}",
                compute_capability=compute_capability)
        for index in range(count)
    ]


@dataclass(eq=False)
class _FakeHandle:
    """Opaque device handle, like pynvml's ``c_nvmlDevice_t``."""

    index: int


@dataclass
class FakeNvml:
    """Double of ``pynvml`` with the functions the CUDA backend calls.

    ``fail`` maps a pynvml function name to the NVML error code it raises
    (``{"nvmlInit": NVML_ERROR_DRIVER_NOT_LOADED}``). A library that is not found
    is ``fail={"nvmlInit": NVML_ERROR_LIBRARY_NOT_FOUND}``, as pynvml raises it from
    ``nvmlInit``.
    """

    gpus: Sequence[FakeGpu] = field(default_factory=lambda: make_gpus(2))
    driver_version: str = "570.124.06"
    cuda_driver_version: int = 12080
    fail: Mapping[str, int] = field(default_factory=dict)
    #: Open NVML sessions (nvmlInit minus nvmlShutdown), as NVML counts them.
    refcount: int = 0
    #: How often each function was called, by name.
    calls: dict[str, int] = field(default_factory=dict)

    def _enter(self, function: str, needs_init: bool = True) -> None:
        self.calls[function] = self.calls.get(function, 0) + 1
        if function in self.fail:
            raise NVMLError(self.fail[function])
        if needs_init and self.refcount == 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    def nvmlInitWithFlags(self, flags: int) -> None:
        """Open an NVML session (counted)."""
        self._enter("nvmlInitWithFlags", needs_init=False)
        self.refcount += 1

    def nvmlInit(self) -> None:
        """Open an NVML session, as ``nvmlInitWithFlags(0)``."""
        self.calls["nvmlInit"] = self.calls.get("nvmlInit", 0) + 1
        if "nvmlInit" in self.fail:
            raise NVMLError(self.fail["nvmlInit"])
        self.nvmlInitWithFlags(0)

    def nvmlShutdown(self) -> None:
        """Close one NVML session; Uninitialized when none is open."""
        self._enter("nvmlShutdown")
        self.refcount -= 1

    def nvmlDeviceGetCount(self) -> int:
        """Return the number of GPUs."""
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _FakeHandle:
        """Return the handle of GPU ``index``; InvalidArgument when out of range."""
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if self.gpus[index].handle_error is not None:
            raise NVMLError(self.gpus[index].handle_error)
        return _FakeHandle(index)

    def _gpu(self, handle: object) -> FakeGpu:
        if not isinstance(handle, _FakeHandle):
            raise TypeError(f"expected a device handle from nvmlDeviceGetHandleByIndex, got {handle!r}")
        return self.gpus[handle.index]

    def nvmlDeviceGetUUID(self, handle: object) -> str:
        """Return the GPU's UUID (``"GPU-..."``)."""
        self._enter("nvmlDeviceGetUUID")
        return self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: object) -> str:
        """Return the GPU's product name."""
        self._enter("nvmlDeviceGetName")
        return self._gpu(handle).name

    def nvmlDeviceGetCudaComputeCapability(self, handle: object) -> tuple[int, int]:
        """Return the GPU's CUDA compute capability as ``(major, minor)``, as pynvml does."""
        self._enter("nvmlDeviceGetCudaComputeCapability")
        return self._gpu(handle).compute_capability

    def nvmlSystemGetDriverVersion(self) -> str:
        """Return the driver version text."""
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        """Return the newest CUDA version the driver supports (1000 * major + 10 * minor)."""
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda_driver_version

    def nvmlErrorString(self, result: int) -> str:
        """Return the message of an NVML code."""
        return _NVML_MESSAGES.get(result, "Unknown Error")

    def as_module(self) -> types.ModuleType:
        """Return a module named ``pynvml`` exposing this double's functions, errors and constants."""
        module = types.ModuleType("pynvml", "Test double of pynvml (nvidia-ml-py).")
        module.NVML_SUCCESS = NVML_SUCCESS  # type: ignore[attr-defined]
        for name, code in NVML_ERROR_CODES.items():
            setattr(module, name, code)
        module.NVMLError = NVMLError  # type: ignore[attr-defined]
        for class_name, error_class in NVML_ERROR_CLASSES.items():
            setattr(module, class_name, error_class)
        for function in (
            "nvmlInit", "nvmlInitWithFlags", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex",
            "nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetCudaComputeCapability",
            "nvmlSystemGetDriverVersion",
            "nvmlSystemGetCudaDriverVersion", "nvmlErrorString",
        ):
            setattr(module, function, getattr(self, function))
        return module


# --- the torch.cuda double ------------------------------------------------------------------

#: The torch.cuda functions the double replaces.
TORCH_CUDA_FUNCTIONS = (
    "is_available", "device_count", "set_device", "current_device", "synchronize", "empty_cache",
    "memory_allocated", "memory_reserved", "mem_get_info", "manual_seed_all",
)


def _invalid_ordinal() -> Exception:
    return torch.AcceleratorError(
        "CUDA error: invalid device ordinal\nGPU device may be out of range, do you have enough GPUs?\n"
    )


@dataclass
class FakeCuda:
    """Double of the ``torch.cuda`` functions the CUDA backend and the core's defaults call."""

    gpus: Sequence[FakeGpu] = field(default_factory=lambda: make_gpus(2))
    #: Index of the current device, as ``torch.cuda.current_device()`` reports it.
    current: int = 0
    #: Bytes held by live tensors, per device.
    allocated: dict[int, int] = field(default_factory=dict)
    #: Bytes cached by the allocator beyond ``allocated``, per device.
    cached: dict[int, int] = field(default_factory=dict)
    synchronized: list[int] = field(default_factory=list)
    empty_cache_calls: int = 0
    seeds: list[int] = field(default_factory=list)

    def _index(self, device: Any, optional: bool = True) -> int:
        """Resolve ``device`` like ``torch.cuda._get_device_index``."""
        if device is None and optional:
            return self.current
        if isinstance(device, str):
            device = torch.device(device)
        if isinstance(device, torch.device):
            if device.type != "cuda":
                raise ValueError(f"Expected a cuda device, but got: {device}")
            if device.index is None:
                if optional:
                    return self.current
                raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")
            return device.index
        if isinstance(device, int) and not isinstance(device, bool):
            return device
        raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")

    def _checked(self, device: Any) -> int:
        index = self._index(device)
        if not 0 <= index < len(self.gpus):
            raise _invalid_ordinal()
        return index

    def is_available(self) -> bool:
        """True when at least one GPU is present."""
        return len(self.gpus) > 0

    def device_count(self) -> int:
        """Number of GPUs."""
        return len(self.gpus)

    def set_device(self, device: Any) -> None:
        """Make ``device`` current; a negative index is a no-op, as in torch."""
        index = self._index(device, optional=False)
        if index < 0:
            return
        if index >= len(self.gpus):
            raise _invalid_ordinal()
        self.current = index

    def current_device(self) -> int:
        """Index of the current device."""
        return self.current

    def synchronize(self, device: Any = None) -> None:
        """Record a synchronisation of ``device`` (the current one by default)."""
        self.synchronized.append(self._checked(device))

    def empty_cache(self) -> None:
        """Release the cached (unallocated) memory of every device."""
        self.empty_cache_calls += 1
        self.cached.clear()

    def _memory_index(self, device: Any) -> int:
        index = self._index(device)
        if not 0 <= index < len(self.gpus):
            raise RuntimeError(f"Invalid device argument {index}: did you call init?")
        return index

    def memory_allocated(self, device: Any = None) -> int:
        """Bytes held by tensors on ``device``."""
        return self.allocated.get(self._memory_index(device), 0)

    def memory_reserved(self, device: Any = None) -> int:
        """Bytes held by the caching allocator on ``device``."""
        index = self._memory_index(device)
        return self.allocated.get(index, 0) + self.cached.get(index, 0)

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        """``(free, total)`` bytes of ``device``, as the driver reports them."""
        index = self._checked(device)
        total = self.gpus[index].total_memory
        return total - self.memory_reserved(index), total

    def manual_seed_all(self, seed: int) -> None:
        """Record the seed given to every device's generator."""
        self.seeds.append(int(seed))


# --- the ProcessGroupNCCL double --------------------------------------------------------------

#: torch's default timeout of an NCCL group (``torch.distributed.constants.default_pg_nccl_timeout``).
NCCL_DEFAULT_TIMEOUT = datetime.timedelta(minutes=10)


class FakeNcclOptions:
    """Double of ``torch.distributed.ProcessGroupNCCL.Options``: the attributes torch's own group factory sets."""

    def __init__(self, is_high_priority_stream: bool = False) -> None:
        self.is_high_priority_stream = is_high_priority_stream
        #: Set through this attribute by torch itself (``Backend.Options._timeout``).
        self._timeout = NCCL_DEFAULT_TIMEOUT
        self.global_ranks_in_group: list[int] = []
        self.group_name = ""
        self.split_from: Any = None
        self.split_color = 0
        self.backend = "nccl"


class FakeProcessGroupNCCL:
    """Double of ``torch.distributed.ProcessGroupNCCL`` (the c10d backend class), constructor and collectives.

    Built like the real class, ``ProcessGroupNCCL(store, rank, size, options)``,
    with a :class:`FakeNcclOptions` (anything else is a ``TypeError``, as
    pybind11 raises it). Like NCCL, construction does not contact the other
    members: the communicator is connected by ``eager_connect_single_device``
    or on the first collective, and that is the rendezvous. The double then
    runs its collectives through a real ``ProcessGroupGloo`` on the same store,
    so ranks really exchange data; unlike NCCL it moves **CPU** tensors (there
    are no CUDA tensors without a GPU).
    """

    Options = FakeNcclOptions
    #: Every group constructed since the doubles were installed, in order.
    created: ClassVar[list[FakeProcessGroupNCCL]] = []

    def __init__(self, store: Any, rank: int, size: int, options: FakeNcclOptions | None = None) -> None:
        options = FakeNcclOptions() if options is None else options
        if not isinstance(options, FakeNcclOptions):
            raise TypeError(
                "__init__(): incompatible constructor arguments; expected options of type "
                f"torch._C._distributed_c10d.ProcessGroupNCCL.Options, got {type(options).__name__}"
            )
        if not isinstance(options._timeout, datetime.timedelta):
            raise TypeError(f"options._timeout must be a datetime.timedelta, got {options._timeout!r}")
        self._store = store
        self._rank = int(rank)
        self._size = int(size)
        self.options = options
        self.supports_splitting = True
        #: Devices passed to ``eager_connect_single_device``.
        self.eager_devices: list[torch.device] = []
        self.shut_down = False
        self._gloo: Any = None
        type(self).created.append(self)

    def rank(self) -> int:
        """This member's rank."""
        return self._rank

    def size(self) -> int:
        """The group's size."""
        return self._size

    def _connected(self) -> Any:
        if self.shut_down:
            raise RuntimeError("ProcessGroupNCCL is shut down")
        if self._gloo is None:
            from torch.distributed import PrefixStore, ProcessGroupGloo

            self._gloo = ProcessGroupGloo(
                PrefixStore("nccl-double", self._store), self._rank, self._size, self.options._timeout
            )
        return self._gloo

    def eager_connect_single_device(self, device: torch.device) -> None:
        """Connect the communicator on ``device`` now (a rendezvous of all members)."""
        if not isinstance(device, torch.device) or device.type != "cuda" or device.index is None:
            raise ValueError(f"eager_connect_single_device needs a cuda device with an index, got {device!r}")
        self.eager_devices.append(device)
        self._connected()

    def broadcast(self, tensor: torch.Tensor, root: int, timeout: datetime.timedelta | None = None) -> Any:
        """Broadcast ``tensor`` in place from ``root``; returns the work handle (``wait()``)."""
        return self._connected().broadcast(tensor, root)

    def shutdown(self) -> None:
        """Release the communicator."""
        self.shut_down = True
        if self._gloo is not None:
            self._gloo.shutdown()
            self._gloo = None


# --- installing them ------------------------------------------------------------------------

#: A CUDA 12.8 build of torch, as ``torch/version.py`` would describe it.
CUDA_TORCH = torchbuild.TorchBuild(version="2.8.0+cu128", cuda="12.8")


@dataclass
class CudaDoubles:
    """The doubles installed for one test."""

    nvml: FakeNvml
    cuda: FakeCuda
    torch_build: torchbuild.TorchBuild | None
    #: The ProcessGroupNCCL double installed as ``torch.distributed.ProcessGroupNCCL``.
    nccl: type[FakeProcessGroupNCCL]


def install(
    monkeypatch: pytest.MonkeyPatch,
    gpus: int | Sequence[FakeGpu] = 2,
    *,
    nvml_fail: Mapping[str, int] | None = None,
    torch_build: torchbuild.TorchBuild | None = CUDA_TORCH,
    driver_version: str = "570.124.06",
    cuda_driver_version: int = 12080,
    device_dir: Path | None = None,
) -> CudaDoubles:
    """Install the NVML and torch.cuda doubles and the CUDA-build seam; pytest undoes it after the test.

    With ``device_dir`` the driver's device files are created there (one
    ``nvidia<N>`` per GPU) and the probe is pointed at it.
    """
    devices = make_gpus(gpus) if isinstance(gpus, int) else list(gpus)
    if device_dir is not None:
        pretend_device_files(monkeypatch, device_dir, len(devices))
    nvml = FakeNvml(
        gpus=devices, driver_version=driver_version, cuda_driver_version=cuda_driver_version,
        fail=dict(nvml_fail or {}),
    )
    cuda = FakeCuda(gpus=devices)
    monkeypatch.setitem(sys.modules, "pynvml", nvml.as_module())
    for name in TORCH_CUDA_FUNCTIONS:
        monkeypatch.setattr(torch.cuda, name, getattr(cuda, name))
    pretend_torch_build(monkeypatch, torch_build)
    nccl = install_nccl(monkeypatch)
    return CudaDoubles(nvml=nvml, cuda=cuda, torch_build=torch_build, nccl=nccl)


def install_nccl(monkeypatch: pytest.MonkeyPatch) -> type[FakeProcessGroupNCCL]:
    """Make ``torch.distributed`` offer NCCL through :class:`FakeProcessGroupNCCL` (a fresh subclass per call)."""
    import torch.distributed as dist

    fresh = type("ProcessGroupNCCL", (FakeProcessGroupNCCL,), {"created": []})
    monkeypatch.setattr(dist, "ProcessGroupNCCL", fresh, raising=False)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    return fresh


def pretend_torch_build(monkeypatch: pytest.MonkeyPatch, build: torchbuild.TorchBuild | None) -> None:
    """Replace the seam that reads ``torch/version.py`` so it reports ``build`` (None: torch not installed)."""
    reader: Callable[[], torchbuild.TorchBuild | None] = lambda: build  # noqa: E731
    monkeypatch.setattr(torchbuild, "read_torch_build", reader)


def pretend_device_files(monkeypatch: pytest.MonkeyPatch, folder: Path, gpus: int) -> Path:
    """Create the device files a loaded NVIDIA driver has for ``gpus`` GPUs in ``folder``; point the probe there."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("nvidiactl", "nvidia-uvm", *(f"nvidia{i}" for i in range(gpus))):
        (folder / name).touch()
    monkeypatch.setattr(driver, "DEVICE_DIR", folder)
    return folder
