"""The façade: one place for device questions, bound straight to the selection."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import trinity.utils.device as utils_device
from trinity import device
from trinity.device import facade


def test_first_question_selects_automatically_and_binds_hot_path() -> None:
    assert device.get_collective_backend() == "gloo"
    backend = device.current_backend()
    assert device.synchronize is backend.synchronize
    assert facade.set_device is backend.set_device
    assert device.get_process_group_backend() == "cpu:gloo"
    assert device.is_cpu() and not device.is_cuda() and not device.is_npu()
    assert device.get_ray_resource_key() is None
    assert device.get_device_type() == device.get_device_name() == "cpu"


def test_reset_unbinds() -> None:
    device.select_backend("cpu")
    device.reset()
    assert device.synchronize is facade._UNBOUND["synchronize"]


def test_explicit_selection_is_reported() -> None:
    selection = device.select_backend("cpu")
    assert selection.source == "argument"
    assert device.current_selection() is selection


def test_trinity_utils_device_follows_the_facade() -> None:
    device.select_backend("cpu")
    assert utils_device.synchronize is device.synchronize
    assert utils_device.get_collective_backend() == "gloo"
    with pytest.raises(AttributeError):
        utils_device.no_such_function  # noqa: B018


def test_cpu_answers() -> None:
    import torch

    device.set_device(0)
    assert device.get_device_id() == 0
    assert device.torch_device() == torch.device("cpu")
    assert device.supports_torch_compile()
    assert device.get_torch_device() is torch.cpu
    env = device.worker_env()
    assert env["TRINITY_DEVICE"] == "cpu" and env["TRINITY_DEVICE_RESOLVED"] == "1"
    device.manual_seed(7)
    first = torch.rand(3)
    device.manual_seed(7)
    assert torch.equal(first, torch.rand(3))


def test_unknown_device_in_environment_fails_on_first_question(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRINITY_DEVICE", "quantum")
    with pytest.raises(device.UnknownBackendError, match="unknown device backend 'quantum'"):
        device.get_collective_backend()


def test_listing_includes_every_installed_backend() -> None:
    names = [record.name for record in device.list_backends()]
    assert names[0] == "cpu"
    assert {"cuda", "npu"} <= set(names)


def test_importing_trinity_device_loads_no_torch_nor_vendor_runtime() -> None:
    code = (
        "import json, sys, trinity, trinity.device as d, trinity.utils.device;"
        "d.list_backends();"
        "print(json.dumps([m for m in ('torch', 'torch_npu', 'pynvml', 'vllm') if m in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
