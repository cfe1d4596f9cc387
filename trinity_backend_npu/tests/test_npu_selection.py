"""Selecting the npu backend through trinity.device, with and without the torch_npu double."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import trinity.device
from trinity.device import BackendUnavailableError
from trinity_backend_npu import probe


def test_selected_by_environment_answers_like_an_npu(
    npu_runtime: Any, fresh_facade: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRINITY_DEVICE", "npu")
    selection = trinity.device.select_backend()
    assert selection.name == "npu" and selection.source == "environment"
    assert trinity.device.get_process_group_backend() == "cpu:gloo,npu:hccl"
    assert trinity.device.get_ray_resource_key() == "NPU"
    assert trinity.device.get_collective_backend() == "hccl"
    assert trinity.device.get_device_type() == "npu" == trinity.device.get_device_name()
    assert trinity.device.is_npu() and not trinity.device.is_cuda() and not trinity.device.is_cpu()
    assert trinity.device.supports_torch_compile() is False
    reason = trinity.device.torch_compile_support().reason
    assert "inductor has no NPU driver" in reason and "trainer.use_torch_compile: false" in reason


def test_selected_backend_drives_the_double(
    npu_runtime: Any, fresh_facade: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRINITY_DEVICE", "ascend")  # alias of npu
    trinity.device.set_device(9)
    assert trinity.device.get_device_id() == 9
    trinity.device.synchronize()
    module = trinity.device.get_torch_device()
    assert module.__name__ == "torch_npu.npu" and module.current_device() == 9


def test_auto_prefers_npu_over_cpu(npu_runtime: Any, fresh_facade: None) -> None:
    selection = trinity.device.select_backend()
    assert selection.name == "npu" and selection.source == "auto"
    assert "16 device(s)" in selection.reason


def test_auto_falls_back_to_cpu_without_npu(npu_runtime: Any, fresh_facade: None) -> None:
    npu_runtime.set_device_files(0)
    assert trinity.device.select_backend().name == "cpu"


def test_explicit_npu_without_the_device_raises_with_the_probe_reason(
    tmp_path: Path, fresh_facade: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(probe, "DEVICE_DIR", tmp_path)
    monkeypatch.setenv("TRINITY_DEVICE", "npu")
    monkeypatch.delenv("TRINITY_DEVICE_RESOLVED", raising=False)
    expected = probe.probe().reason
    assert expected.startswith("no Ascend NPU found")
    with pytest.raises(BackendUnavailableError) as caught:
        trinity.device.get_device_type()
    assert expected in str(caught.value)
    assert "'npu' was requested by the TRINITY_DEVICE environment variable but is not available" in str(caught.value)


def test_backend_is_listed_as_loaded(fresh_facade: None) -> None:
    record = trinity.device.get_backend_record("npu")
    assert record is not None and record.status == "ok", record and record.error
    assert record.distribution == "trinity-backend-npu"
    assert record.target == "trinity_backend_npu.plugin"
