"""The Acme backend's hook implementations: the module the entry point names.

trinity-rft imports this module in every ``trinity`` command and in every
process that asks a device question, so importing it must stay cheap: the
standard library and ``trinity.device`` only. A real backend imports its
torch extension inside the hooks that need the device, never up here.

Only the two required hooks and the ones where Acme differs from the core's
defaults are implemented (spec 2's dtype and attention answers among them). synchronize, empty_cache, memory_stats,
manual_seed, device_module, visible_devices_env and worker_env come from
``trinity.device.defaults``, driven by ``INFO``.
"""

from __future__ import annotations

import os
import threading

from trinity.device import (
    AttentionChoice,
    BackendInfo,
    CompileSupport,
    DoctorCheck,
    DtypeSupport,
    InvalidDeviceRequestError,
    OffloadSupport,
    ProbeResult,
    hookimpl,
)
from trinity_backend_acme import devices

#: The DeviceBackend spec version this file was written against. A literal on
#: purpose: taking trinity's SPEC_VERSION would claim every future spec too.
#: pyproject.toml requires the core that speaks it (trinity-rft>=0.3 for spec 3).
WRITTEN_FOR_SPEC = 3

INFO = BackendInfo(
    name="acme",
    # This example computes on the host CPU so that it runs on any machine. A
    # real vendor puts its own torch device type here (registered with torch by
    # its extension through the PrivateUse1 mechanism) and its own collective.
    device_type="cpu",
    priority=50,
    spec_version=WRITTEN_FOR_SPEC,
    collective_backend="gloo",
    ray_resource_key="ACME",
    visible_devices_env=devices.VISIBLE_DEVICES_ENV,
    worker_env_prefixes=("ACME_",),
    description="Acme accelerator (example backend: computes on the host CPU)",
)

# The current device, per thread as on CUDA.
_current = threading.local()


@hookimpl
def trinity_backend_info() -> BackendInfo:
    return INFO


@hookimpl
def trinity_probe() -> ProbeResult:
    installed = devices.installed_devices(os.environ)
    if not installed:
        node = devices.device_dir(os.environ) / "acme<N>"
        return ProbeResult.unavailable(
            f"no Acme device found (no {node} device node); install the Acme driver, "
            f"or set {devices.DEVICE_DIR_ENV} to the folder the nodes are mounted in"
        )
    try:
        visible = devices.visible_devices(installed, os.environ)
    except ValueError as exc:
        return ProbeResult.unavailable(f"{exc}; correct or unset {devices.VISIBLE_DEVICES_ENV}")
    if not visible:
        return ProbeResult.unavailable(
            f"{devices.VISIBLE_DEVICES_ENV}={os.environ[devices.VISIBLE_DEVICES_ENV]!r} hides "
            f"{devices.describe(installed)}; unset it or list the device ids to use"
        )
    return ProbeResult(available=True, device_count=len(visible))


@hookimpl
def trinity_set_device(local_rank: int) -> None:
    """Make visible device ``local_rank`` this thread's current one.

    A backend with its own torch device type does not need this hook: the
    default calls ``torch.<device_type>.set_device``. Acme needs it because its
    tensors live on the CPU, which torch treats as a single device.
    """
    try:
        visible = devices.visible_devices(devices.installed_devices(os.environ), os.environ)
    except ValueError as exc:
        raise InvalidDeviceRequestError(str(exc)) from exc
    if not 0 <= local_rank < len(visible):
        raise InvalidDeviceRequestError(
            f"Acme device index {local_rank} is out of range: this process sees {len(visible)} "
            f"({devices.describe(visible)}); check {devices.VISIBLE_DEVICES_ENV} and the number of workers per node"
        )
    _current.index = local_rank


@hookimpl
def trinity_current_device_index() -> int:
    # Needed for the same reason as trinity_set_device: torch.cpu has no device index.
    index: int = getattr(_current, "index", 0)
    return index


@hookimpl
def trinity_torch_compile_support() -> CompileSupport:
    return CompileSupport(
        supported=False,
        reason="the Acme toolchain has no TorchInductor backend yet; leave trainer.use_torch_compile unset or false",
    )


@hookimpl
def trinity_supported_dtypes() -> DtypeSupport:
    """Spec 2: the dtypes Acme computes in, the preferred first (what ``dtype: auto`` becomes)."""
    return DtypeSupport(
        ("float32", "bfloat16"),
        unsupported={"float16": "Acme's matrix units have no float16 path; use bfloat16 (same memory, wider range)"},
    )


@hookimpl
def trinity_attention_implementation(dtype: str) -> AttentionChoice:
    """Spec 2: the attention kernel models are loaded with (transformers' ``attn_implementation``)."""
    return AttentionChoice("sdpa", f"Acme runs torch's scaled_dot_product_attention in {dtype}; no fused kernel yet")


@hookimpl
def trinity_offload_support() -> OffloadSupport:
    """Spec 3: whether the trainer may keep parameters and optimizer state in host memory."""
    return OffloadSupport(False, reason="Acme's runtime cannot map host memory for device kernels yet "
                                        "(planned for Acme SDK 2); train without param_offload / optimizer_offload")


@hookimpl
def trinity_doctor() -> list[DoctorCheck]:
    """Acme's own checks; the core adds its torch check beside them."""
    folder = devices.device_dir(os.environ)
    installed = devices.installed_devices(os.environ)
    if not installed:
        return [
            DoctorCheck(
                "Acme device nodes",
                "fail",
                f"no acme<N> device node in {folder}",
                fix=f"install the Acme driver, or set {devices.DEVICE_DIR_ENV} to the folder the nodes are mounted in",
            )
        ]
    checks = [
        DoctorCheck(
            "Acme device nodes",
            "ok",
            f"{devices.describe(installed)} in {folder}",
            facts={"device_dir": str(folder), "devices": str(len(installed))},
        )
    ]
    denied = [i for i in installed if not os.access(folder / f"acme{i}", os.R_OK | os.W_OK)]
    if denied:
        checks.append(
            DoctorCheck(
                "Acme device permissions",
                "fail",
                f"this user cannot open {devices.describe(denied)}",
                fix="add the user to the group that owns the Acme device nodes, then log in again",
            )
        )
    try:
        visible = devices.visible_devices(installed, os.environ)
    except ValueError as exc:
        fix = f"correct or unset {devices.VISIBLE_DEVICES_ENV}"
        checks.append(DoctorCheck(devices.VISIBLE_DEVICES_ENV, "fail", str(exc), fix=fix))
    else:
        if not visible:
            checks.append(
                DoctorCheck(
                    devices.VISIBLE_DEVICES_ENV,
                    "fail",
                    f"hides {devices.describe(installed)}: no Acme device is visible to this process",
                    fix=f"unset {devices.VISIBLE_DEVICES_ENV} or list the device ids to use",
                )
            )
    return checks
