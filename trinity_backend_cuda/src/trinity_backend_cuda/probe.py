"""The CUDA probe: is a GPU usable by this process? Answered without touching CUDA.

A CUDA context created in the driver process breaks every worker forked from
it, and ``import torch`` costs about a second, so the probe uses only:

0. the file system (:mod:`trinity_backend_cuda.driver`): with no NVIDIA device
   files and no NVML library there is no driver, and the answer comes without
   importing ``pynvml``;
1. NVML (``pynvml``, imported here, not at plugin import): is there a driver,
   how many GPUs does it see, and (only when ``CUDA_VISIBLE_DEVICES`` names
   GPUs by UUID) their UUIDs;
2. ``CUDA_VISIBLE_DEVICES``, resolved the way the CUDA runtime reads it
   (:mod:`trinity_backend_cuda.visible`);
3. the text of ``torch/version.py``: is the installed torch a CUDA build?

The first failing step gives the reason; hardware comes first because a CUDA
build of torch is of no use on a machine without a working driver.
"""

from __future__ import annotations

import os

from trinity.device.types import ProbeResult
from trinity_backend_cuda import driver, nvml, torchbuild, visible
from trinity_backend_cuda.info import VISIBLE_DEVICES_ENV
from trinity_backend_cuda.torchbuild import INSTALL_CUDA_TORCH


def probe() -> ProbeResult:
    """Return whether CUDA GPUs are usable here, how many are visible, and why not when not.

    Never imports torch and never creates a CUDA context; never raises.
    """
    try:
        return _probe()
    except Exception as exc:  # noqa: BLE001 - the probe answers, it does not raise
        return ProbeResult.unavailable(f"the CUDA probe failed unexpectedly: {type(exc).__name__}: {exc}")


def _probe() -> ProbeResult:
    if not driver.look_for_driver().found:
        return ProbeResult.unavailable(f"{driver.NO_DRIVER_REASON}; {nvml.INSTALL_DRIVER_FIX}")
    mask = os.environ.get(VISIBLE_DEVICES_ENV)
    try:
        report = nvml.read_nvml(uuids=visible.needs_uuids(mask))
    except nvml.NvmlUnavailable as exc:
        return ProbeResult.unavailable(str(exc))
    if report.device_count == 0:
        return ProbeResult.unavailable(
            "the NVIDIA driver is loaded but reports no GPU; check `nvidia-smi`, and in a container "
            "that it was started with GPU access (`--gpus all`)"
        )
    devices = visible.resolve(mask, report.device_count, report.uuids)
    if devices.count == 0:
        return ProbeResult.unavailable(devices.explanation)
    build = torchbuild.read_torch_build()
    if build is None:
        return ProbeResult.unavailable(f"torch is not installed; {INSTALL_CUDA_TORCH}")
    problem = build.problem()
    if problem:
        return ProbeResult.unavailable(problem)
    return ProbeResult(available=True, device_count=devices.count)
