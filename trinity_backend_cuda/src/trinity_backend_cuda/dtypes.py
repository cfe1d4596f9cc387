"""Which dtypes the GPUs compute in, and which attention kernel models are loaded with.

Both answers are read without a CUDA context, so the driver can ask while it
plans a run: the compute capability comes from NVML, ``flash_attn`` is looked
up with ``importlib.util.find_spec`` (never imported). bfloat16 needs compute
capability 8.0 (Ampere) or newer, and so does FlashAttention-2. A node whose
GPUs differ answers for its oldest GPU. Where NVML cannot be asked (a driver
on a CPU-only head node), the Ampere answer is given with a note, and each
worker, which sees its own GPUs, asks again before it loads a model.
"""

from __future__ import annotations

import importlib.util
from importlib.metadata import PackageNotFoundError, version

from trinity.device.types import AttentionChoice, DtypeSupport
from trinity_backend_cuda import nvml

#: Oldest compute capability with bfloat16 arithmetic (and FlashAttention-2 kernels).
AMPERE = (8, 0)
#: Dtypes of GPUs from Ampere on; bfloat16 first, as upstream Trinity-RFT defaults to it.
AMPERE_DTYPES = ("bfloat16", "float32", "float16")
#: Dtypes of older GPUs; float32 first: float16 training without loss scaling may underflow.
PRE_AMPERE_DTYPES = ("float32", "float16")
#: The dtypes FlashAttention-2 computes in.
FLASH_DTYPES = ("bfloat16", "float16")


def oldest_gpu() -> tuple[str, tuple[int, int]] | None:
    """Return ``(product name, compute capability)`` of the GPU with the lowest capability here.

    None when NVML cannot answer or no GPU reports a capability. Raises
    :class:`~trinity_backend_cuda.nvml.NvmlUnavailable` when NVML fails.
    """
    report = nvml.read_nvml(capabilities=True)
    known = [
        (capability, report.names[i] if i < len(report.names) else "")
        for i, capability in enumerate(report.capabilities)
        if capability is not None
    ]
    if not known:
        return None
    capability, name = min(known)
    return name or "a GPU", capability


def supported_dtypes() -> DtypeSupport:
    """Return the dtypes the GPUs here compute in: bfloat16 first from compute capability 8.0 on."""
    try:
        oldest = oldest_gpu()
    except nvml.NvmlUnavailable as exc:
        return DtypeSupport(
            AMPERE_DTYPES,
            note=f"compute capability not read on this machine ({exc.reason}); each worker checks its own GPUs",
        )
    if oldest is None:
        return DtypeSupport(AMPERE_DTYPES, note="NVML reported no compute capability; assumed 8.0 or newer")
    name, capability = oldest
    if capability >= AMPERE:
        return DtypeSupport(AMPERE_DTYPES)
    major, minor = capability
    return DtypeSupport(
        PRE_AMPERE_DTYPES,
        unsupported={
            "bfloat16": f"{name} has compute capability {major}.{minor}, and bfloat16 needs 8.0 (Ampere) or newer",
        },
    )


def flash_attn_version() -> str | None:
    """Return the installed flash_attn's version (``""`` when unknown), or None when it is not importable."""
    try:
        if importlib.util.find_spec("flash_attn") is None:
            return None
    except (ImportError, ValueError):
        return None
    try:
        return version("flash_attn")
    except PackageNotFoundError:
        return ""


def attention_implementation(dtype: str) -> AttentionChoice:
    """Return ``flash_attention_2`` when flash_attn is installed, ``dtype`` is half precision and the GPUs can.

    Otherwise ``sdpa`` (torch's kernels, which pick a flash or memory-efficient
    kernel themselves), with the reason FlashAttention-2 was not chosen.
    """
    if dtype not in FLASH_DTYPES:
        return AttentionChoice("sdpa", f"FlashAttention-2 computes in bfloat16/float16 only, not {dtype}")
    found = flash_attn_version()
    if found is None:
        return AttentionChoice("sdpa", "flash_attn is not installed (pip install flash-attn for flash_attention_2)")
    try:
        oldest = oldest_gpu()
    except nvml.NvmlUnavailable:
        oldest = None
    if oldest is not None and oldest[1] < AMPERE:
        name, (major, minor) = oldest
        return AttentionChoice(
            "sdpa", f"{name} has compute capability {major}.{minor}; FlashAttention-2 needs 8.0 (Ampere) or newer"
        )
    return AttentionChoice("flash_attention_2", f"flash_attn {found} installed" if found else "flash_attn installed")
