"""The NPU backend's weight-sync groups: HCCL built from torch_npu's ProcessGroupHCCL and its Options.

torch_npu is the test double under ``doubles/fake_site`` (its
``ProcessGroupHCCL`` runs the broadcast over a real gloo group on CPU
tensors, so the ranks really exchange data); the Ascend host is faked too.
"""

from __future__ import annotations

import datetime
import sys
from typing import Any

import pytest
from torch.distributed import HashStore

from trinity.device import CollectiveGroupError
from trinity.device.loader import load_plugin
from trinity.device.testing.conformance import broadcast_through_stateless_group
from trinity_backend_npu import plugin

TIMEOUT = datetime.timedelta(seconds=30)


@pytest.fixture
def backend(npu_runtime: Any) -> Any:
    return load_plugin(plugin, expected_name="npu")


def test_hccl_group_is_torch_npus_process_group_hccl_with_options(backend: Any) -> None:
    group = backend.stateless_process_group(
        "hccl", HashStore(), rank=0, world_size=1, timeout=TIMEOUT, group_name="trinity-weight-sync-1"
    )
    c10d = sys.modules["torch_npu"]._C._distributed_c10d
    assert isinstance(group.process_group, c10d.ProcessGroupHCCL)
    assert (group.collective, group.device_type) == ("hccl", "npu")
    options = group.process_group.options
    assert isinstance(options, c10d.ProcessGroupHCCL.Options)
    assert (options._timeout, options.group_id, options.is_high_priority_stream) == (
        TIMEOUT, "trinity-weight-sync-1", False,
    )


def test_two_ranks_broadcast(backend: Any) -> None:
    outcomes = broadcast_through_stateless_group(backend, "hccl", 2, tensor_device="cpu")  # the double's tensors
    assert {rank: received for rank, (_, received) in outcomes.items()} == {
        0: [float(i) for i in range(8)], 1: [float(i) for i in range(8)]}, outcomes


def test_gloo_needs_no_torch_npu(backend: Any) -> None:
    group = backend.stateless_process_group("gloo", HashStore(), rank=0, world_size=1, timeout=TIMEOUT, group_name="g")
    assert (group.collective, group.device_type) == ("gloo", "cpu")
    assert "torch_npu" not in sys.modules


def test_torch_npu_without_process_group_hccl_is_refused(backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    backend.device_module()  # imports the double
    monkeypatch.delattr(sys.modules["torch_npu._C._distributed_c10d"], "ProcessGroupHCCL")
    with pytest.raises(CollectiveGroupError, match=r"has no torch_npu\._C\._distributed_c10d\.ProcessGroupHCCL"):
        backend.stateless_process_group("hccl", HashStore(), rank=0, world_size=1, timeout=TIMEOUT, group_name="g")


def test_hccl_without_cann_says_how_to_fix(npu_runtime: Any) -> None:
    from trinity.device.errors import BackendUnavailableError

    npu_runtime.unsource_cann()
    backend = load_plugin(plugin, expected_name="npu")
    with pytest.raises(BackendUnavailableError, match=r"torch_npu could not be imported \(ImportError: libhccl.so"):
        backend.stateless_process_group("hccl", HashStore(), rank=0, world_size=1, timeout=TIMEOUT, group_name="g")
