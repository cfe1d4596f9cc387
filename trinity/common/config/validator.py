"""Checks of a config against the selected device backend and the Ray cluster's resources.

Every device decision comes from the backend: the Ray resource key devices are
counted by, whether ``torch.compile`` is allowed, which collective ``online``
means. Errors are :class:`ConfigError` naming the dotted path, what was asked
and what exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trinity.common.config.loader import ConfigError
from trinity.common.config.schema import Config
from trinity.common.constants import SyncMethod, SyncMethodError
from trinity.device.backend import Backend


@dataclass(frozen=True)
class Layout:
    """How the run's processes are laid out on the cluster."""

    #: Ray resource one device is counted by; None on the CPU backend.
    resource_key: str | None
    #: Devices (or CPU bundles) each engine takes: tensor_parallel_size, one bundle each.
    devices_per_engine: int
    #: Engines.
    engines: int
    #: Trainer processes.
    trainers: int
    #: CPUs reserved per bundle.
    cpus_per_bundle: float
    #: The resolved sync method.
    sync_method: SyncMethod
    #: Whether the trainer compiles the model.
    use_torch_compile: bool


def resolve_layout(config: Config, backend: Backend, cluster_resources: Mapping[str, float]) -> Layout:
    """Return the layout for ``config`` on ``backend`` given ``ray.cluster_resources()``; raise ConfigError."""
    info = backend.info
    try:
        sync_method = SyncMethod.parse(config.synchronizer.sync_method, collective=info.collective_backend)
    except SyncMethodError as exc:
        raise ConfigError(f"synchronizer.sync_method: {exc}") from None

    support = backend.compile_support()
    use_compile = config.trainer.use_torch_compile
    if use_compile is None:
        use_compile = support.supported
    elif use_compile and not support.supported:
        raise ConfigError(
            f"trainer.use_torch_compile: true is not supported on the {info.name} backend: {support.reason}; "
            "set it to false or remove it"
        )

    if config.explorer.engine_type == "vllm" and info.ray_resource_key is None:
        raise ConfigError(
            f"explorer.engine_type: vllm needs an accelerator, but the selected device backend is {info.name!r}; "
            "use engine_type: hf on this machine"
        )

    if config.explorer.engine_type == "hf" and config.explorer.tensor_parallel_size > 1:
        raise ConfigError(
            f"explorer.tensor_parallel_size: {config.explorer.tensor_parallel_size} asked, but the hf engine runs "
            "on one device; set it to 1, or use engine_type: vllm for tensor parallelism"
        )

    engines = config.explorer.engine_num if config.mode in ("both", "explore", "bench") else 0
    trainers = config.trainer.trainer_num if config.mode in ("both", "train") else 0
    tp = config.explorer.tensor_parallel_size
    key = info.ray_resource_key
    cpus = config.cluster.cpus_per_bundle
    if key is not None:
        asked = engines * tp + trainers
        have = float(cluster_resources.get(key, 0))
        per_node = config.cluster.devices_per_node
        declared = config.cluster.node_num * per_node
        if tp > per_node:
            raise ConfigError(
                f"explorer.tensor_parallel_size: {tp} devices per engine but cluster.devices_per_node is {per_node}; "
                "an engine must fit on one node"
            )
        if asked > declared:
            raise ConfigError(
                f"cluster: the run asks for {asked} {key} ({engines} engine(s) x {tp} + {trainers} trainer(s)) but "
                f"cluster.node_num x devices_per_node = {declared}; lower explorer.engine_num/trainer.trainer_num "
                "or raise the cluster size"
            )
        if asked > have:
            raise ConfigError(
                f"cluster: the run asks for {asked} {key} but the Ray cluster has {have:g}; "
                f"check `ray status`, or lower explorer.engine_num/trainer.trainer_num"
            )
        unplaced = unpackable_groups(trainers, engines, tp, config.cluster.node_num, per_node)
        if unplaced:
            raise ConfigError(
                f"cluster: {unplaced} cannot be placed on {config.cluster.node_num} node(s) x {per_node} {key}: "
                f"the trainer ranks (when they fit a node) and each engine's {tp} device(s) must each share one "
                "node; change explorer.engine_num, explorer.tensor_parallel_size or trainer.trainer_num"
            )
    bundles = engines * tp + trainers
    have_cpus = float(cluster_resources.get("CPU", 0))
    if bundles * cpus > have_cpus:
        raise ConfigError(
            f"cluster.cpus_per_bundle: {bundles} bundle(s) x {cpus:g} CPU = {bundles * cpus:g} CPUs asked but the "
            f"Ray cluster has {have_cpus:g}; lower cluster.cpus_per_bundle or the number of engines/trainers"
        )
    return Layout(
        resource_key=key,
        devices_per_engine=tp,
        engines=engines,
        trainers=trainers,
        cpus_per_bundle=cpus,
        sync_method=sync_method,
        use_torch_compile=bool(use_compile),
    )


def unpackable_groups(trainers: int, engines: int, tp: int, nodes: int, per_node: int) -> str:
    """Return what does not fit when the run's placement groups are packed onto the nodes, or ``""``.

    The trainer group needs one node when it fits on one (STRICT_PACK) and
    spreads otherwise; each engine needs ``tp`` devices on one node. Groups
    are packed largest first, each onto the fullest node that still takes it
    (best fit), which finds a packing whenever one of these sizes exists in
    practice.
    """
    free = [per_node] * nodes
    if trainers:
        if trainers <= per_node:
            free[0] -= trainers
        else:
            remaining = trainers
            for i in range(nodes):
                take = min(free[i], remaining)
                free[i] -= take
                remaining -= take
            if remaining:
                return f"the trainer's {trainers} ranks"
    for index in range(engines):
        fitting = [i for i in range(nodes) if free[i] >= tp]
        if not fitting:
            return f"engine {index} ({tp} devices; {engines} engines in all)"
        best = min(fitting, key=lambda i: free[i])
        free[best] -= tp
    return ""
