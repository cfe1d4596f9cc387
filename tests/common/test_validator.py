"""Config vs backend vs cluster: the device migration points of the config validator."""

from __future__ import annotations

import pytest

from tests.device import plugins
from trinity.common.config import ConfigError, parse_config
from trinity.common.config.validator import resolve_layout
from trinity.common.models.placement import bundles, strategy
from trinity.device.backends import cpu
from trinity.device.loader import load_plugin
from trinity.device.types import CompileSupport


class NoCompile(plugins.FakeAccel):
    """An accelerator whose torch.compile is unsupported (as on Ascend)."""

    @plugins.hookimpl
    def trinity_torch_compile_support(self) -> CompileSupport:
        return CompileSupport(False, "inductor has no driver for this device")


def config(**sections: dict) -> object:
    raw: dict = {"model": {"model_path": "m"}, "buffer": {"train_tasks": {"path": "t.jsonl"}}}
    for key, value in sections.items():
        raw[key] = value
    return parse_config(raw)


NPU = load_plugin(NoCompile("npu", 100, key="NPU"), expected_name="npu")
CPU = load_plugin(cpu, expected_name="cpu")


def test_npu_layout_counts_npus_and_resolves_online_to_its_collective() -> None:
    cfg = config(explorer={"engine_type": "vllm", "engine_num": 2, "tensor_parallel_size": 2},
                 trainer={"trainer_num": 4},
                 cluster={"node_num": 1, "devices_per_node": 8})
    layout = resolve_layout(cfg, NPU, {"NPU": 8, "CPU": 64})
    assert layout.resource_key == "NPU" and layout.engines == 2 and layout.trainers == 4
    assert str(layout.sync_method) == NPU.info.collective_backend
    assert layout.use_torch_compile is False


def test_too_many_devices_is_refused_with_what_exists() -> None:
    cfg = config(explorer={"engine_type": "vllm", "engine_num": 4, "tensor_parallel_size": 2},
                 trainer={"trainer_num": 4},
                 cluster={"node_num": 2, "devices_per_node": 8})
    with pytest.raises(ConfigError, match=r"asks for 12 NPU but the Ray cluster has 8"):
        resolve_layout(cfg, NPU, {"NPU": 8, "CPU": 64})


def test_more_than_declared_is_refused() -> None:
    cfg = config(explorer={"engine_num": 4}, trainer={"trainer_num": 8}, cluster={"devices_per_node": 8})
    with pytest.raises(ConfigError, match=r"asks for 12 NPU .*node_num x devices_per_node = 8"):
        resolve_layout(cfg, NPU, {"NPU": 16, "CPU": 64})


def test_tensor_parallel_must_fit_a_node() -> None:
    cfg = config(explorer={"engine_type": "vllm", "tensor_parallel_size": 16},
                 cluster={"node_num": 2, "devices_per_node": 8})
    with pytest.raises(ConfigError, match="an engine must fit on one node"):
        resolve_layout(cfg, NPU, {"NPU": 16, "CPU": 64})


def test_explicit_compile_refused_with_the_backends_reason() -> None:
    cfg = config(trainer={"use_torch_compile": True}, cluster={"devices_per_node": 8})
    with pytest.raises(ConfigError, match="use_torch_compile: true is not supported on the npu backend: inductor"):
        resolve_layout(cfg, NPU, {"NPU": 8, "CPU": 8})


def test_sync_method_of_another_device_is_refused() -> None:
    cfg = config(synchronizer={"sync_method": "nccl"}, cluster={"devices_per_node": 8})
    with pytest.raises(ConfigError, match=r"synchronizer\.sync_method: .* collective is 'gloo'"):
        resolve_layout(cfg, NPU, {"NPU": 8, "CPU": 8})


def test_cpu_backend_counts_cpus_and_refuses_vllm() -> None:
    layout = resolve_layout(config(trainer={"trainer_num": 2}), CPU, {"CPU": 4})
    assert layout.resource_key is None and str(layout.sync_method) == "gloo" and layout.use_torch_compile
    with pytest.raises(ConfigError, match=r"3 bundle\(s\) x 1 CPU = 3 CPUs asked but the Ray cluster has 2"):
        resolve_layout(config(trainer={"trainer_num": 2}), CPU, {"CPU": 2})
    with pytest.raises(ConfigError, match="vllm needs an accelerator"):
        resolve_layout(config(explorer={"engine_type": "vllm"}), CPU, {"CPU": 8})


def test_bundles_and_strategy() -> None:
    assert bundles(2, "NPU", 4) == [{"NPU": 1.0, "CPU": 4.0}, {"NPU": 1.0, "CPU": 4.0}]
    assert bundles(1, None, 2) == [{"CPU": 2.0}]
    assert strategy(8, 8, "NPU") == "STRICT_PACK" and strategy(16, 8, "NPU") == "PACK"
    assert strategy(16, 8, None) == "STRICT_PACK"


def test_engine_bundles_carry_their_tensor_parallel_devices() -> None:
    assert bundles(1, "NPU", 2, devices=4) == [{"NPU": 4.0, "CPU": 2.0}]


def test_hf_engine_refuses_tensor_parallelism() -> None:
    cfg = config(explorer={"tensor_parallel_size": 2}, cluster={"devices_per_node": 8})
    with pytest.raises(ConfigError, match=r"the hf engine runs on one device.*engine_type: vllm"):
        resolve_layout(cfg, NPU, {"NPU": 8, "CPU": 8})


def test_groups_that_no_node_packing_can_hold_are_refused_before_any_actor_starts() -> None:
    # 2 x 8 NPUs: 6 trainer ranks take one node; two tp-3 engines fill the other but a third fits nowhere
    cfg = config(explorer={"engine_type": "vllm", "engine_num": 3, "tensor_parallel_size": 3},
                 trainer={"trainer_num": 6}, cluster={"node_num": 2, "devices_per_node": 8})
    with pytest.raises(ConfigError, match=r"engine 2 \(3 devices; 3 engines in all\) cannot be placed on 2 node"):
        resolve_layout(cfg, NPU, {"NPU": 16, "CPU": 64})
    fits = config(explorer={"engine_type": "vllm", "engine_num": 2, "tensor_parallel_size": 4},
                  trainer={"trainer_num": 8}, cluster={"node_num": 2, "devices_per_node": 8})
    assert resolve_layout(fits, NPU, {"NPU": 16, "CPU": 64}).engines == 2


def test_packing_counts_spread_trainers_and_best_fit_engines() -> None:
    from trinity.common.config.validator import unpackable_groups

    assert unpackable_groups(12, 1, 4, 2, 8) == ""  # 12 ranks spread 8 + 4, the engine takes the other 4
    assert unpackable_groups(12, 2, 4, 2, 8).startswith("engine 1")
    assert unpackable_groups(0, 4, 4, 2, 8) == ""
    assert unpackable_groups(2, 3, 2, 1, 8) == ""
    assert unpackable_groups(20, 0, 1, 2, 8) == "the trainer's 20 ranks"
