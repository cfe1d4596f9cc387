"""Fixtures of the GPU tests: the device they must prove, a work folder, the tiny model, report details.

These tests run on a CUDA machine, started by ``scripts/gpu_check.py`` (they
live outside the default ``testpaths``, so the normal suite never collects
them). Without a CUDA device the session stops at once with one line,
unless ``GPU_CHECK_DEVICE=cpu`` asks for a smoke run on the CPU backend.
Each test states its figures with ``detail(...)``: they become the
report's line for that check.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from gpu_support import EXPECTED_DEVICE, TINY_SPEC


def pytest_configure(config: pytest.Config) -> None:
    """Stop the session with one line when the device to prove is CUDA and torch sees none."""
    for name in ("TRINITY_DEVICE", "TRINITY_DEVICE_RESOLVED"):
        os.environ.pop(name, None)  # the tests prove the automatic choice
    if EXPECTED_DEVICE != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        pytest.exit(f"no CUDA device: torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU; these tests "
                    "run on a CUDA machine (scripts/gpu_check.sh), or with GPU_CHECK_DEVICE=cpu as a smoke run",
                    returncode=2)


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's work folder: ``GPU_CHECK_WORKDIR`` when set (shared by the driver's runs), else a temporary one."""
    given = os.environ.get("GPU_CHECK_WORKDIR")
    folder = Path(given) if given else tmp_path_factory.mktemp("gpu-check")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def tiny_model(workdir: Path) -> Path:
    """Build (once, atomically) the tiny model of TINY_SPEC under the work folder and return its path."""
    from trinity.common.config import TinyModelConfig
    from trinity.common.models.tiny import build_tiny_model

    return build_tiny_model(workdir / "tiny-model", TinyModelConfig(**TINY_SPEC))  # type: ignore[arg-type]


@pytest.fixture
def selected_backend() -> str:
    """Return the selected backend's name; fail unless its device type is the one to prove."""
    import trinity.device

    selection = trinity.device.current_selection()
    device_type = trinity.device.get_device_type()
    assert device_type == EXPECTED_DEVICE, (
        f"the selected backend is {selection.name!r} (device type {device_type}), not {EXPECTED_DEVICE}: "
        f"{selection.reason}")
    return selection.name


@pytest.fixture
def detail(record_property: Callable[[str, object], None]) -> Callable[[str], None]:
    """Return ``detail(text)``: the figures of this test, recorded for the report (junit property ``detail``)."""

    def record(text: str) -> None:
        print(text)
        record_property("detail", " ".join(text.split()))

    return record
