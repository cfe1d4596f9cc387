"""Is an Ascend NPU usable by this process? Answered without importing torch or torch_npu.

The probe looks at device files (``/dev/davinci<N>``), whether ``torch_npu``
can be found (``importlib.util.find_spec``, which does not import it), the
CANN environment set by ``set_env.sh`` and the ``ASCEND_RT_VISIBLE_DEVICES``
mask. Creating an ACL context here would break every worker forked from this
process, so nothing here touches the runtime.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from importlib.util import find_spec
from pathlib import Path

from trinity.device.types import ProbeResult
from trinity_backend_npu import cann

#: Directory holding the NPU device files. A seam: tests point it at a fake /dev.
DEVICE_DIR = Path("/dev")

#: One NPU per ``davinci<N>`` file; davinci_manager, devmm_svm and hisi_hdc are control devices.
_DEVICE_FILE = re.compile(r"davinci(\d+)")

#: What to install when torch_npu is missing.
INSTALL_TORCH_NPU = "pip install 'trinity-backend-npu[ascend]'"


def device_dir() -> Path:
    """Return the directory searched for device files (the current value of :data:`DEVICE_DIR`)."""
    return DEVICE_DIR


def device_indices(directory: Path | None = None) -> list[int]:
    """Return the sorted N of every ``davinci<N>`` file in ``directory`` (default :data:`DEVICE_DIR`).

    An unreadable or missing directory yields an empty list.
    """
    where = device_dir() if directory is None else directory
    try:
        names = os.listdir(where)
    except OSError:
        return []
    return sorted(int(match.group(1)) for name in names if (match := _DEVICE_FILE.fullmatch(name)))


def visible_device_count(physical: int, environ: Mapping[str, str]) -> int:
    """Return how many of ``physical`` NPUs ``ASCEND_RT_VISIBLE_DEVICES`` leaves visible.

    Unset means all. Ids are logical indices ``0..physical-1``; ids out of that
    range are ignored, repeats count once. Raises ``ValueError`` when the
    value is not a comma-separated list of ids.
    """
    raw = environ.get(cann.VISIBLE_DEVICES_VAR)
    if raw is None:
        return physical
    return sum(1 for device_id in cann.parse_visible_devices(raw) if device_id < physical)


def torch_npu_findable() -> bool:
    """Return whether ``torch_npu`` can be imported, without importing it."""
    try:
        return find_spec("torch_npu") is not None
    except (ImportError, ValueError):
        return False


def cann_problem(environ: Mapping[str, str]) -> str | None:
    """Return why the CANN environment is not usable, or None when set_env.sh was sourced."""
    home = cann.toolkit_home(environ)
    if home is None:
        return f"CANN environment not set: {cann.SOURCE_TOOLKIT}"
    var, path = home
    if not Path(path).is_dir():
        return (
            f"CANN environment points to a missing directory ({var}={path}): "
            f"source the set_env.sh of an installed CANN toolkit (e.g. {cann.TOOLKIT_SET_ENV})"
        )
    return None


def probe(environ: Mapping[str, str] | None = None, directory: Path | None = None) -> ProbeResult:
    """Return whether NPUs are usable here, how many are visible, and what to fix when not.

    Every missing piece is named in ``reason`` (device files, torch_npu, CANN),
    so one run tells the user everything to install or source.
    """
    env = os.environ if environ is None else environ
    where = device_dir() if directory is None else directory
    physical = len(device_indices(where))
    problems: list[str] = []
    if physical == 0:
        problems.append(
            f"no Ascend NPU found: no {where}/davinci<N> device files (install the Ascend driver and check "
            f"`npu-smi info`; in a container, pass the davinci<N>, davinci_manager, devmm_svm and hisi_hdc devices)"
        )
    if not torch_npu_findable():
        problems.append(f"torch_npu not installed: {INSTALL_TORCH_NPU}")
    cann_issue = cann_problem(env)
    if cann_issue:
        problems.append(cann_issue)
    if problems:
        return ProbeResult.unavailable("; ".join(problems))

    try:
        visible = visible_device_count(physical, env)
    except ValueError as exc:
        raw = env.get(cann.VISIBLE_DEVICES_VAR, "")
        return ProbeResult.unavailable(
            f"{cann.VISIBLE_DEVICES_VAR}={raw!r} is not a comma-separated list of NPU ids ({exc}); "
            f"unset it or set e.g. 0,1,2,3"
        )
    if visible == 0:
        raw = env.get(cann.VISIBLE_DEVICES_VAR, "")
        return ProbeResult.unavailable(
            f"{cann.VISIBLE_DEVICES_VAR}={raw!r} hides every NPU ({physical} found, ids 0..{physical - 1}); "
            f"unset it or list ids below {physical}"
        )
    return ProbeResult(available=True, device_count=visible)
