"""The CUDA backend's weight-sync groups: NCCL built from ProcessGroupNCCL and connected on the current GPU.

torch.cuda, NVML and ``torch.distributed.ProcessGroupNCCL`` are test doubles
(``doubles.py``); the double runs its broadcast over a real gloo group on CPU
tensors, so the ranks really exchange data.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.distributed import HashStore

from trinity.device import CollectiveGroupError
from trinity.device.loader import load_plugin
from trinity.device.testing.conformance import broadcast_through_stateless_group
from trinity_backend_cuda import plugin

Install = Callable[..., Any]
TIMEOUT = datetime.timedelta(seconds=30)


def test_nccl_group_is_connected_on_the_current_gpu(cuda_doubles: Install) -> None:
    doubles = cuda_doubles(gpus=2)
    backend = load_plugin(plugin, expected_name="cuda")
    backend.set_device(1)
    group = backend.stateless_process_group(
        "nccl", HashStore(), rank=0, world_size=1, timeout=TIMEOUT, group_name="trinity-weight-sync-1"
    )
    [built] = doubles.nccl.created
    assert group.process_group is built and (group.collective, group.device_type) == ("nccl", "cuda")
    assert built.eager_devices == [torch.device("cuda", 1)], "the communicator is connected when the group is built"
    options = built.options
    assert (options._timeout, options.group_name, options.is_high_priority_stream) == (
        TIMEOUT, "trinity-weight-sync-1", False,
    )


def test_two_ranks_on_two_gpus_broadcast(cuda_doubles: Install) -> None:
    doubles = cuda_doubles(gpus=2)
    backend = load_plugin(plugin, expected_name="cuda")
    outcomes = broadcast_through_stateless_group(backend, "nccl", 2, tensor_device="cpu")  # the double's tensors
    assert {rank: received for rank, (_, received) in outcomes.items()} == {
        0: [float(i) for i in range(8)], 1: [float(i) for i in range(8)]}, outcomes
    assert len(doubles.nccl.created) == 2


def test_gloo_is_the_cores_route_and_builds_no_nccl_group(cuda_doubles: Install) -> None:
    doubles = cuda_doubles(gpus=2)
    backend = load_plugin(plugin, expected_name="cuda")
    group = backend.stateless_process_group("gloo", HashStore(), rank=0, world_size=1, timeout=TIMEOUT, group_name="g")
    assert (group.collective, group.device_type) == ("gloo", "cpu")
    assert doubles.nccl.created == []


def test_cpu_torch_without_nccl_is_refused_with_the_fix(cuda_doubles: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    cuda_doubles(gpus=2)
    monkeypatch.delattr(dist, "ProcessGroupNCCL")
    backend = load_plugin(plugin, expected_name="cuda")
    with pytest.raises(CollectiveGroupError, match=r"has no NCCL.*install a CUDA build of torch"):
        backend.stateless_process_group("nccl", HashStore(), rank=0, world_size=1, timeout=TIMEOUT, group_name="g")
