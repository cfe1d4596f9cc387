"""The CUDA backend through the core: selection, the façade, worker environment and torch.compile support."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

import trinity.device
from trinity.device.loader import discover, load_plugin
from trinity.device.selection import DEVICE_ENV, select
from trinity_backend_cuda import compile_support, info, plugin, torchbuild, workerenv

Install = Callable[..., Any]


@pytest.fixture
def no_imex(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """This machine has no multi-node NVLink (IMEX) channels, whatever it really has."""
    monkeypatch.setattr(workerenv, "IMEX_CHANNELS_PATH", tmp_path / "no-imex-channels")


# --- worker environment -----------------------------------------------------------------------


def test_worker_env_forwards_nccl_and_leaves_the_mask_to_ray(monkeypatch: pytest.MonkeyPatch, no_imex: None) -> None:
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth0")
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("HOME_OF_SOMETHING_ELSE", "x")
    env = plugin.trinity_worker_env(self_managed_devices=False)
    assert env == {
        "NCCL_DEBUG": "INFO",
        "NCCL_SOCKET_IFNAME": "eth0",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "NCCL_CUMEM_ENABLE": "0",
    }


def test_self_managed_workers_keep_ray_off_the_mask(monkeypatch: pytest.MonkeyPatch, no_imex: None) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setenv("NCCL_IB_DISABLE", "1")
    env = plugin.trinity_worker_env(self_managed_devices=True)
    assert env["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert env["NCCL_IB_DISABLE"] == "1"
    assert "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES" not in plugin.trinity_worker_env(self_managed_devices=False)


@pytest.mark.parametrize("value", ["1", "0"])
def test_user_choice_of_nccl_cumem_wins(monkeypatch: pytest.MonkeyPatch, no_imex: None, value: str) -> None:
    monkeypatch.setenv("NCCL_CUMEM_ENABLE", value)
    assert plugin.trinity_worker_env(self_managed_devices=False)["NCCL_CUMEM_ENABLE"] == value


def test_nccl_cumem_left_alone_with_multi_node_nvlink(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    channels = tmp_path / "nvidia-caps-imex-channels"
    channels.mkdir()
    monkeypatch.setattr(workerenv, "IMEX_CHANNELS_PATH", channels)
    assert "NCCL_CUMEM_ENABLE" not in plugin.trinity_worker_env(self_managed_devices=False)


def test_worker_env_through_the_facade(cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch, no_imex: None) -> None:
    cuda_doubles()
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    trinity.device.select_backend()
    env = trinity.device.worker_env(self_managed_devices=True)
    assert env["TRINITY_DEVICE"] == "cuda" and env["TRINITY_DEVICE_RESOLVED"] == "1"
    assert env["NCCL_DEBUG"] == "WARN" and env["NCCL_CUMEM_ENABLE"] == "0"
    assert env["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] == "1"


# --- selection --------------------------------------------------------------------------------


def test_selected_by_environment_with_doubles(cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = cuda_doubles(gpus=2)
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    selection = trinity.device.select_backend()
    assert selection.name == "cuda" and selection.source == "environment"
    assert trinity.device.get_process_group_backend() == "cpu:gloo,cuda:nccl"
    assert trinity.device.get_ray_resource_key() == "GPU"
    assert trinity.device.get_collective_backend() == "nccl"
    assert trinity.device.is_cuda() and not trinity.device.is_npu() and not trinity.device.is_cpu()
    assert trinity.device.get_torch_device() is torch.cuda
    trinity.device.set_device(1)
    assert runtime.cuda.current == 1 and trinity.device.get_device_id() == 1
    assert trinity.device.torch_device() == torch.device("cuda", 1)
    trinity.device.synchronize()
    assert runtime.cuda.synchronized == [1]
    trinity.device.empty_cache()
    assert runtime.cuda.empty_cache_calls == 1
    trinity.device.manual_seed(7)
    assert runtime.cuda.seeds[-1] == 7


def test_set_device_out_of_range_raises_like_torch(cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = cuda_doubles(gpus=2)
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    trinity.device.select_backend()
    with pytest.raises(torch.AcceleratorError, match="invalid device ordinal"):
        trinity.device.set_device(2)
    assert runtime.cuda.current == 0


def test_memory_stats_through_the_facade(cuda_doubles: Install, doubles: ModuleType) -> None:
    runtime = cuda_doubles(gpus=[doubles.FakeGpu(uuid="GPU-a", total_memory=80 * doubles.GIB)])
    runtime.cuda.allocated[0] = 3 * doubles.GIB
    runtime.cuda.cached[0] = 1 * doubles.GIB
    stats = load_plugin(plugin, expected_name="cuda").memory_stats()
    assert (stats.allocated, stats.reserved, stats.total, stats.free) == (
        3 * doubles.GIB, 4 * doubles.GIB, 80 * doubles.GIB, 76 * doubles.GIB
    )


def _cpu_and_cuda() -> dict[str, Any]:
    """The installed records of the built-in CPU backend and this one (other installed backends left out)."""
    records = discover()
    assert records["cuda"].status == "ok", records["cuda"].error
    return {name: records[name] for name in ("cpu", "cuda")}


def test_auto_prefers_cuda_when_gpus_are_there(cuda_doubles: Install) -> None:
    cuda_doubles(gpus=4)
    selection = select(_cpu_and_cuda(), environ={})
    assert selection.name == "cuda" and selection.source == "auto"
    assert "4 device(s)" in selection.reason


def test_requested_without_gpu_raises_with_the_probe_reason(
    no_driver_library: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    with pytest.raises(trinity.device.BackendUnavailableError) as caught:
        trinity.device.select_backend()
    message = str(caught.value)
    assert "'cuda'" in message and "TRINITY_DEVICE" in message
    assert "libnvidia-ml.so.1 cannot be loaded" in message and "install the NVIDIA driver" in message


def test_auto_without_gpu_falls_to_cpu(no_driver_library: ModuleType) -> None:
    selection = select(_cpu_and_cuda(), environ={})
    assert selection.name == "cpu"
    assert "unavailable: cuda" in selection.reason


def test_requested_with_cpu_torch_names_the_build(cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    cuda_doubles(torch_build=torchbuild.TorchBuild("2.13.0+cpu"))
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    with pytest.raises(trinity.device.BackendUnavailableError, match=r"torch 2\.13\.0\+cpu is a CPU-only build"):
        trinity.device.select_backend()


# --- hooks the backend implements -------------------------------------------------------------


def test_backend_overrides_only_what_differs() -> None:
    backend = load_plugin(plugin, expected_name="cuda")
    assert backend.info == info.INFO
    own = {h for h in ("trinity_probe", "trinity_torch_compile_support", "trinity_device_module",
                       "trinity_worker_env", "trinity_doctor", "trinity_set_device", "trinity_synchronize")
           if backend.implements(h)}
    assert own == {"trinity_probe", "trinity_torch_compile_support", "trinity_device_module",
                   "trinity_worker_env", "trinity_doctor"}
    assert backend.visible_devices_env([2, 0]) == {"CUDA_VISIBLE_DEVICES": "2,0"}


def test_compile_unsupported_without_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> Any:
        return None if name == "triton" else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    support = load_plugin(plugin, expected_name="cuda").compile_support()
    assert not support.supported
    assert "triton is not installed" in support.reason and "pip install triton" in support.reason


def test_compile_supported_with_triton(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    package = tmp_path / "triton"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('must not be imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    support = compile_support.compile_support()
    assert support.supported and support.reason.startswith("triton")
    assert "triton" not in sys.modules


def test_plugin_import_and_probe_are_light() -> None:
    code = (
        "import json, sys, time\n"
        "t = time.perf_counter()\n"
        "from trinity_backend_cuda import plugin\n"
        "plugin.trinity_backend_info(); plugin.trinity_probe(); plugin.trinity_torch_compile_support()\n"
        "print(json.dumps([time.perf_counter() - t, sorted(m for m in ('torch', 'triton') if m in sys.modules)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    seconds, imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert imported == []
    assert seconds < 1.0, f"plugin import + probe took {seconds:.2f} s (torch alone costs about 1 s)"
