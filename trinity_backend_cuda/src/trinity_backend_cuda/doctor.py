"""Diagnostic checks of ``trinity backends check`` for the CUDA backend.

Each check reports ``ok``, ``warn`` or ``fail`` with a fix; none raises (a check
that breaks is reported as a ``fail`` of its own) and none imports torch or
creates a CUDA context.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from trinity.device.types import DoctorCheck
from trinity_backend_cuda import compile_support, nccl, nvml, torchbuild, visible
from trinity_backend_cuda.info import VISIBLE_DEVICES_ENV
from trinity_backend_cuda.torchbuild import INSTALL_CUDA_TORCH, TorchBuild

_REPORT_BUG = "this is a bug in trinity-backend-cuda; please report it with this output"

#: The outcome of the NVML query the driver checks share.
NvmlOutcome = nvml.NvmlReport | nvml.NvmlUnavailable
#: The outcome of reading torch's build facts: facts, None (not installed) or the error.
BuildOutcome = TorchBuild | None | Exception


def run_checks() -> list[DoctorCheck]:
    """Run every CUDA check and return the findings; never raises."""
    mask = os.environ.get(VISIBLE_DEVICES_ENV)
    report = _query_nvml(mask)
    build = _read_build()
    checks = [
        _safe("NVIDIA driver", driver_check, report),
        _safe(VISIBLE_DEVICES_ENV, visible_devices_check, report, mask),
        _safe("torch CUDA build", torch_build_check, build),
        _safe("CUDA driver compatibility", driver_compatibility_check, report, build),
        _safe("NCCL", nccl_check, build),
        _safe("triton (torch.compile)", triton_check),
        _safe("vllm", vllm_check),
    ]
    return [check for check in checks if check is not None]


def _query_nvml(mask: str | None) -> NvmlOutcome:
    try:
        return nvml.read_nvml(uuids=visible.needs_uuids(mask), details=True)
    except nvml.NvmlUnavailable as exc:
        return exc
    except Exception as exc:  # noqa: BLE001 - reported as a failing check
        return nvml.NvmlUnavailable(f"querying NVML raised {type(exc).__name__}: {exc}", _REPORT_BUG)


def _read_build() -> BuildOutcome:
    try:
        return torchbuild.read_torch_build()
    except Exception as exc:  # noqa: BLE001 - reported as a failing check
        return exc


def _safe(name: str, check: Callable[..., DoctorCheck | None], *args: object) -> DoctorCheck | None:
    """Run ``check(*args)``; an exception becomes a ``fail`` named ``name``."""
    try:
        return check(*args)
    except Exception as exc:  # noqa: BLE001 - a check must never raise
        return DoctorCheck(name, "fail", f"the check raised {type(exc).__name__}: {exc}", fix=_REPORT_BUG)


def driver_check(report: NvmlOutcome) -> DoctorCheck:
    """Is an NVIDIA driver loaded, which version, and which GPUs does it see?"""
    name = "NVIDIA driver"
    if isinstance(report, nvml.NvmlUnavailable):
        facts = {"nvml_error": str(report.code)} if report.code is not None else {}
        return DoctorCheck(name, "fail", report.reason, fix=report.fix, facts=facts)
    facts = {
        "driver_version": report.driver_version,
        "cuda_driver_version": report.cuda_driver_version_text,
        "gpu_count": str(report.device_count),
    }
    if report.device_count == 0:
        return DoctorCheck(
            name, "fail", f"driver {report.driver_version} is loaded but reports no GPU",
            fix="check `nvidia-smi`; in a container, start it with GPU access (`--gpus all`)", facts=facts,
        )
    cuda = f", supports CUDA up to {report.cuda_driver_version_text}" if report.cuda_driver_version else ""
    gpus = ", ".join(f"{i}: {gpu_name or 'unknown'}" for i, gpu_name in enumerate(report.names))
    facts["gpus"] = gpus
    return DoctorCheck(
        name, "ok", f"driver {report.driver_version}{cuda}; {report.device_count} GPU(s) ({gpus})", facts=facts
    )


def visible_devices_check(report: NvmlOutcome, mask: str | None) -> DoctorCheck | None:
    """Does ``CUDA_VISIBLE_DEVICES`` leave GPUs visible, and does CUDA read all of its entries?"""
    if isinstance(report, nvml.NvmlUnavailable) or report.device_count == 0:
        return None  # nothing to mask; the driver check already failed
    name = VISIBLE_DEVICES_ENV
    if mask is None:
        return DoctorCheck(name, "ok", f"unset: all {report.device_count} GPU(s) are visible")
    devices = visible.resolve(mask, report.device_count, report.uuids)
    facts = {"value": mask, "visible": str(devices.count)}
    fix = f"list GPU indices or UUIDs that exist (`nvidia-smi -L`) once each, or unset {VISIBLE_DEVICES_ENV}"
    if devices.count == 0:
        return DoctorCheck(name, "fail", devices.explanation, fix=fix, facts=facts)
    if devices.ignored:
        return DoctorCheck(name, "warn", f"{devices.count} GPU(s) visible; {devices.explanation}", fix=fix, facts=facts)
    return DoctorCheck(name, "ok", f"{mask!r}: {devices.count} of {report.device_count} GPU(s) visible", facts=facts)


def torch_build_check(build: BuildOutcome) -> DoctorCheck:
    """Is the installed torch a CUDA build (read from ``torch/version.py``, not imported)?"""
    name = "torch CUDA build"
    if isinstance(build, Exception):
        return DoctorCheck(name, "fail", f"reading torch's build raised {type(build).__name__}: {build}",
                           fix=INSTALL_CUDA_TORCH)
    if build is None:
        return DoctorCheck(name, "fail", "torch is not installed", fix=INSTALL_CUDA_TORCH)
    facts = {"torch": build.version, "torch_cuda": build.cuda or ""}
    problem = build.problem()
    if problem:
        detail = problem.split("; ", 1)[0]
        return DoctorCheck(name, "fail", detail, fix=INSTALL_CUDA_TORCH, facts=facts)
    return DoctorCheck(name, "ok", f"torch {build.version} built with CUDA {build.cuda}", facts=facts)


def driver_compatibility_check(report: NvmlOutcome, build: BuildOutcome) -> DoctorCheck | None:
    """Is the driver new enough for the CUDA version torch was built with?"""
    if isinstance(report, nvml.NvmlUnavailable) or not report.cuda_driver_version:
        return None
    if not isinstance(build, TorchBuild) or not build.cuda:
        return None
    name = "CUDA driver compatibility"
    driver = (report.cuda_driver_version // 1000, (report.cuda_driver_version % 1000) // 10)
    wanted = _major_minor(build.cuda)
    if wanted is None:
        return None
    facts = {"driver_cuda": report.cuda_driver_version_text, "torch_cuda": build.cuda}
    fix = (
        f"upgrade the NVIDIA driver to one supporting CUDA {build.cuda}, or install a torch built for "
        f"CUDA {report.cuda_driver_version_text} or older"
    )
    if driver[0] < wanted[0]:
        return DoctorCheck(
            name, "fail",
            f"torch needs CUDA {build.cuda} but the driver supports only CUDA {report.cuda_driver_version_text}",
            fix=fix, facts=facts,
        )
    if driver < wanted:
        return DoctorCheck(
            name, "warn",
            f"torch is built with CUDA {build.cuda}, newer than the driver's {report.cuda_driver_version_text}: "
            "it runs through CUDA minor-version compatibility, but kernels needing the newer driver "
            "(PTX JIT, new features) fail",
            fix=fix, facts=facts,
        )
    return DoctorCheck(
        name, "ok", f"the driver (CUDA {report.cuda_driver_version_text}) runs torch's CUDA {build.cuda}", facts=facts
    )


def _major_minor(text: str) -> tuple[int, int] | None:
    parts = text.split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def nccl_check(build: BuildOutcome) -> DoctorCheck:
    """Is an NCCL library installed for torch's ``nccl`` process groups?"""
    name = "NCCL"
    torch_build = build if isinstance(build, TorchBuild) else None
    major = torch_build.cuda_major if torch_build else None
    found = nccl.find_nccl(torch_build.path if torch_build else None, major)
    wanted = f"nvidia-nccl-cu{major}" if major else "nvidia-nccl-cu12 or nvidia-nccl-cu13 (matching torch's CUDA)"
    if found is None:
        return DoctorCheck(
            name, "fail", "no NCCL library found (pip distributions, torch/lib, LD_LIBRARY_PATH, system directories)",
            fix=f"pip install {wanted}, or install a CUDA build of torch, which depends on it",
        )
    facts = {"nccl": found.version, "source": found.source, "path": str(found.path or "")}
    where = f" ({found.path})" if found.path else ""
    detail = f"NCCL {found.version or '(version unknown)'} from {found.source}{where}"
    if major and found.source.startswith("nvidia-nccl-cu") and found.source != f"nvidia-nccl-cu{major}":
        return DoctorCheck(
            name, "warn", f"{detail}, but torch is built with CUDA {major}",
            fix=f"pip install {wanted}", facts=facts,
        )
    return DoctorCheck(name, "ok", detail, facts=facts)


def triton_check() -> DoctorCheck:
    """Is triton installed, so ``torch.compile`` can generate CUDA kernels?"""
    support = compile_support.compile_support()
    if support.supported:
        return DoctorCheck("triton (torch.compile)", "ok", support.reason)
    detail = support.reason.split("; ", 1)[0]
    return DoctorCheck(
        "triton (torch.compile)", "warn", f"{detail}; trainer.use_torch_compile defaults to false",
        fix=compile_support.INSTALL_TRITON,
    )


def vllm_check() -> DoctorCheck:
    """Is vLLM installed, for ``explorer.engine_type: vllm``? Its absence is a ``warn`` (the hf engine runs)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return DoctorCheck(
            "vllm", "warn", "vLLM is not installed: the vllm rollout engine cannot run (the hf engine can)",
            fix="pip install 'trinity-rft[vllm]' (vLLM brings its own CUDA torch build)",
        )
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("vllm")
    except PackageNotFoundError:
        found = "unknown version"
    return DoctorCheck("vllm", "ok", f"vLLM {found} installed", facts={"vllm": found})
