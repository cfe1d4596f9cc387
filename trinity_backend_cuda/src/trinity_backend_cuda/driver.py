"""Is an NVIDIA driver installed here? Answered from files alone, before NVML is loaded.

A machine with a driver has its device files (``/dev/nvidiactl``,
``/dev/nvidia<N>``) or, under WSL 2, the driver's libraries in
``/usr/lib/wsl/lib``; and the NVML library ``libnvidia-ml.so.1`` where the
dynamic loader finds it. When none of that exists, importing ``pynvml`` and
calling ``nvmlInit`` cannot succeed, and this check costs a few ``stat`` calls
and one read of the loader's cache instead.

``ctypes.util.find_library`` is not used: on Linux it starts ``ldconfig`` (and
sometimes a compiler) in a subprocess, which costs more than the whole probe.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: The library NVML is loaded from (``pynvml`` opens exactly this name).
NVML_LIBRARY = "libnvidia-ml.so.1"
#: Folder holding the device files.
DEVICE_DIR = Path("/dev")
#: The loader's cache of library paths (``ldconfig`` writes it).
LD_SO_CACHE = Path("/etc/ld.so.cache")
#: Folders the driver's libraries are commonly installed in, beyond the loader's cache.
LIBRARY_DIRS: tuple[Path, ...] = (
    Path("/usr/lib/wsl/lib"),  # WSL 2: the Windows driver's libraries
    Path("/usr/local/nvidia/lib64"),  # containers started with the NVIDIA runtime
    Path("/usr/local/nvidia/lib"),
    Path("/usr/lib/x86_64-linux-gnu"),
    Path("/usr/lib/aarch64-linux-gnu"),
    Path("/usr/lib64"),
    Path("/usr/lib"),
)


@dataclass(frozen=True)
class DriverTraces:
    """What was found of an NVIDIA driver on this machine."""

    #: Device files found (``/dev/nvidiactl``, ``/dev/nvidia0``, ...).
    device_files: tuple[str, ...]
    #: Where ``libnvidia-ml.so.1`` was found (a path, or the loader cache's name); empty when nowhere.
    library: str

    @property
    def found(self) -> bool:
        """True when anything of a driver is here, so NVML is worth asking."""
        return bool(self.device_files or self.library)


def device_files(folder: Path | None = None) -> tuple[str, ...]:
    """Return the NVIDIA device files in ``folder`` (default :data:`DEVICE_DIR`), sorted."""
    folder = DEVICE_DIR if folder is None else folder
    try:
        names = os.listdir(folder)
    except OSError:
        return ()
    return tuple(sorted(str(folder / name) for name in names if name.startswith("nvidia")))


def find_nvml_library(environ: dict[str, str] | None = None) -> str:
    """Return where ``libnvidia-ml.so.1`` is, or ``""``: ``LD_LIBRARY_PATH``, the loader's cache, common folders."""
    env = os.environ if environ is None else environ
    folders = [Path(part) for part in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if part]
    for folder in folders:
        if (folder / NVML_LIBRARY).exists():
            return str(folder / NVML_LIBRARY)
    try:
        if NVML_LIBRARY.encode() in LD_SO_CACHE.read_bytes():
            return f"{LD_SO_CACHE} ({NVML_LIBRARY})"
    except OSError:
        pass
    for folder in LIBRARY_DIRS:
        if (folder / NVML_LIBRARY).exists():
            return str(folder / NVML_LIBRARY)
    return ""


def look_for_driver() -> DriverTraces:
    """Return the device files and NVML library found here; reads files only, loads nothing."""
    return DriverTraces(device_files=device_files(), library=find_nvml_library())


#: The probe's reason when :func:`look_for_driver` finds nothing.
NO_DRIVER_REASON = (
    f"no NVIDIA driver found: no /dev/nvidia* device files and no {NVML_LIBRARY} "
    "(searched LD_LIBRARY_PATH, the loader cache and the usual library folders)"
)
