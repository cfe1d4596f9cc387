"""Diagnostics for ``trinity backends check npu``: driver, devices, CANN, NNAL/ATB, versions.

Each check reads files, environment variables and package metadata only; none
imports torch or torch_npu, so the doctor also works where importing them
would fail (which is one of the things it diagnoses). A check never raises: an
unexpected error becomes a ``fail`` that says so.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from pathlib import Path

from trinity.device.types import DoctorCheck
from trinity_backend_npu import cann, probe

#: The Ascend driver's version file. A seam: tests point it at a fake file.
DRIVER_VERSION_FILE = Path("/usr/local/Ascend/driver/version.info")

#: Distribution names on PyPI.
TORCH_DIST = "torch"
TORCH_NPU_DIST = "torch-npu"
VLLM_ASCEND_DIST = "vllm-ascend"

_RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def installed_version(distribution: str) -> str | None:
    """Return the installed version of ``distribution`` from its metadata (no import), or None."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def module_findable(name: str) -> bool:
    """Return whether the top-level module ``name`` can be imported, without importing it."""
    try:
        return find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def release(text: str) -> tuple[int, int, int] | None:
    """Return the ``(major, minor, micro)`` a version string starts with (``"2.13.0+cpu"`` → (2, 13, 0))."""
    match = _RELEASE.match(text.strip())
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def check_devices(environ: Mapping[str, str]) -> DoctorCheck:
    """Report the ``/dev/davinci<N>`` device files and how many NPUs the visible-devices mask leaves."""
    where = probe.device_dir()
    indices = probe.device_indices(where)
    if not indices:
        return DoctorCheck(
            "NPU devices",
            "fail",
            f"no {where}/davinci<N> device files",
            fix=(
                "install the Ascend NPU driver and check `npu-smi info`; in a container pass "
                f"--device {where}/davinci<N> for each NPU plus --device {where}/davinci_manager "
                f"--device {where}/devmm_svm --device {where}/hisi_hdc"
            ),
        )
    names = ", ".join(f"davinci{i}" for i in indices)
    facts = {"device_files": str(len(indices)), "device_dir": str(where)}
    raw = environ.get(cann.VISIBLE_DEVICES_VAR)
    try:
        visible = probe.visible_device_count(len(indices), environ)
    except ValueError as exc:
        return DoctorCheck(
            "NPU devices",
            "fail",
            f"{len(indices)} device file(s) ({names}) but {cann.VISIBLE_DEVICES_VAR}={raw!r} is malformed ({exc})",
            fix=f"unset {cann.VISIBLE_DEVICES_VAR} or set it to ascending ids, e.g. 0,1,2,3",
            facts=facts,
        )
    facts["visible"] = str(visible)
    if visible == 0:
        return DoctorCheck(
            "NPU devices",
            "warn",
            f"{len(indices)} device file(s) ({names}) but {cann.VISIBLE_DEVICES_VAR}={raw!r} hides all of them",
            fix=f"unset {cann.VISIBLE_DEVICES_VAR} or list ids below {len(indices)}",
            facts=facts,
        )
    masked = f"; {visible} visible through {cann.VISIBLE_DEVICES_VAR}={raw}" if raw is not None else ""
    return DoctorCheck("NPU devices", "ok", f"{len(indices)} device file(s): {names}{masked}", facts=facts)


def parse_version_info(text: str) -> dict[str, str]:
    """Return the ``key=value`` pairs of an Ascend ``version.info`` file."""
    pairs: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            pairs[key.strip()] = value.strip()
    return pairs


def check_driver() -> DoctorCheck:
    """Report the Ascend driver version from :data:`DRIVER_VERSION_FILE`."""
    path = DRIVER_VERSION_FILE
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return DoctorCheck(
            "Ascend driver",
            "fail",
            f"no driver version file at {path}",
            fix="install the Ascend NPU driver and firmware (Ascend-hdk-<chip>-npu-driver) and check `npu-smi info`",
        )
    except OSError as exc:
        return DoctorCheck(
            "Ascend driver",
            "warn",
            f"cannot read {path}: {exc}",
            fix=f"make {path} readable for this user (the driver install sets its permissions)",
        )
    pairs = parse_version_info(text)
    driver_version = pairs.get("Version") or pairs.get("package_version")
    if not driver_version:
        return DoctorCheck(
            "Ascend driver",
            "warn",
            f"{path} has no Version= line",
            fix="reinstall the Ascend NPU driver; `npu-smi info` shows the version it runs",
        )
    return DoctorCheck(
        "Ascend driver", "ok", f"driver {driver_version} ({path})", facts={"driver": driver_version, "path": str(path)}
    )


