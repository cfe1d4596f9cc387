"""Config vs backend vs cluster: the device migration points of the config validator."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.device import plugins
from tests.plans import make_plan
from trinity.common.config import ConfigError
from trinity.common.config.plan.run import RunPlan
from trinity.common.config.validator import COLOCATED_VLLM_MEMORY, colocated_plan, resolve_layout
from trinity.common.models.placement import bundles, strategy
from trinity.device.backends import cpu
from trinity.device.loader import load_plugin
from trinity.device.types import CompileSupport


class NoCompile(plugins.FakeAccel):
    """An accelerator with its own torch device type whose torch.compile is unsupported (as on Ascend)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._info = dataclasses.replace(self._info, device_type=self._info.name)

    @plugins.hookimpl
    def trinity_torch_compile_support(self) -> CompileSupport:
        return CompileSupport(False, "inductor has no driver for this device")


def plan(overrides: dict | None = None) -> RunPlan:
    """A plan of the tests' base config with dotted ``overrides``."""
    return make_plan(overrides or {})


NPU = load_plugin(NoCompile("npu", 100, key="NPU"), expected_name="npu")
CPU = load_plugin(cpu, expected_name="cpu")
VLLM = "explorer.rollout_model"


def test_npu_layout_gives_the_trainer_what_the_engines_leave_and_resolves_online_to_its_collective() -> None:
    run = plan({f"{VLLM}.engine_num": 2, f"{VLLM}.tensor_parallel_size": 2, "cluster.gpu_per_node": 8})
    layout = resolve_layout(run, NPU, {"NPU": 8, "CPU": 64})
    assert layout.resource_key == "NPU" and layout.engines == 2 and layout.trainers == 4
    assert layout.engine_type == "vllm"  # auto on an accelerator, as upstream's default
    assert str(layout.sync_method) == NPU.info.collective_backend  # upstream's "nccl" means online
    assert layout.use_torch_compile is False


def test_auto_engine_is_hf_on_a_cpu_backed_device_with_its_own_key() -> None:
    cpu_backed = load_plugin(plugins.FakeAccel("zeta", 100, key="ZETA"), expected_name="zeta")
    layout = resolve_layout(plan({"cluster.gpu_per_node": 2}), cpu_backed, {"ZETA": 2, "CPU": 8})
    assert layout.engine_type == "hf" and layout.resource_key == "ZETA" and layout.trainers == 1


def test_train_mode_gives_the_trainer_every_device() -> None:
    run = plan({"mode": "train", "cluster.gpu_per_node": 8, "buffer.trainer_input.experience_buffer":
                {"name": "b", "storage_type": "sql"}})
    layout = resolve_layout(run, NPU, {"NPU": 8, "CPU": 64})
    assert layout.engines == 0 and layout.trainers == 8


def test_too_many_devices_is_refused_with_what_exists() -> None:
    run = plan({f"{VLLM}.engine_num": 4, f"{VLLM}.tensor_parallel_size": 2, "cluster.node_num": 2,
                "cluster.gpu_per_node": 8})
    with pytest.raises(ConfigError, match=r"asks for 16 NPU .* but the Ray cluster has 8"):
        resolve_layout(run, NPU, {"NPU": 8, "CPU": 64})


def test_no_device_left_for_the_trainer_is_refused() -> None:
    run = plan({f"{VLLM}.engine_num": 8, "cluster.gpu_per_node": 8})
    with pytest.raises(ConfigError, match=r"the explorer takes 8 .* none is left for the trainer"):
        resolve_layout(run, NPU, {"NPU": 16, "CPU": 64})


def test_a_trainer_of_a_part_of_a_node_beyond_one_node_is_refused_as_upstream_does() -> None:
    run = plan({f"{VLLM}.engine_num": 1, f"{VLLM}.tensor_parallel_size": 4, "cluster.node_num": 2,
                "cluster.gpu_per_node": 8})
    with pytest.raises(ConfigError, match="the trainer gets 12 devices, which is not a whole number of nodes of 8"):
        resolve_layout(run, NPU, {"NPU": 16, "CPU": 64})


def test_tensor_parallel_must_fit_a_node() -> None:
    run = plan({f"{VLLM}.engine_type": "vllm", f"{VLLM}.tensor_parallel_size": 16, "cluster.node_num": 4,
                "cluster.gpu_per_node": 8})
    with pytest.raises(ConfigError, match="an engine must fit on one node"):
        resolve_layout(run, NPU, {"NPU": 32, "CPU": 64})


