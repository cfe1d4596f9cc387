"""What the installed torch was built for, found without importing torch.

``import torch`` costs about a second and, on a machine with a GPU, must not
happen in the probe. torch writes its build facts into ``torch/version.py``
(``__version__``, ``cuda``, ``hip``); this module locates that file with
``importlib.util.find_spec`` and reads its text.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path

#: Fix shown when torch is missing or not a CUDA build.
INSTALL_CUDA_TORCH = (
    "install a CUDA build of torch: on Linux `pip install torch` from PyPI is one, or pick the wheel for "
    "your driver's CUDA version from https://download.pytorch.org/whl/ (e.g. --index-url "
    "https://download.pytorch.org/whl/cu128)"
)


@dataclass(frozen=True)
class TorchBuild:
    """The build facts of the installed torch."""

    #: ``torch.__version__``, e.g. ``"2.8.0+cu128"``; ``"unknown"`` when unreadable.
    version: str
    #: CUDA toolkit version torch was built with (``torch.version.cuda``), None for CPU/ROCm builds.
    cuda: str | None = None
    #: HIP version of a ROCm build (``torch.version.hip``), else None.
    hip: str | None = None
    #: Directory of the torch package (holds ``lib/``); None when unknown.
    path: Path | None = None
    #: Why the build facts could not be read; empty when they were.
    error: str = ""

    @property
    def cuda_major(self) -> int | None:
        """Major CUDA version torch was built with (12 for ``"12.8"``), None when not a CUDA build."""
        if not self.cuda:
            return None
        head = self.cuda.split(".", 1)[0]
        return int(head) if head.isdigit() else None

    def problem(self) -> str:
        """Return why this torch cannot drive CUDA GPUs, or ``""`` when it can."""
        if self.error:
            return f"{self.error}; reinstall torch ({INSTALL_CUDA_TORCH})"
        if self.cuda:
            return ""
        if self.hip:
            return f"torch {self.version} is a ROCm (HIP {self.hip}) build, not a CUDA build; {INSTALL_CUDA_TORCH}"
        return f"torch {self.version} is a CPU-only build; {INSTALL_CUDA_TORCH}"


def parse_version_file(text: str) -> dict[str, str | None]:
    """Return the constant string (or None) assignments of a ``torch/version.py`` text.

    Handles both ``cuda = '12.8'`` and ``cuda: Optional[str] = None``. Raises
    ``SyntaxError`` when the text is not Python.
    """
    found: dict[str, str | None] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            if value.value is None or isinstance(value.value, str):
                found[target.id] = value.value
    return found


def read_torch_build() -> TorchBuild | None:
    """Return the installed torch's build facts, or None when torch is not installed.

    Never imports torch. This function is the seam tests replace to pretend a
    CUDA build is installed.
    """
    spec = importlib.util.find_spec("torch")
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    if not locations and spec.origin:
        locations = [str(Path(spec.origin).parent)]
    if not locations:
        return TorchBuild(version="unknown", error="torch is importable but its package directory is unknown")
    package = Path(locations[0])
    version_file = package / "version.py"
    try:
        facts = parse_version_file(version_file.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError) as exc:
        return TorchBuild(version="unknown", path=package, error=f"cannot read {version_file}: {exc}")
    return TorchBuild(
        version=facts.get("__version__") or "unknown",
        cuda=facts.get("cuda") or None,
        hip=facts.get("hip") or None,
        path=package,
    )
