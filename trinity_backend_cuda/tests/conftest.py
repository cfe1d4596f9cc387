"""Fixtures of the CUDA backend's tests.

``doubles.py`` is loaded under a name of its own (``trinity_backend_cuda_test_doubles``)
rather than imported as ``doubles``: pytest's default ``prepend`` import mode
puts each test directory on ``sys.path``, and another backend's ``doubles``
module collected in the same session would otherwise be returned in its place.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from trinity.device import facade
from trinity.device.selection import DEVICE_ENV, RESOLVED_ENV

_DOUBLES_NAME = "trinity_backend_cuda_test_doubles"


def _load_doubles() -> ModuleType:
    loaded = sys.modules.get(_DOUBLES_NAME)
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(_DOUBLES_NAME, Path(__file__).with_name("doubles.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_DOUBLES_NAME] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def doubles() -> ModuleType:
    """The test-doubles module (``doubles.py``)."""
    return _load_doubles()


@pytest.fixture
def cuda_doubles(monkeypatch: pytest.MonkeyPatch, doubles: ModuleType, tmp_path: Path) -> Callable[..., Any]:
    """Return ``install(gpus=2, **options)``, which puts the NVML/torch.cuda doubles in place for this test.

    The driver's device files are faked too (in ``tmp_path/dev``) unless the
    test passes ``device_dir=None``.
    """

    def install(gpus: Any = 2, **options: Any) -> Any:
        options.setdefault("device_dir", tmp_path / "dev")
        return doubles.install(monkeypatch, gpus, **options)

    return install


@pytest.fixture(autouse=True)
def _clean_device_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts without device choices or GPU masks from the caller's shell, and unselected."""
    for name in (DEVICE_ENV, RESOLVED_ENV, "CUDA_VISIBLE_DEVICES", "NCCL_CUMEM_ENABLE"):
        monkeypatch.delenv(name, raising=False)
    facade.reset()
    yield
    facade.reset()


@pytest.fixture
def no_driver_library(monkeypatch: pytest.MonkeyPatch, doubles: ModuleType, tmp_path: Path) -> ModuleType:
    """The real pynvml, made to find no ``libnvidia-ml.so.1`` whatever this machine has.

    The driver's device files are faked, so the probe goes on to ask NVML.
    """
    import pynvml

    doubles.pretend_device_files(monkeypatch, tmp_path / "dev", 1)

    def missing(name: str, *args: Any, **kwargs: Any) -> Any:
        raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    monkeypatch.setitem(sys.modules, "pynvml", pynvml)
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "CDLL", missing)
    return pynvml