def test_unset_compile_follows_the_backends_advice_and_an_explicit_value_wins() -> None:
    default = resolve_layout(plan({"cluster.gpu_per_node": 3, "trainer.use_torch_compile": None}), CPU, {"CPU": 4})
    assert default.use_torch_compile is False, "the CPU backend supports compile but advises against it"
    assert default.compile_source.startswith("off, the cpu backend's default: off unless asked")
    assert any(line.startswith("torch.compile off, the cpu backend's default") for line in default.describe())
    asked = resolve_layout(plan({"cluster.gpu_per_node": 3, "trainer.use_torch_compile": True}), CPU, {"CPU": 4})
    assert asked.use_torch_compile is True and asked.compile_source == "on, trainer.use_torch_compile: true"
    accel = load_plugin(plugins.FakeAccel("zeta", 100, key="ZETA"), expected_name="zeta")
    supported = resolve_layout(plan({"cluster.gpu_per_node": 2, "trainer.use_torch_compile": None}), accel,
                               {"ZETA": 2, "CPU": 8})
    assert supported.use_torch_compile is True and supported.compile_source.startswith("on, the zeta backend")
    assert CompileSupport(True).on_by_default and not CompileSupport(True, advised=False).on_by_default
    assert not CompileSupport(False, advised=True).on_by_default, "never on where it does not work"


def test_explicit_compile_refused_with_the_backends_reason() -> None:
    run = plan({"trainer.use_torch_compile": True, "cluster.gpu_per_node": 8})
    with pytest.raises(ConfigError, match="use_torch_compile: true is not supported on the npu backend: inductor"):
        resolve_layout(run, NPU, {"NPU": 8, "CPU": 8})


def test_another_devices_collective_is_refused_but_upstreams_nccl_means_online() -> None:
    with pytest.raises(ConfigError, match=r"synchronizer\.sync_method: .* collective is 'gloo'"):
        resolve_layout(plan({"synchronizer.sync_method": "hccl", "cluster.gpu_per_node": 8}), CPU, {"CPU": 8})
    layout = resolve_layout(plan({"synchronizer.sync_method": "nccl"}), CPU, {"CPU": 8})
    assert str(layout.sync_method) == "gloo"


def test_cpu_backend_counts_cpu_bundles_and_takes_vllm_when_asked() -> None:
    layout = resolve_layout(plan({"cluster.gpu_per_node": 3, "trainer.use_torch_compile": None}), CPU, {"CPU": 4})
    assert layout.resource_key is None and str(layout.sync_method) == "gloo"
    assert layout.engine_type == "hf" and layout.engines == 1 and layout.trainers == 2
    with pytest.raises(ConfigError, match=r"3 bundle\(s\) x 1 CPU = 3 CPUs asked but the Ray cluster has 2"):
        resolve_layout(plan({"cluster.gpu_per_node": 3}), CPU, {"CPU": 2})
    chosen = resolve_layout(plan({f"{VLLM}.engine_type": "vllm"}), CPU, {"CPU": 8})  # vLLM's CPU build runs here
    assert chosen.engine_type == "vllm" and chosen.resource_key is None and chosen.engines == 1


def test_devices_per_node_detected_from_the_cluster_when_left_at_zero() -> None:
    run = plan({"cluster.node_num": 0, "cluster.gpu_per_node": 0, f"{VLLM}.engine_num": 8})
    nodes = [{"CPU": 4}, {"NPU": 8, "CPU": 32}, {"NPU": 8, "CPU": 32}]  # a CPU head and two NPU nodes
    layout = resolve_layout(run, NPU, {"NPU": 16, "CPU": 68}, nodes)
    assert (layout.nodes, layout.devices_per_node, layout.trainers) == (2, 8, 8)
    assert layout.source == "detected from the cluster"
    cpu_run = plan({"cluster.node_num": 0, "cluster.gpu_per_node": 0})
    cpu_layout = resolve_layout(cpu_run, CPU, {"CPU": 4}, [{"CPU": 4}])
    assert (cpu_layout.devices_per_node, cpu_layout.engines, cpu_layout.trainers) == (2, 1, 1)


def test_bundles_and_strategy() -> None:
    assert bundles(2, "NPU", 4) == [{"NPU": 1.0, "CPU": 4.0}, {"NPU": 1.0, "CPU": 4.0}]
    assert bundles(1, None, 2) == [{"CPU": 2.0}]
    assert strategy(8, 8, "NPU") == "STRICT_PACK" and strategy(16, 8, "NPU") == "PACK"
    assert strategy(16, 8, None) == "STRICT_PACK"


def test_engine_bundles_carry_their_tensor_parallel_devices() -> None:
    assert bundles(1, "NPU", 2, devices=4) == [{"NPU": 4.0, "CPU": 2.0}]


