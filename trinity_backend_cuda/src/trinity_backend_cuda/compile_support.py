"""Whether ``torch.compile`` can generate code for CUDA GPUs here.

Inductor compiles CUDA kernels with triton; without triton ``torch.compile``
fails at the first compiled call. triton is looked up with
``importlib.util.find_spec``, never imported (importing it is slow and
initialises its driver layer).
"""

from __future__ import annotations

import importlib.util
from importlib.metadata import PackageNotFoundError, version

from trinity.device.types import CompileSupport

#: How to get triton.
INSTALL_TRITON = (
    "pip install triton (CUDA builds of torch on Linux depend on the matching triton; reinstalling torch "
    "brings it back), or set trainer.use_torch_compile: false"
)


def triton_version() -> str | None:
    """Return the installed triton's version (``""`` when unknown), or None when triton is not importable."""
    if importlib.util.find_spec("triton") is None:
        return None
    try:
        return version("triton")
    except PackageNotFoundError:
        return ""


def compile_support() -> CompileSupport:
    """Return whether ``torch.compile`` is supported: yes when triton is importable, else why not and the fix."""
    try:
        found = triton_version()
    except (ImportError, ValueError) as exc:  # a broken triton install
        return CompileSupport(False, f"triton cannot be located ({type(exc).__name__}: {exc}); {INSTALL_TRITON}")
    if found is None:
        return CompileSupport(
            supported=False,
            reason=f"triton is not installed, and torch.compile needs it for CUDA kernels; {INSTALL_TRITON}",
        )
    return CompileSupport(supported=True, reason=f"triton {found} found" if found else "triton found")
