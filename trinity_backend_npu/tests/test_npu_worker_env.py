"""Visible-device masks and the environment an NPU Ray worker inherits."""

from __future__ import annotations

from typing import Any

import pytest
from trinity_backend_npu.info import INFO

import trinity.device
from trinity.device.errors import InvalidDeviceRequestError
from trinity.device.loader import load_plugin
from trinity_backend_npu import plugin, workerenv


@pytest.fixture
def backend() -> Any:
    return load_plugin(plugin, expected_name="npu")


@pytest.mark.parametrize(
    ("ids", "expected"),
    [([3, 1, 2], "1,2,3"), ([2, 2, 0], "0,2"), ([15, 10, 9], "9,10,15"), ([5], "5"), ([], "")],
)
def test_visible_devices_ascending_and_unique(backend: Any, ids: list[int], expected: str) -> None:
    assert backend.visible_devices_env(ids) == {"ASCEND_RT_VISIBLE_DEVICES": expected}


def test_visible_devices_rejects_negative_ids(backend: Any) -> None:
    with pytest.raises(InvalidDeviceRequestError, match="NPU ids must be >= 0, got -1"):
        backend.visible_devices_env([0, -1])


_DRIVER_ENV = {
    "ASCEND_GLOBAL_LOG_LEVEL": "3",
    "ASCEND_SLOG_PRINT_TO_STDOUT": "0",
    "HCCL_CONNECT_TIMEOUT": "1800",
    "HCCL_SOCKET_IFNAME": "eth0",
    "HCCL_OP_EXPANSION_MODE": "AIV",
    "LCCL_DETERMINISTIC": "0",
    "ACL_OP_INIT_MODE": "1",
    "ATB_WORKSPACE_MEM_ALLOC_ALG_TYPE": "1",
    "ASDOPS_LOG_LEVEL": "ERROR",
    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
    "VLLM_ASCEND_ENABLE_NZ": "0",
    "TASK_QUEUE_ENABLE": "2",
    "CPU_AFFINITY_CONF": "1",
    # not for workers: Ray's mask, node-local install paths and addresses, generic search paths
    "ASCEND_RT_VISIBLE_DEVICES": "0,1",
    "ASCEND_HOME_PATH": "/usr/local/Ascend/ascend-toolkit/latest",
    "ASCEND_TOOLKIT_HOME": "/usr/local/Ascend/ascend-toolkit/latest",
    "ASCEND_OPP_PATH": "/usr/local/Ascend/ascend-toolkit/latest/opp",
    "ATB_HOME_PATH": "/usr/local/Ascend/nnal/atb/latest/atb/cxx_abi_1",
    "HCCL_IF_IP": "10.0.0.1",
    "ASCEND_VISIBLE_DEVICES": "0-7",
    "LD_LIBRARY_PATH": "/usr/local/Ascend/ascend-toolkit/latest/lib64",
    "PYTHONPATH": "/usr/local/Ascend/ascend-toolkit/latest/python/site-packages",
    "PATH": "/usr/bin",
    "CUDA_VISIBLE_DEVICES": "0",
    "HOME": "/root",
}

_FORWARDED = {
    "ASCEND_GLOBAL_LOG_LEVEL", "ASCEND_SLOG_PRINT_TO_STDOUT", "HCCL_CONNECT_TIMEOUT", "HCCL_SOCKET_IFNAME",
    "HCCL_OP_EXPANSION_MODE", "LCCL_DETERMINISTIC", "ACL_OP_INIT_MODE", "ATB_WORKSPACE_MEM_ALLOC_ALG_TYPE",
    "ASDOPS_LOG_LEVEL", "PYTORCH_NPU_ALLOC_CONF", "VLLM_ASCEND_ENABLE_NZ", "TASK_QUEUE_ENABLE", "CPU_AFFINITY_CONF",
}


def test_worker_env_forwards_tuning_not_node_paths() -> None:
    env = workerenv.worker_env(_DRIVER_ENV, self_managed_devices=False)
    assert env == {name: _DRIVER_ENV[name] for name in _FORWARDED}


def test_self_managed_workers_tell_ray_not_to_mask() -> None:
    env = workerenv.worker_env(_DRIVER_ENV, self_managed_devices=True)
    assert env["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"] == "1"
    assert "ASCEND_RT_VISIBLE_DEVICES" not in env
    assert set(env) == _FORWARDED | {"RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"}


@pytest.mark.parametrize("value", ["0", "1"])
def test_autoload_switch_follows_the_driver(value: str) -> None:
    env = workerenv.worker_env({"TORCH_DEVICE_BACKEND_AUTOLOAD": value}, self_managed_devices=False)
    assert env == {"TORCH_DEVICE_BACKEND_AUTOLOAD": value}


def test_autoload_switch_unset_stays_unset() -> None:
    assert workerenv.worker_env({"HCCL_EXEC_TIMEOUT": "60"}, self_managed_devices=False) == {"HCCL_EXEC_TIMEOUT": "60"}


def test_hook_reads_the_process_environment(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HCCL_BUFFSIZE", "200")
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "3")
    monkeypatch.setenv("ASCEND_HOME_PATH", "/opt/cann")
    env = backend.worker_env(False)
    assert env["HCCL_BUFFSIZE"] == "200"
    assert "ASCEND_RT_VISIBLE_DEVICES" not in env and "ASCEND_HOME_PATH" not in env
    assert "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES" not in env


def test_prefixes_cover_cann_and_hccl() -> None:
    assert INFO.worker_env_prefixes[:2] == ("ASCEND_", "HCCL_")
    assert workerenv.NODE_LOCAL_NAMES.isdisjoint(workerenv.FORWARDED_NAMES)


def test_facade_hands_the_decision_and_hccl_env_down(
    npu_runtime: Any, fresh_facade: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRINITY_DEVICE", "npu")
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "900")
    env = trinity.device.worker_env(self_managed_devices=True)
    assert env["TRINITY_DEVICE"] == "npu" and env["TRINITY_DEVICE_RESOLVED"] == "1"
    assert env["HCCL_CONNECT_TIMEOUT"] == "900"
    assert env["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"] == "1"
    assert trinity.device.visible_devices_env([7, 6]) == {"ASCEND_RT_VISIBLE_DEVICES": "6,7"}