def test_hf_engine_refuses_tensor_parallelism() -> None:
    run = plan({f"{VLLM}.engine_type": "hf", f"{VLLM}.tensor_parallel_size": 2, "cluster.gpu_per_node": 8})
    with pytest.raises(ConfigError, match=r"the hf engine runs on one device.*engine_type: vllm"):
        resolve_layout(run, NPU, {"NPU": 8, "CPU": 8})


def test_groups_that_no_node_packing_can_hold_are_refused_before_any_actor_starts() -> None:
    # 2 x 8 NPUs: three tp-3 engines leave 7 trainer ranks (one node); two engines fill the other, a third fits nowhere
    run = plan({f"{VLLM}.engine_num": 3, f"{VLLM}.tensor_parallel_size": 3, "cluster.node_num": 2,
                "cluster.gpu_per_node": 8})
    with pytest.raises(ConfigError, match=r"engine 2 \(3 devices; 3 engines in all\) cannot be placed on 2 node"):
        resolve_layout(run, NPU, {"NPU": 16, "CPU": 64})
    fits = plan({f"{VLLM}.engine_num": 2, f"{VLLM}.tensor_parallel_size": 4, "cluster.node_num": 2,
                 "cluster.gpu_per_node": 8})
    assert resolve_layout(fits, NPU, {"NPU": 16, "CPU": 64}).engines == 2


def test_packing_counts_spread_trainers_and_best_fit_engines() -> None:
    from trinity.common.config.validator import unpackable_groups

    assert unpackable_groups(12, 1, 4, 2, 8) == ""  # 12 ranks spread 8 + 4, the engine takes the other 4
    assert unpackable_groups(12, 2, 4, 2, 8).startswith("engine 1")
    assert unpackable_groups(0, 4, 4, 2, 8) == ""
    assert unpackable_groups(2, 3, 2, 1, 8) == ""
    assert unpackable_groups(20, 0, 1, 2, 8) == "the trainer's 20 ranks"


def test_devices_are_checked_node_by_node_against_what_each_node_offers() -> None:
    """8 asked per node passes a total of 8 offered, but no node has 8: the keys that fix it are named."""
    accel = load_plugin(plugins.FakeAccel("zeta", 100, key="ZETA"), expected_name="zeta")
    nodes = [{"ZETA": 4.0, "CPU": 16.0}, {"ZETA": 4.0, "CPU": 16.0}]
    total = {"ZETA": 8.0, "CPU": 32.0}
    with pytest.raises(ConfigError, match=r"^cluster\.gpu_per_node: 8 ZETA per node, but no node of the Ray cluster "
                                          r"offers that many \(its nodes offer 4, 4\); set cluster\.gpu_per_node: 4"):
        resolve_layout(plan({"cluster.node_num": 1, "cluster.gpu_per_node": 8}), accel, total, nodes)
    with pytest.raises(ConfigError, match=r"^cluster\.node_num: 3 node\(s\) of 1 ZETA, but the Ray cluster has 2 such"):
        resolve_layout(plan({"cluster.node_num": 3, "cluster.gpu_per_node": 1}), accel, total, nodes)
    fits = resolve_layout(plan({"cluster.node_num": 2, "cluster.gpu_per_node": 4, f"{VLLM}.engine_type": "vllm",
                                f"{VLLM}.tensor_parallel_size": 4}), accel, total, nodes)
    assert (fits.nodes, fits.engines, fits.trainers) == (2, 1, 4)
    detected = resolve_layout(plan({"cluster.node_num": 0, "cluster.gpu_per_node": 0, f"{VLLM}.engine_type": "vllm",
                                    f"{VLLM}.tensor_parallel_size": 4}), accel, total, nodes)
    assert (detected.nodes, detected.devices_per_node) == (2, 4)


# --- mode colocate: one engine and one trainer rank share one device ---------------------------------------


def test_colocate_shares_one_device_and_hands_weights_over_in_memory() -> None:
    layout = resolve_layout(plan({"mode": "colocate", "cluster.gpu_per_node": 1}), NPU, {"NPU": 1, "CPU": 8})
    assert layout.colocated and (layout.engines, layout.trainers, layout.devices_per_engine) == (1, 1, 1)
    assert layout.sync_method.kind == "memory"  # upstream's nccl cannot run between two processes on one device
    assert any("handed over in memory (Ray's object store)" in note for note in layout.notes)
    assert layout.chose_colocate(plan({"mode": "colocate"})) is None  # asked for: nothing to announce
    assert "1 vllm engine and 1 trainer rank sharing one NPU (colocate)" in layout.describe()
    by_file = plan({"mode": "colocate", "cluster.gpu_per_node": 1, "synchronizer.sync_method": "checkpoint"})
    kept = resolve_layout(by_file, NPU, {"NPU": 1, "CPU": 8})
    assert kept.sync_method.kind == "checkpoint" and not kept.notes