def check_cann(environ: Mapping[str, str]) -> DoctorCheck:
    """Report whether the CANN toolkit's set_env.sh was sourced: home variable, directory, libhccl.so."""
    home = cann.toolkit_home(environ)
    fix = f"{cann.SOURCE_TOOLKIT} (adjust to your CANN install) in the shell that starts trinity and Ray"
    if home is None:
        return DoctorCheck(
            "CANN toolkit",
            "fail",
            f"CANN environment not set: none of {', '.join(cann.TOOLKIT_HOME_VARS)} is set",
            fix=fix,
        )
    var, path = home
    if not Path(path).is_dir():
        return DoctorCheck("CANN toolkit", "fail", f"{var}={path} does not exist", fix=fix)
    facts = {"toolkit": path}
    library = cann.find_library(cann.HCCL_LIBRARY, environ)
    if library is None:
        bundled = Path(path) / "lib64" / cann.HCCL_LIBRARY
        where = f"; it is in {bundled.parent}" if bundled.exists() else ""
        return DoctorCheck(
            "CANN toolkit",
            "fail",
            f"{var}={path} but {cann.HCCL_LIBRARY} is not on {cann.LIBRARY_PATH_VAR}{where}",
            fix=fix,
            facts=facts,
        )
    facts[cann.HCCL_LIBRARY] = str(library)
    if not environ.get(cann.OPP_PATH_VAR):
        return DoctorCheck(
            "CANN toolkit",
            "fail",
            f"{var}={path} but {cann.OPP_PATH_VAR} is not set (operators cannot be found)",
            fix=fix,
            facts=facts,
        )
    return DoctorCheck("CANN toolkit", "ok", f"CANN at {path}; {cann.HCCL_LIBRARY} at {library}", facts=facts)


def check_atb(environ: Mapping[str, str]) -> DoctorCheck:
    """Report NNAL's ATB library (``libatb.so``), which vllm-ascend needs; a ``fail`` only when it is installed."""
    library = cann.find_library(cann.ATB_LIBRARY, environ)
    atb_home = environ.get(cann.ATB_HOME_VAR, "")
    if library is not None:
        return DoctorCheck(
            "NNAL ATB", "ok", f"{cann.ATB_LIBRARY} at {library}", facts={"atb_home": atb_home, "libatb": str(library)}
        )
    needed = module_findable("vllm_ascend")
    need = "vllm-ascend is installed and needs it" if needed else "only the vllm engine (vllm-ascend) needs it"
    found = f"{cann.ATB_HOME_VAR}={atb_home}" if atb_home else f"{cann.ATB_HOME_VAR} not set"
    return DoctorCheck(
        "NNAL ATB",
        "fail" if needed else "warn",
        f"{cann.ATB_LIBRARY} not on {cann.LIBRARY_PATH_VAR} ({found}); {need}",
        fix=f"install CANN's NNAL package and {cann.SOURCE_ATB}",
    )


def check_torch_npu_version() -> DoctorCheck:
    """Report whether torch_npu is installed and built for the installed torch (same major.minor.micro)."""
    npu_version = installed_version(TORCH_NPU_DIST)
    torch_version = installed_version(TORCH_DIST)
    if npu_version is None:
        return DoctorCheck(
            "torch_npu",
            "fail",
            "torch_npu is not installed",
            fix=f"{probe.INSTALL_TORCH_NPU} (with CANN installed and sourced)",
        )
    facts = {"torch_npu": npu_version, "torch": torch_version or ""}
    if torch_version is None:
        return DoctorCheck(
            "torch_npu",
            "fail",
            f"torch-npu {npu_version} is installed but torch is not",
            fix=f"pip install torch=={_release_text(npu_version)}",
            facts=facts,
        )
    if release(npu_version) is None or release(npu_version) != release(torch_version):
        return DoctorCheck(
            "torch_npu",
            "fail",
            f"torch-npu {npu_version} does not match torch {torch_version}: each torch-npu release is built "
            f"for one torch release",
            fix=f"pip install torch=={_release_text(npu_version)} (or the torch-npu release built for torch "
            f"{_release_text(torch_version)})",
            facts=facts,
        )
    return DoctorCheck("torch_npu", "ok", f"torch-npu {npu_version} matches torch {torch_version}", facts=facts)


