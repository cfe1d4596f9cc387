"""The lazy door to torch_npu: the only module that imports it.

torch_npu is imported on the first call that needs the device
(:func:`device_module`), never when the plugin is loaded or probed. Importing
it creates no device context yet, but it loads CANN's libraries, which fails
without a sourced CANN environment.
"""

from __future__ import annotations

import importlib
import os
import threading
from types import ModuleType

from trinity.device.errors import BackendUnavailableError
from trinity_backend_npu import cann

_lock = threading.Lock()
_device_module: ModuleType | None = None


def import_torch_npu() -> ModuleType:
    """Import and return ``torch_npu``, keeping ``TORCH_DEVICE_BACKEND_AUTOLOAD`` as it was.

    torch_npu sets ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` while it imports torch
    and restores it only when torch itself autoloads it; an explicit import
    leaves ``0`` behind, which child processes and Ray workers would inherit.
    The variable is restored here in every case. Raises
    :class:`~trinity.device.errors.BackendUnavailableError` with the fix when
    the import fails (CANN not sourced, torch/torch_npu mismatch, another
    accelerator already registered).
    """
    before = os.environ.get(cann.AUTOLOAD_VAR)
    try:
        return importlib.import_module("torch_npu")
    except (ImportError, OSError, RuntimeError, SystemExit) as exc:
        # Older torch_npu releases print the error and call sys.exit() when libhccl.so is missing.
        raise BackendUnavailableError(
            f"torch_npu could not be imported ({type(exc).__name__}: {exc}); "
            f"{cann.SOURCE_TOOLKIT} before starting Python and Ray, and check that torch-npu "
            f"matches the installed torch (`trinity backends check npu`)"
        ) from exc
    finally:
        if before is None:
            os.environ.pop(cann.AUTOLOAD_VAR, None)
        else:
            os.environ[cann.AUTOLOAD_VAR] = before


def device_module() -> ModuleType:
    """Return ``torch.npu`` (torch_npu's device module), importing torch_npu on first use.

    The module is cached: later calls cost a global lookup. Raises
    :class:`~trinity.device.errors.BackendUnavailableError` when torch_npu
    cannot be imported.
    """
    module = _device_module
    if module is not None:
        return module
    return _load_device_module()


def _load_device_module() -> ModuleType:
    global _device_module
    with _lock:
        if _device_module is None:
            torch_npu = import_torch_npu()
            import torch

            module = getattr(torch, "npu", None)
            if not isinstance(module, ModuleType):
                module = getattr(torch_npu, "npu", None)
            if not isinstance(module, ModuleType):
                raise BackendUnavailableError(
                    "torch_npu was imported but registered no torch.npu module; "
                    "reinstall a torch-npu release that matches the installed torch"
                )
            _device_module = module
        return _device_module


def forget() -> None:
    """Drop the cached device module, so the next call imports torch_npu again (tests)."""
    global _device_module
    with _lock:
        _device_module = None