def test_colocate_on_the_cpu_defaults_to_one_bundle() -> None:
    layout = resolve_layout(plan({"mode": "colocate", "cluster.node_num": 0, "cluster.gpu_per_node": 0}), CPU,
                            {"CPU": 2}, [{"CPU": 2}])
    assert layout.colocated and layout.devices_per_node == 1 and layout.trainers == 1
    assert layout.sync_method.kind == "shared"  # host memory: the engine maps the file the trainer rank writes
    assert any("through a shared-memory file the engine maps" in note for note in layout.notes)
    by_store = resolve_layout(plan({"mode": "colocate", "cluster.gpu_per_node": 1, "synchronizer.sync_method":
                                    "memory"}), CPU, {"CPU": 2})
    assert by_store.sync_method.kind == "shared"


@pytest.mark.parametrize(("overrides", "message"), [
    ({f"{VLLM}.engine_num": 2}, r"engine_num is 2; set 1"),
    ({f"{VLLM}.tensor_parallel_size": 2}, r"tensor_parallel_size is 2; set 1"),
    ({"explorer.auxiliary_models": [{"model_path": "judge"}]}, r"auxiliary_models need devices of their own"),
    ({"cluster.gpu_per_node": 2}, r"the cluster is 1 node\(s\) x 2 NPU = 2; set cluster.node_num: 1 and "
                                  r"cluster.gpu_per_node: 1, or use mode: both"),
])
def test_colocate_refuses_what_one_device_cannot_run(overrides: dict, message: str) -> None:
    run = plan({"mode": "colocate", "cluster.gpu_per_node": 1, **overrides})
    with pytest.raises(ConfigError, match=message):
        resolve_layout(run, NPU, {"NPU": 2, "CPU": 8})


def test_both_on_one_device_runs_colocated_and_says_so() -> None:
    run = plan({"cluster.node_num": 0, "cluster.gpu_per_node": 0})
    layout = resolve_layout(run, NPU, {"NPU": 1, "CPU": 8}, [{"NPU": 1, "CPU": 8}])
    assert layout.colocated and layout.trainers == 1 and layout.sync_method.kind == "memory"
    line = layout.chose_colocate(run)
    assert line is not None and line.startswith("mode both on one NPU (detected from the cluster): running as mode "
                                                "colocate")
    two = resolve_layout(run, NPU, {"NPU": 2, "CPU": 8}, [{"NPU": 2, "CPU": 8}])
    assert not two.colocated and two.chose_colocate(run) is None


def test_both_on_one_device_with_two_engines_is_refused_naming_colocate() -> None:
    run = plan({"cluster.gpu_per_node": 1, f"{VLLM}.engine_num": 2})
    with pytest.raises(ConfigError, match=r"mode both would run as colocate \(the cluster offers one NPU\), but "
                                          r"that runs one engine on it: .*engine_num is 2; set 1; or give the "
                                          r"cluster more devices"):
        resolve_layout(run, NPU, {"NPU": 1, "CPU": 8})


def test_a_colocated_vllm_engine_takes_at_most_a_quarter_of_the_device_as_upstream() -> None:
    run = plan({"mode": "colocate", "cluster.gpu_per_node": 1, f"{VLLM}.gpu_memory_utilization": 0.9})
    layout = resolve_layout(run, NPU, {"NPU": 1, "CPU": 8})
    capped = colocated_plan(run, layout)
    assert capped.explorer.rollout.gpu_memory_utilization == COLOCATED_VLLM_MEMORY
    assert any("lowered to 0.25 in mode colocate" in note for note in capped.notes)
    assert capped.explorer.rollout.sleep_mode, "serial: the engine sleeps while the trainer steps"
    ahead = plan({"mode": "colocate", "cluster.gpu_per_node": 1, "synchronizer.sync_offset": 1})
    awake = colocated_plan(ahead, resolve_layout(ahead, NPU, {"NPU": 1, "CPU": 8}))
    assert not awake.explorer.rollout.sleep_mode and "stays awake" in awake.notes[-1]
    both = plan({f"{VLLM}.gpu_memory_utilization": 0.9})
    assert colocated_plan(both, resolve_layout(both, NPU, {"NPU": 2, "CPU": 8})) is both
