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

#: Upstream's config word for online sync (``synchronizer.sync_method: nccl``) is a spelling the config layer
#: reads and maps to the selected backend's collective, not a device decision: allowed there, on sync-method lines.
UPSTREAM_SYNC_WORD = re.compile(r"[\"']nccl[\"']")
CONFIG_LAYER = TRINITY / "common" / "config"


def device_names(path: Path, line: str) -> list[str]:
    """Return the device names ``line`` of ``path`` uses (upstream's ``sync_method: nccl`` spelling excepted)."""
    found = [m.group(0) for m in DEVICE_NAMES.finditer(line)]
    if CONFIG_LAYER in path.parents and "method" in line.lower():
        found = [name for name in found if not UPSTREAM_SYNC_WORD.fullmatch(name)]
    return found


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
        if device_names(path, line)
    ]
    assert not hits, "ask trinity.device instead of naming a device:\n" + "\n".join(hits)


def test_the_upstream_sync_word_is_allowed_only_as_a_sync_method_in_the_config_layer() -> None:
    config_file = CONFIG_LAYER / "plan" / "run.py"
    assert device_names(config_file, 'elif method == "nccl":') == []
    assert device_names(config_file, 'UPSTREAM_ONLINE_SYNC_METHOD = "nccl"') == []
    assert device_names(config_file, 'backend = "nccl"') == ['"nccl"']
    assert device_names(TRINITY / "trainer" / "trainer.py", 'if sync_method == "nccl":') == ['"nccl"']
    assert device_names(config_file, 'method = "cuda" if torch.cuda.is_available() else "nccl"') == [
        '"cuda"', "torch.cuda"]
