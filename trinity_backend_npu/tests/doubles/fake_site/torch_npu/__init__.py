"""Test double of ``torch_npu`` (Huawei's PyTorch extension for Ascend NPUs), not the real package.

Put ``tests/doubles/fake_site`` on ``sys.path``/``PYTHONPATH`` to use it. It
models what trinity-backend-npu relies on:

* Like the real extension, whose C library links against CANN's
  ``libhccl.so``, the import fails with
  ``ImportError("libhccl.so: cannot open shared object file: No such file or directory")``
  unless a ``libhccl.so`` is found on ``LD_LIBRARY_PATH`` (what sourcing CANN's
  ``set_env.sh`` provides).
* Like the real one, it sets ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` before
  importing torch and restores the original value only in :func:`_autoload`,
  the ``torch.backends`` entry point torch calls (declared by the
  ``torch_npu-2.13.0.dist-info`` next to this package, so a plain
  ``import torch`` autoloads this double and fails without CANN, exactly the
  trap the real package sets).
* It registers the device the way torch_npu does:
  ``torch.utils.rename_privateuse1_backend("npu")`` and
  ``torch._register_device_module("npu", torch_npu.npu)``. Because tests
  import it repeatedly in one process, a rename to the same name is skipped
  and an earlier registration by this double is replaced.
  ``generate_methods_for_privateuse1_backend`` (``Tensor.npu()`` ...) is not
  modelled: it would patch torch classes for the rest of the process.
* ``FAKE_TORCH_NPU_RENAME=0`` (double-only) skips the rename and sets
  ``torch.npu`` as a plain attribute. The rename is process-global and
  irreversible, and in torch 2.13 it alone makes ``torch.accelerator`` report
  ``npu``; a test process shared with other backends' tests uses this mode,
  while child processes run the faithful registration.

``torch_npu._C._distributed_c10d.ProcessGroupHCCL`` is modelled too (see that
module): the c10d backend class a stateless HCCL group is built from.

The number of NPUs comes from ``FAKE_TORCH_NPU_DEVICES`` (default 8), masked by
``ASCEND_RT_VISIBLE_DEVICES`` like the real runtime.
"""

import os
import sys
from pathlib import Path

# As the real package: torch must not autoload us while we import torch.
_ORIGINAL_AUTOLOAD = os.getenv("TORCH_DEVICE_BACKEND_AUTOLOAD", "1")
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"


def _libhccl_on_library_path() -> bool:
    for entry in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        if entry and (Path(entry) / "libhccl.so").exists():
            return True
    return False


if not _libhccl_on_library_path():
    raise ImportError("libhccl.so: cannot open shared object file: No such file or directory")

import torch  # noqa: E402

from torch_npu import _C as _C  # noqa: E402 - like the real package, which loads its extension
from torch_npu import npu  # noqa: E402

__version__ = "2.13.0"


def _register_device() -> None:
    registered = getattr(torch, "npu", None)
    if registered is not None and getattr(registered, "IS_TORCH_NPU_DOUBLE", False):
        delattr(torch, "npu")
    if os.environ.get("FAKE_TORCH_NPU_RENAME", "1") == "0":
        torch.npu = npu
        sys.modules["torch.npu"] = npu
        return
    if torch._C._get_privateuse1_backend_name() != "npu":
        torch.utils.rename_privateuse1_backend("npu")
    torch._register_device_module("npu", npu)


_register_device()


def _autoload() -> None:
    """Entry point torch calls on ``import torch``; like the real one, it only restores the switch."""
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = _ORIGINAL_AUTOLOAD
