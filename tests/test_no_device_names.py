"""No line of the framework outside trinity/device names a device: the backend answers every device question."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TRINITY = Path(__file__).resolve().parents[1] / "trinity"
DEVICE_NAMES = re.compile(
    r"torch\.cuda|torch_npu|torch\.npu|[\"'](?:nccl|hccl|cuda|npu)[\"']|CUDA_VISIBLE_DEVICES|ASCEND_RT_VISIBLE_DEVICES"
    r"|num_gpus|\.is_cuda\b"
)


def framework_files() -> list[Path]:
    return sorted(p for p in TRINITY.rglob("*.py") if TRINITY / "device" not in p.parents)


def test_the_scan_covers_the_framework() -> None:
    names = {p.relative_to(TRINITY).parts[0] for p in framework_files()}
    assert {"trainer", "synchronizer", "explorer", "buffer", "common", "launcher"} <= names


@pytest.mark.parametrize("path", framework_files(), ids=lambda p: str(p.relative_to(TRINITY)))
def test_no_device_name_outside_the_device_layer(path: Path) -> None:
    hits = [
        f"{path.relative_to(TRINITY.parent)}:{number}: {line.strip()}"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if DEVICE_NAMES.search(line)
    ]
    assert not hits, "ask trinity.device instead of naming a device:\n" + "\n".join(hits)
