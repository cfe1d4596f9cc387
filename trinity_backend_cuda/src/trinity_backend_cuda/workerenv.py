"""The environment every Ray worker of the CUDA backend is started with."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from trinity.device.defaults import forwarded_env
from trinity_backend_cuda.info import INFO

#: NCCL's switch between cuMem* (virtual memory) and legacy allocations for its buffers.
NCCL_CUMEM_ENABLE = "NCCL_CUMEM_ENABLE"
#: Present on machines whose GPUs talk over multi-node NVLink (IMEX channels, e.g. GB200 NVL72).
IMEX_CHANNELS_PATH = Path("/dev/nvidia-caps-imex-channels")


def worker_env(environ: Mapping[str, str], self_managed_devices: bool) -> dict[str, str]:
    """Return the environment for a Ray worker, given the driver's ``environ``.

    The core's forwarding (``NCCL_*``, ``TORCH_NCCL_*``, ``CUDA_*`` ... but never
    ``CUDA_VISIBLE_DEVICES``; ``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1``
    for workers that place themselves, i.e. vLLM engines) plus
    ``NCCL_CUMEM_ENABLE=0`` unless the user chose a value.
    """
    env = forwarded_env(INFO, environ, self_managed_devices)
    # Weight sync builds one NCCL communicator spanning the trainer and the vLLM
    # engines. vLLM (up to its removal in vllm-project/vllm#24141) set
    # NCCL_CUMEM_ENABLE=0 in every process that imports it, to avoid the extra
    # memory cuMem buffers cost with CUDA graphs + all-reduce (NVIDIA/nccl#1234);
    # a communicator whose ranks disagree on this setting hangs or crashes while
    # connecting, which is what vLLM's troubleshooting guide ("Known issues") and
    # verl/OpenRLHF/SkyRL's runtime environments guard against by setting 0 for
    # every worker. Setting it for all workers makes the trainer and the engines
    # agree whatever the vLLM version. The user's own value always wins (it is
    # forwarded above through the NCCL_ prefix). Multi-node NVLink needs cuMem,
    # so the switch is left alone where IMEX channels exist (as vLLM did); that
    # test runs on the driver's node, so on a mixed cluster set the variable yourself.
    if NCCL_CUMEM_ENABLE not in environ and not IMEX_CHANNELS_PATH.exists():
        env[NCCL_CUMEM_ENABLE] = "0"
    return env
