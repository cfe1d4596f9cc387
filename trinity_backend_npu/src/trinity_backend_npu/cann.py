"""What a sourced CANN environment looks like, read from environment variables and files.

``source <CANN>/ascend-toolkit/set_env.sh`` exports ``ASCEND_TOOLKIT_HOME`` and
``ASCEND_HOME_PATH`` (the same directory), ``ASCEND_OPP_PATH``,
``ASCEND_AICPU_PATH`` and ``TOOLCHAIN_HOME``, and prepends the toolkit's
``lib64`` (where ``libhccl.so`` lives) to ``LD_LIBRARY_PATH``. NNAL's
``nnal/atb/set_env.sh`` exports ``ATB_HOME_PATH`` and puts ``libatb.so`` on
``LD_LIBRARY_PATH``. Everything here is plain file-system and environment
inspection: no torch, no torch_npu, no device access.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

#: Variables set_env.sh points at the CANN toolkit, in the order they are consulted.
TOOLKIT_HOME_VARS = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
#: Operator library root; torch_npu tells "compiler package" from "cann package" problems by it.
OPP_PATH_VAR = "ASCEND_OPP_PATH"
#: Set by NNAL's atb/set_env.sh: the ATB library vllm-ascend links against.
ATB_HOME_VAR = "ATB_HOME_PATH"
#: The dynamic loader's search path; set_env.sh prepends the toolkit's lib64 to it.
LIBRARY_PATH_VAR = "LD_LIBRARY_PATH"
#: torch's switch for importing torch.backends entry points (torch_npu) during ``import torch``.
AUTOLOAD_VAR = "TORCH_DEVICE_BACKEND_AUTOLOAD"
#: Masks the NPUs a process sees (logical ids, comma-separated).
VISIBLE_DEVICES_VAR = "ASCEND_RT_VISIBLE_DEVICES"

#: The collective library every torch_npu import needs.
HCCL_LIBRARY = "libhccl.so"
#: NNAL's Ascend Transformer Boost library, needed by vllm-ascend.
ATB_LIBRARY = "libatb.so"

#: Default location of the toolkit's environment script (root install).
TOOLKIT_SET_ENV = "/usr/local/Ascend/ascend-toolkit/set_env.sh"
#: Default location of NNAL's ATB environment script (root install).
ATB_SET_ENV = "/usr/local/Ascend/nnal/atb/set_env.sh"
#: The one-line fix for an unsourced toolkit.
SOURCE_TOOLKIT = f"source {TOOLKIT_SET_ENV}"
#: The one-line fix for a missing ATB library.
SOURCE_ATB = f"source {ATB_SET_ENV}"


def toolkit_home(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """Return ``(variable, path)`` of the first CANN toolkit variable set in ``environ``, or None."""
    for var in TOOLKIT_HOME_VARS:
        value = environ.get(var, "").strip()
        if value:
            return var, value
    return None


def library_dirs(environ: Mapping[str, str]) -> list[Path]:
    """Return the directories of ``LD_LIBRARY_PATH`` in ``environ``, in search order."""
    return [Path(entry) for entry in environ.get(LIBRARY_PATH_VAR, "").split(":") if entry.strip()]


def find_library(name: str, environ: Mapping[str, str]) -> Path | None:
    """Return where ``name`` (e.g. ``libhccl.so``) is found on ``LD_LIBRARY_PATH``, or None.

    This is the search the dynamic loader does first; libraries registered
    only in ``/etc/ld.so.cache`` are not seen, which matches how CANN is set
    up (set_env.sh, not ldconfig).
    """
    for directory in library_dirs(environ):
        candidate = directory / name
        if candidate.exists():
            return candidate
    return None


def parse_visible_devices(value: str) -> list[int]:
    """Return the device ids listed in an ``ASCEND_RT_VISIBLE_DEVICES`` value, in order, without repeats.

    An empty value lists no device. Raises ``ValueError`` when an entry is not
    a non-negative integer.
    """
    ids: list[int] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            continue
        if not entry.isdigit():
            raise ValueError(f"{entry!r} is not a device id")
        device_id = int(entry)
        if device_id not in ids:
            ids.append(device_id)
    return ids
