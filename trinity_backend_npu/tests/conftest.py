"""Fixtures of trinity-backend-npu's tests: a fake Ascend machine and the torch_npu test double.

The doubles live in ``tests/doubles``; the helper module is loaded by path
under a name no other test suite uses, so the CPU and CUDA suites running in
the same pytest process cannot clash with it.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

_HELPER_NAME = "trinity_backend_npu_test_doubles"


def _load_doubles() -> ModuleType:
    if _HELPER_NAME in sys.modules:
        return sys.modules[_HELPER_NAME]
    path = Path(__file__).resolve().parent / "doubles" / "ascend_machine.py"
    spec = importlib.util.spec_from_file_location(_HELPER_NAME, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[_HELPER_NAME] = module
    spec.loader.exec_module(module)
    return module


doubles_module = _load_doubles()


@pytest.fixture
def doubles() -> ModuleType:
    """The doubles helper module (``tests/doubles/ascend_machine.py``)."""
    return doubles_module


@pytest.fixture
def npu_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fake Ascend host with 16 NPUs and CANN sourced; torch_npu is not importable."""
    return doubles_module.build_machine(tmp_path, monkeypatch, devices=16)


@pytest.fixture
def npu_runtime(npu_machine: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The fake host plus the torch_npu double on sys.path; undone after the test."""
    with doubles_module.fake_torch_npu_installed(monkeypatch):
        yield npu_machine


@pytest.fixture
def fresh_facade() -> Iterator[None]:
    """Forget trinity.device's discovery and selection before and after the test."""
    import trinity.device

    trinity.device.reset()
    try:
        yield
    finally:
        trinity.device.reset()
