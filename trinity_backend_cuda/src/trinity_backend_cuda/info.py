"""The static facts of the CUDA backend (its ``BackendInfo``)."""

from __future__ import annotations

from trinity.device.spec import SPEC_VERSION
from trinity.device.types import BackendInfo

#: The variable through which the CUDA runtime (and Ray) mask the GPUs a process sees.
VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"

INFO = BackendInfo(
    name="cuda",
    device_type="cuda",
    priority=100,
    spec_version=SPEC_VERSION,
    collective_backend="nccl",
    ray_resource_key="GPU",
    visible_devices_env=VISIBLE_DEVICES_ENV,
    # NCCL_*: transport and debug settings of every NCCL communicator (training and
    # weight sync); TORCH_NCCL_*: torch's NCCL process-group knobs (timeouts, async
    # error handling); CUDA_*: runtime settings such as CUDA_DEVICE_ORDER or
    # CUDA_DEVICE_MAX_CONNECTIONS (CUDA_VISIBLE_DEVICES itself is excluded by the
    # core: Ray sets it per worker); NVIDIA_*: container runtime settings;
    # PYTORCH_CUDA_*: the caching allocator (PYTORCH_CUDA_ALLOC_CONF).
    worker_env_prefixes=("NCCL_", "TORCH_NCCL_", "CUDA_", "NVIDIA_", "PYTORCH_CUDA_"),
    description="NVIDIA GPUs through CUDA; torch.distributed over NCCL, probed through NVML",
)
