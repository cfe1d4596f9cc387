"""The probe: device files, torch_npu, CANN environment and the visible-devices mask, without imports."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from trinity_backend_npu import plugin, probe


def test_sixteen_devices_counted_including_multi_digit(npu_runtime: Any) -> None:
    result = probe.probe()
    assert result.available, result.reason
    assert result.device_count == 16
    assert probe.device_indices() == list(range(16))


def test_multi_digit_device_file_alone_counts(npu_runtime: Any) -> None:
    npu_runtime.set_device_files(0)
    (npu_runtime.dev / "davinci12").touch()
    assert probe.device_indices() == [12]
    result = probe.probe()
    assert result.available and result.device_count == 1


def test_control_devices_are_not_npus(npu_runtime: Any) -> None:
    npu_runtime.set_device_files(0)
    (npu_runtime.dev / "davinci").touch()
    (npu_runtime.dev / "davinci1x").touch()
    assert sorted(p.name for p in npu_runtime.dev.iterdir()) == [
        "davinci", "davinci1x", "davinci_manager", "devmm_svm", "hisi_hdc",
    ]
    result = probe.probe()
    assert not result.available and result.device_count == 0
    assert f"no Ascend NPU found: no {npu_runtime.dev}/davinci<N> device files" in result.reason
    assert "torch_npu" not in result.reason and "CANN" not in result.reason


def test_missing_device_dir_is_no_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "DEVICE_DIR", tmp_path / "absent")
    assert probe.device_indices() == []


def test_torch_npu_missing(npu_machine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "find_spec", lambda name: None)
    result = probe.probe()
    assert not result.available
    assert result.reason == "torch_npu not installed: pip install 'trinity-backend-npu[ascend]'"


def test_torch_npu_found_by_spec_not_import(npu_runtime: Any) -> None:
    assert probe.torch_npu_findable()
    assert plugin.trinity_probe().available
    assert "torch_npu" not in sys.modules


def test_cann_not_sourced(npu_runtime: Any) -> None:
    npu_runtime.unsource_cann()
    result = probe.probe()
    assert not result.available
    assert result.reason == "CANN environment not set: source /usr/local/Ascend/ascend-toolkit/set_env.sh"


def test_either_toolkit_variable_is_enough(npu_runtime: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASCEND_HOME_PATH")
    assert probe.probe().available
    monkeypatch.setenv("ASCEND_HOME_PATH", str(npu_runtime.toolkit))
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME")
    assert probe.probe().available


def test_cann_points_to_missing_directory(npu_runtime: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_HOME_PATH", "/nonexistent/Ascend/ascend-toolkit/latest")
    result = probe.probe()
    assert not result.available
    assert "CANN environment points to a missing directory" in result.reason
    assert "ASCEND_HOME_PATH=/nonexistent/Ascend/ascend-toolkit/latest" in result.reason


def test_every_missing_piece_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "DEVICE_DIR", tmp_path)
    monkeypatch.setattr(probe, "find_spec", lambda name: None)
    result = probe.probe(environ={})
    parts = result.reason.split("; ")
    assert parts[0].startswith("no Ascend NPU found")
    assert "torch_npu not installed: pip install 'trinity-backend-npu[ascend]'" in parts
    assert "CANN environment not set: source /usr/local/Ascend/ascend-toolkit/set_env.sh" in parts


@pytest.mark.parametrize(
    ("mask", "expected"),
    [("0,3,3,15,99", 3), ("15", 1), (" 1 , 2 ", 2), ("0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15", 16)],
)
def test_visible_devices_mask_the_count(
    npu_runtime: Any, monkeypatch: pytest.MonkeyPatch, mask: str, expected: int
) -> None:
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", mask)
    result = probe.probe()
    assert result.available and result.device_count == expected


def test_visible_devices_hiding_all(npu_runtime: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for mask in ("", "16,17"):
        monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", mask)
        result = probe.probe()
        assert not result.available
        assert f"ASCEND_RT_VISIBLE_DEVICES={mask!r} hides every NPU (16 found, ids 0..15)" in result.reason


def test_visible_devices_malformed(npu_runtime: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,npu1")
    result = probe.probe()
    assert not result.available
    assert "is not a comma-separated list of NPU ids" in result.reason


def test_probe_in_fresh_interpreter_finds_devices_without_importing(npu_machine: Any, doubles: Any) -> None:
    """With devices, CANN and a findable torch_npu, the probe says yes and still imports neither torch nor it."""
    code = textwrap.dedent(
        f"""
        import json, sys
        from pathlib import Path
        import trinity_backend_npu.probe as probe
        probe.DEVICE_DIR = Path({str(npu_machine.dev)!r})
        from trinity.device.testing.conformance import _fresh_backend
        backend = _fresh_backend("npu")
        result = backend.probe()
        backend.compile_support()
        print(json.dumps([result.available, result.device_count,
                          sorted(m for m in ("torch", "torch_npu") if m in sys.modules)]))
        """
    )
    env = doubles.subprocess_env(
        ASCEND_HOME_PATH=str(npu_machine.toolkit), LD_LIBRARY_PATH=str(npu_machine.toolkit / "lib64")
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [True, 16, []]
