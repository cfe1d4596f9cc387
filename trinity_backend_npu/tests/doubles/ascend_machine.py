"""Test double of an Ascend NPU machine, for tests on machines without one.

:func:`build_machine` lays out, under a temporary directory, what an Ascend
host has: a ``/dev`` with ``davinci0..davinci<N-1>`` plus the control devices
(``davinci_manager``, ``devmm_svm``, ``hisi_hdc``), a CANN toolkit with
``lib64/libhccl.so`` and ``opp/``, NNAL's ATB with ``lib/libatb.so`` and the
driver's ``version.info``; it then sets the variables CANN's ``set_env.sh``
and NNAL's ``atb/set_env.sh`` export and points the backend's seams
(``probe.DEVICE_DIR``, ``doctor.DRIVER_VERSION_FILE``) at the fake files.

:func:`fake_torch_npu_installed` puts the ``torch_npu`` double
(``fake_site/``) on ``sys.path`` and, on exit, undoes what importing it did to
torch and the process, so later tests in the same pytest process (the CPU and
CUDA backends') see a plain CPU torch. torch's privateuse1 rename cannot be
undone, and in torch 2.13 the rename alone makes ``torch.accelerator`` report
``npu`` (and ``torch.accelerator.is_available()`` raise once ``torch.npu`` is
gone). So in a shared process the double registers ``torch.npu`` without the
rename (``FAKE_TORCH_NPU_RENAME=0``); ``faithful=True`` (or
``TRINITY_NPU_FAITHFUL_DOUBLE=1``, set for child processes) keeps the real
registration.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

#: Directory to put on sys.path / PYTHONPATH for the torch_npu double (with its dist-info).
FAKE_SITE = Path(__file__).resolve().parent / "fake_site"
#: The double's own knob: how many NPUs its runtime reports before masking.
DEVICE_COUNT_VAR = "FAKE_TORCH_NPU_DEVICES"
#: Variables set_env.sh (toolkit and ATB) exports that the backend looks at.
CANN_VARS = (
    "ASCEND_HOME_PATH",
    "ASCEND_TOOLKIT_HOME",
    "ASCEND_OPP_PATH",
    "ASCEND_AICPU_PATH",
    "TOOLCHAIN_HOME",
    "ATB_HOME_PATH",
)
AUTOLOAD_VAR = "TORCH_DEVICE_BACKEND_AUTOLOAD"
#: The double's switch: "0" registers torch.npu without the irreversible privateuse1 rename.
RENAME_VAR = "FAKE_TORCH_NPU_RENAME"
#: Set to "1" in a child process that may rename privateuse1 (nothing else runs in it).
FAITHFUL_VAR = "TRINITY_NPU_FAITHFUL_DOUBLE"
CONTROL_DEVICES = ("davinci_manager", "devmm_svm", "hisi_hdc")


@dataclass
class FakeAscendMachine:
    """Paths of one fake Ascend host and the monkeypatch that installed its environment."""

    dev: Path
    toolkit: Path
    atb_home: Path
    driver_version_file: Path
    monkeypatch: pytest.MonkeyPatch

    def unsource_cann(self) -> None:
        """Undo the toolkit's and ATB's set_env.sh: no CANN variables, libraries off LD_LIBRARY_PATH."""
        for var in CANN_VARS:
            self.monkeypatch.delenv(var, raising=False)
        self.monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)

    def unsource_atb(self) -> None:
        """Undo only NNAL's atb/set_env.sh."""
        self.monkeypatch.delenv("ATB_HOME_PATH", raising=False)
        self.monkeypatch.setenv("LD_LIBRARY_PATH", str(self.toolkit / "lib64"))

    def set_device_files(self, count: int) -> None:
        """Replace the davinci<N> files by ``count`` of them; the runtime double reports the same count."""
        for path in self.dev.glob("davinci[0-9]*"):
            path.unlink()
        for index in range(count):
            (self.dev / f"davinci{index}").touch()
        self.monkeypatch.setenv(DEVICE_COUNT_VAR, str(count))