def _release_text(text: str) -> str:
    parts = release(text)
    return ".".join(str(p) for p in parts) if parts else text


def check_vllm_ascend() -> DoctorCheck:
    """Report whether vllm-ascend (the vLLM engine on NPU) is installed; its absence is a ``warn``."""
    if not module_findable("vllm_ascend"):
        return DoctorCheck(
            "vllm-ascend",
            "warn",
            "vllm-ascend is not installed: the vllm rollout engine cannot run on NPU (the hf engine can)",
            fix=(
                "pip install 'trinity-rft[npu]', or install vllm-ascend from source "
                "(github.com/vllm-project/vllm-ascend)"
            ),
        )
    found = installed_version(VLLM_ASCEND_DIST) or "unknown version"
    return DoctorCheck("vllm-ascend", "ok", f"vllm-ascend {found} installed", facts={"vllm_ascend": found})


def check_autoload(environ: Mapping[str, str]) -> DoctorCheck:
    """Report the trap where an installed torch_npu without sourced CANN breaks a plain ``import torch``.

    torch_npu registers a ``torch.backends`` entry point, so ``import torch``
    imports it unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``; without CANN that
    import fails on ``libhccl.so`` and takes torch down with it.
    """
    name = "import torch (torch_npu autoload)"
    if installed_version(TORCH_NPU_DIST) is None:
        return DoctorCheck(name, "ok", "torch_npu is not installed, so `import torch` does not load it")
    if cann.find_library(cann.HCCL_LIBRARY, environ) is not None:
        return DoctorCheck(name, "ok", "torch_npu is installed and CANN is sourced: `import torch` can load it")
    autoload = environ.get(cann.AUTOLOAD_VAR, "1")
    if autoload != "1":
        return DoctorCheck(
            name,
            "warn",
            f"CANN is not sourced; {cann.AUTOLOAD_VAR}={autoload} keeps `import torch` working, "
            f"but the NPU cannot be used",
            fix=cann.SOURCE_TOOLKIT,
        )
    return DoctorCheck(
        name,
        "fail",
        "torch_npu is installed but CANN is not sourced: a plain `import torch` fails "
        f"({cann.HCCL_LIBRARY}: cannot open shared object file) because torch autoloads torch_npu",
        fix=(
            f"{cann.SOURCE_TOOLKIT}; or, where no NPU is used, export {cann.AUTOLOAD_VAR}=0 "
            "(or pip uninstall torch-npu)"
        ),
    )


def run_checks(environ: Mapping[str, str] | None = None) -> list[DoctorCheck]:
    """Run every NPU check and return the findings; a check that raises becomes a ``fail``."""
    env = os.environ if environ is None else environ
    checks: list[tuple[str, Callable[[], DoctorCheck]]] = [
        ("NPU devices", lambda: check_devices(env)),
        ("Ascend driver", check_driver),
        ("CANN toolkit", lambda: check_cann(env)),
        ("NNAL ATB", lambda: check_atb(env)),
        ("torch_npu", check_torch_npu_version),
        ("vllm-ascend", check_vllm_ascend),
        ("import torch (torch_npu autoload)", lambda: check_autoload(env)),
    ]
    results: list[DoctorCheck] = []
    for name, check in checks:
        try:
            results.append(check())
        except Exception as exc:  # noqa: BLE001 - a diagnostic must report, never crash
            results.append(
                DoctorCheck(
                    name,
                    "fail",
                    f"check raised {type(exc).__name__}: {exc}",
                    fix="report this to the maintainers of trinity-backend-npu",
                )
            )
    return results