def build_machine(
    root: Path, monkeypatch: pytest.MonkeyPatch, devices: int = 16, driver_version: str = "24.1.rc3"
) -> FakeAscendMachine:
    """Create a fake Ascend host under ``root`` and make the current process see it (CANN sourced)."""
    from trinity_backend_npu import doctor, probe

    dev = root / "dev"
    dev.mkdir()
    for name in CONTROL_DEVICES:
        (dev / name).touch()
    toolkit = root / "Ascend" / "ascend-toolkit" / "latest"
    (toolkit / "lib64").mkdir(parents=True)
    (toolkit / "lib64" / "libhccl.so").touch()
    (toolkit / "opp").mkdir()
    atb_home = root / "Ascend" / "nnal" / "atb" / "latest" / "atb" / "cxx_abi_1"
    (atb_home / "lib").mkdir(parents=True)
    (atb_home / "lib" / "libatb.so").touch()
    driver = root / "Ascend" / "driver"
    driver.mkdir(parents=True)
    version_file = driver / "version.info"
    version_file.write_text(
        f"Version={driver_version}\nascendhal_version=7.35.23\npackage_version={driver_version}\n", encoding="utf-8"
    )

    monkeypatch.setattr(probe, "DEVICE_DIR", dev)
    monkeypatch.setattr(doctor, "DRIVER_VERSION_FILE", version_file)
    for var in ("ASCEND_RT_VISIBLE_DEVICES", AUTOLOAD_VAR, "TRINITY_DEVICE", "TRINITY_DEVICE_RESOLVED"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(toolkit))
    monkeypatch.setenv("ASCEND_HOME_PATH", str(toolkit))
    monkeypatch.setenv("ASCEND_OPP_PATH", str(toolkit / "opp"))
    monkeypatch.setenv("ASCEND_AICPU_PATH", str(toolkit))
    monkeypatch.setenv("TOOLCHAIN_HOME", str(toolkit / "toolkit"))
    monkeypatch.setenv("ATB_HOME_PATH", str(atb_home))
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{toolkit / 'lib64'}:{atb_home / 'lib'}")
    machine = FakeAscendMachine(dev, toolkit, atb_home, version_file, monkeypatch)
    machine.set_device_files(devices)
    return machine


def _drop_double_modules() -> None:
    for name in [n for n in sys.modules if n == "torch_npu" or n.startswith("torch_npu.")]:
        del sys.modules[name]


@contextmanager
def fake_torch_npu_installed(
    monkeypatch: pytest.MonkeyPatch | None = None, faithful: bool | None = None
) -> Iterator[None]:
    """Make the torch_npu double importable for the duration, then undo its effects on the process.

    Give the test's ``monkeypatch`` when the test may also change ``sys.path``
    through it: the path is then restored by monkeypatch itself, whose
    snapshot would otherwise bring the double back after this context ended.
    ``faithful`` (default: ``TRINITY_NPU_FAITHFUL_DOUBLE=1``) lets the double
    rename privateuse1 to ``"npu"`` like torch_npu; only do that in a process
    of its own. torch is imported first, so torch's own autoload can never pick
    the double up halfway through a test. On exit: the double's modules leave
    ``sys.modules``, ``torch.npu`` is unregistered, ``sys.path``,
    ``TORCH_DEVICE_BACKEND_AUTOLOAD`` and the double's switch are restored and
    the backend forgets its cached device module.
    """
    import torch

    from trinity_backend_npu import runtime

    if faithful is None:
        faithful = os.environ.get(FAITHFUL_VAR) == "1"
    autoload_before = os.environ.get(AUTOLOAD_VAR)
    rename_before = os.environ.get(RENAME_VAR)
    os.environ[RENAME_VAR] = "1" if faithful else "0"
    if monkeypatch is not None:
        monkeypatch.syspath_prepend(str(FAKE_SITE))
    else:
        sys.path.insert(0, str(FAKE_SITE))
    importlib.invalidate_caches()
    runtime.forget()
    try:
        yield
    finally:
        registered = getattr(torch, "npu", None)
        if registered is not None and getattr(registered, "IS_TORCH_NPU_DOUBLE", False):
            delattr(torch, "npu")
            sys.modules.pop("torch.npu", None)
        _drop_double_modules()
        if monkeypatch is None:
            sys.path[:] = [entry for entry in sys.path if entry != str(FAKE_SITE)]
        importlib.invalidate_caches()
        for var, before in ((AUTOLOAD_VAR, autoload_before), (RENAME_VAR, rename_before)):
            if before is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = before
        runtime.forget()


def subprocess_env(**overrides: str) -> dict[str, str]:
    """Return this process's environment without CANN or the autoload switch, the double on PYTHONPATH."""
    dropped = {AUTOLOAD_VAR, RENAME_VAR, "LD_LIBRARY_PATH", "ASCEND_RT_VISIBLE_DEVICES", *CANN_VARS}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(FAKE_SITE), os.environ.get("PYTHONPATH", "")) if p)
    env.update(overrides)
    return env
