"""The device layout of a run: a plan checked against the selected device backend and the Ray cluster.

Every device decision comes from the backend: the Ray resource key devices
are counted by, whether ``torch.compile`` is allowed, which model dtypes
the device computes in, which collective
``online`` (upstream's ``nccl``) means, and whether ``engine_type: auto`` is
vLLM (an accelerator) or hf (tensors on the host CPU). As upstream does, the trainer gets the
devices the engines leave: ``node_num x gpu_per_node - engines x tp``
(all of them in mode train). Errors are :class:`ConfigError` naming the
dotted path, what was asked and what exists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trinity.common.config.loader import ConfigError
from trinity.common.config.plan.run import RunPlan
from trinity.common.config.precision import resolve_precision
from trinity.common.constants import SyncMethod, SyncMethodError
from trinity.device.backend import Backend
from trinity.device.collectives import UPSTREAM_ONLINE_SYNC_METHOD


@dataclass(frozen=True)
class Layout:
    """How the run's processes are laid out on the cluster."""

    #: Ray resource one device is counted by; None on the CPU backend.
    resource_key: str | None
    #: The rollout engine type: ``vllm`` or ``hf``.
    engine_type: str
    #: Devices (or CPU bundles) each engine takes: tensor_parallel_size, one bundle each.
    devices_per_engine: int
    #: Rollout engines.
    engines: int
    #: Trainer processes (data-parallel ranks).
    trainers: int
    #: Nodes of the layout.
    nodes: int
    #: Devices (or CPU bundles) per node.
    devices_per_node: int
    #: CPUs reserved per bundle.
    cpus_per_bundle: float
    #: The resolved sync method.
    sync_method: SyncMethod
    #: Whether the trainer compiles the model.
    use_torch_compile: bool
    #: How ``devices_per_node`` / ``nodes`` were decided (for the plan and the log).
    source: str = "config"
    #: Whether and why the trainer compiles (``on, trainer.use_torch_compile: true``, ``off, the cpu backend's ...``).
    compile_source: str = ""
    #: Mode colocate (asked for, or chosen for ``both`` on one device): the one engine shares the one trainer
    #: rank's device instead of taking its own.
    colocated: bool = False
    #: Choices the layout made on the user's behalf, one line each (the run logs them, the dry run shows them).
    notes: tuple[str, ...] = ()

    def chose_colocate(self, plan: RunPlan) -> str | None:
        """Return the line telling that ``plan``'s mode both runs colocated on one device, or None when it does not."""
        if not self.colocated or plan.mode != "both":
            return None
        unit = self.resource_key or "CPU bundle"
        return (f"mode both on one {unit} ({self.source}): running as mode colocate, the engine sharing the trainer "
                "rank's device (as upstream does on a one-device cluster); give the run 2 devices for both")

    def describe(self) -> list[str]:
        """Plain lines for ``trinity run --dry-run``."""
        unit = self.resource_key or "CPU bundle"
        lines = [f"{self.nodes} node(s) x {self.devices_per_node} {unit} ({self.source})"]
        if self.engines and self.engine_type == "external":
            lines.append(f"{self.engines} client(s) of the external endpoint (no device)")
        elif self.colocated:
            lines.append(f"1 {self.engine_type} engine and 1 trainer rank sharing one {unit} (colocate)")
        elif self.engines:
            lines.append(f"{self.engines} {self.engine_type} engine(s) x {self.devices_per_engine} {unit}")
        if self.trainers and not self.colocated:
            lines.append(f"{self.trainers} trainer rank(s), one {unit} each")
        if self.trainers and self.compile_source:
            lines.append(f"torch.compile {self.compile_source}")
        lines.append(f"{self.cpus_per_bundle:g} CPU(s) reserved per bundle")
        return lines


def node_devices(nodes: Sequence[Mapping[str, float]], key: str | None) -> tuple[int, int]:
    """Return ``(alive nodes, devices per node)`` of a cluster from each node's resources (0 devices: none)."""
    if not nodes:
        return 0, 0
    if key is None:
        return len(nodes), 0
    counts = [int(n.get(key, 0)) for n in nodes]
    with_devices = [c for c in counts if c > 0]
    return (len(with_devices) or len(nodes)), (max(with_devices) if with_devices else 0)


def resolve_layout(plan: RunPlan, backend: Backend, cluster_resources: Mapping[str, float],
                   nodes: Sequence[Mapping[str, float]] = ()) -> Layout:
    """Return the layout of ``plan`` on ``backend`` given ``ray.cluster_resources()`` and each alive node's resources.

    ``nodes`` (``[node["Resources"] for node in ray.nodes()]``) decides
    ``node_num`` / ``gpu_per_node`` left at 0; without it the local probe's
    device count stands in (dry runs). Raises ConfigError naming the config file.
    """
    from trinity.common.config.loader import in_file

    try:
        return _layout(plan, backend, cluster_resources, nodes)
    except ConfigError as exc:
        raise in_file(plan.config, exc) from None


def _layout(plan: RunPlan, backend: Backend, cluster_resources: Mapping[str, float],
            nodes: Sequence[Mapping[str, float]]) -> Layout:
    info = backend.info
    method = plan.sync.method
    try:
        name = "online" if method == UPSTREAM_ONLINE_SYNC_METHOD else method
        sync_method = SyncMethod.parse(name, collective=info.collective_backend)
    except SyncMethodError as exc:
        raise ConfigError(f"synchronizer.sync_method: {exc}") from None

    support = backend.compile_support()
    use_compile = plan.trainer.use_torch_compile
    if use_compile is None:
        use_compile = support.on_by_default
        why = f"the {info.name} backend's default" + (f": {support.reason}" if support.reason else "")
        compile_source = f"{'on' if use_compile else 'off'}, {why}"
    elif use_compile and not support.supported:
        raise ConfigError(
            f"trainer.use_torch_compile: true is not supported on the {info.name} backend: {support.reason}; "
            "set it to false or remove it"
        )
    else:
        compile_source = f"{'on' if use_compile else 'off'}, trainer.use_torch_compile: {str(use_compile).lower()}"

    resolve_precision(plan, backend)  # a dtype the device cannot compute in is refused here, with its reason

    key = info.ray_resource_key
    rollout = plan.explorer.rollout
    engine_type = rollout.engine_type
    external = rollout.external is not None  # an endpoint outside the run: its engines take no device
    if engine_type == "auto":
        engine_type = auto_engine_type(backend)
    tp = rollout.tensor_parallel_size
    if engine_type == "hf" and tp > 1:
        raise ConfigError(
            f"explorer.rollout_model.tensor_parallel_size: {tp} asked, but the hf engine runs on one device; set it "
            "to 1, or use engine_type: vllm for tensor parallelism"
        )
    if external:
        tp = 0

    engines = rollout.engine_num if plan.uses_explorer else 0
    auxiliary_devices = sum(a.devices for a in plan.explorer.auxiliary) if plan.uses_explorer else 0
    explorer_devices = (0 if external else engines * tp) + auxiliary_devices
    asked_colocate = plan.mode == "colocate"
    if asked_colocate:
        _check_colocate(plan, external)
        explorer_devices = 0  # the engine shares the trainer rank's device
    node_num, per_node, source = _cluster_size(plan, backend, nodes, key, explorer_devices)
    total = node_num * per_node
    cpus = plan.cluster.cpus_per_bundle
    notes: list[str] = []
    colocated = asked_colocate
    unit = key or "CPU bundle"
    if asked_colocate and total != 1:
        raise ConfigError(
            f"mode: colocate shares one device between the engine and the trainer, but the cluster is {node_num} "
            f"node(s) x {per_node} {unit} = {total}; set cluster.node_num: 1 and cluster.gpu_per_node: 1, or use "
            "mode: both"
        )
    if plan.mode == "both" and total == 1 and not external:
        _check_colocate(plan, external, chosen=f"the cluster offers one {unit}")
        colocated = True
        explorer_devices = 0
    if colocated and sync_method.kind in ("collective", "memory"):
        # host memory both processes can map: the engine reads the trainer's writes, nothing is sent
        shared = info.device_type == "cpu" and engine_type == "hf"
        how = "through a shared-memory file the engine maps" if shared else "in memory (Ray's object store)"
        if sync_method.kind == "collective" or shared:
            notes.append(f"synchronizer.sync_method: {method}: colocated, the weights are handed over {how}, not "
                         "broadcast (upstream uses memory)")
        sync_method = SyncMethod("shared") if shared else SyncMethod("memory")
    if plan.uses_trainer:
        trainers = total - explorer_devices if plan.mode in ("both", "colocate") else total
        if trainers < 1:
            raise ConfigError(
                f"cluster: {node_num} node(s) x {per_node} device(s) = {total}, but the explorer takes "
                f"{explorer_devices} ({engines} engine(s) x {tp}"
                f"{' + auxiliary models' if plan.explorer.auxiliary else ''}): none is left for the trainer; raise "
                "cluster.gpu_per_node or lower explorer.rollout_model.engine_num"
            )
        sequence_parallel = plan.trainer.ulysses_size if plan.trainer is not None else 1
        if trainers % sequence_parallel:
            raise ConfigError(
                f"trainer.ulysses_sequence_parallel_size: {sequence_parallel} does not divide the trainer's "
                f"{trainers} device(s); each group of that many ranks shares its sequences: make it a divisor of "
                f"{trainers}, or change cluster.gpu_per_node / the explorer's devices"
            )
        if trainers > per_node and trainers % per_node:
            raise ConfigError(
                f"cluster: the trainer gets {trainers} devices, which is not a whole number of nodes of {per_node}; "
                "change explorer.rollout_model.engine_num or tensor_parallel_size"
            )
    else:
        trainers = 0
        if explorer_devices > total:
            raise ConfigError(
                f"cluster: the explorer needs {explorer_devices} device(s) but node_num x gpu_per_node = {total}; "
                "raise cluster.gpu_per_node or lower explorer.rollout_model.engine_num"
            )
    if tp > per_node:
        raise ConfigError(
            f"explorer.rollout_model.tensor_parallel_size: {tp} devices per engine but there are {per_node} per "
            "node; an engine must fit on one node"
        )
    if nodes or cluster_resources:
        _check_cluster(plan, key, nodes, engines=0 if colocated else engines, tp=tp, trainers=trainers,
                       node_num=node_num, per_node=per_node, cluster_resources=cluster_resources,
                       explorer_devices=explorer_devices)
    return Layout(
        resource_key=key, engine_type=engine_type, devices_per_engine=tp, engines=engines, trainers=trainers,
        nodes=node_num, devices_per_node=per_node, cpus_per_bundle=cpus, sync_method=sync_method,
        use_torch_compile=bool(use_compile), source=source, compile_source=compile_source, colocated=colocated,
        notes=tuple(notes),
    )


#: The share of its device a colocated vLLM engine may take at most (upstream's rule: the trainer needs the rest).
COLOCATED_VLLM_MEMORY = 0.25


def _check_colocate(plan: RunPlan, external: bool, chosen: str = "") -> None:
    """Refuse what one shared device cannot run (upstream's rules for mode colocate); raises ConfigError."""
    why = f"mode both would run as colocate ({chosen}), but " if chosen else "mode: colocate runs "
    rollout = plan.explorer.rollout
    problems = []
    if external:
        problems.append("an external model is not served by the run; use mode: bench")
    if rollout.engine_num != 1:
        problems.append(f"explorer.rollout_model.engine_num is {rollout.engine_num}; set 1")
    if rollout.tensor_parallel_size != 1:
        problems.append(f"explorer.rollout_model.tensor_parallel_size is {rollout.tensor_parallel_size}; set 1")
    if plan.explorer.auxiliary:
        problems.append("explorer.auxiliary_models need devices of their own; remove them")
    if problems:
        head = why + ("one engine on one device" if not chosen else "that runs one engine on it")
        raise ConfigError(f"{head}: " + "; ".join(problems)
                          + ("" if not chosen else "; or give the cluster more devices (cluster.gpu_per_node)"))


def colocated_plan(plan: RunPlan, layout: Layout) -> RunPlan:
    """Return ``plan`` as a colocated run runs it, with a vLLM engine's settings for sharing the device.

    Its memory share is capped as upstream caps it, and in the serial loop
    (``sync_offset: 0``) it sleeps while the trainer steps (vLLM's sleep
    mode); with the explorer ahead, rollouts overlap training and it stays awake.
    """
    import dataclasses

    rollout = plan.explorer.rollout
    if not layout.colocated or layout.engine_type != "vllm":
        return plan
    notes = list(plan.notes)
    if rollout.gpu_memory_utilization > COLOCATED_VLLM_MEMORY:
        notes.append(f"explorer.rollout_model.gpu_memory_utilization: {rollout.gpu_memory_utilization:g} lowered to "
                     f"{COLOCATED_VLLM_MEMORY:g} in mode colocate: the trainer rank needs the rest of the device")
    serial = plan.sync.offset == 0
    if serial:
        notes.append("mode colocate: the vLLM engine sleeps (its weights in host memory, its KV cache released) "
                     "while the trainer steps, and wakes with the new weights")
    else:
        notes.append(f"mode colocate with synchronizer.sync_offset: {plan.sync.offset}: rollouts overlap training, "
                     "so the vLLM engine stays awake; the device must hold both (sync_offset: 0 lets it sleep)")
    engine = dataclasses.replace(rollout, gpu_memory_utilization=min(rollout.gpu_memory_utilization,
                                                                     COLOCATED_VLLM_MEMORY), sleep_mode=serial)
    return dataclasses.replace(plan, explorer=dataclasses.replace(plan.explorer, rollout=engine), notes=tuple(notes))


def auto_engine_type(backend: Backend) -> str:
    """Return the engine type ``auto`` means on ``backend``: ``vllm`` on an accelerator, ``hf`` otherwise.

    A backend whose tensors live on the host CPU (the built-in one, or a
    vendor's CPU-backed device with its own Ray resource key) gets ``hf``:
    vLLM drives accelerators, not host memory.
    """
    info = backend.info
    return "vllm" if info.ray_resource_key is not None and info.device_type != "cpu" else "hf"


def _cluster_size(plan: RunPlan, backend: Backend, nodes: Sequence[Mapping[str, float]], key: str | None,
                  explorer_devices: int) -> tuple[int, int, str]:
    """Return ``(node_num, devices per node, how they were decided)``."""
    node_num, per_node = plan.cluster.node_num, plan.cluster.devices_per_node
    if node_num and per_node:
        return node_num, per_node, "config"
    found_nodes, found_devices = node_devices(nodes, key)
    if key is None:
        # the CPU backend: a "device" is a bundle of cpus_per_bundle CPUs; by default the explorer's plus one rank
        default = explorer_devices + (1 if plan.uses_trainer else 0)
        return node_num or 1, per_node or default, "config" if per_node else "CPU bundles: engines + one trainer rank"
    if not nodes:
        found_nodes, found_devices = 1, backend.probe().device_count
    if not (node_num or found_nodes) or not (per_node or found_devices):
        raise ConfigError(
            f"cluster: gpu_per_node and node_num are 0 (detect), but no {key} device was found; set them, or check "
            "`ray status` and `trinity backends list`"
        )
    return node_num or found_nodes, per_node or found_devices, "detected from the cluster"


def _check_cluster(plan: RunPlan, key: str | None, nodes: Sequence[Mapping[str, float]], *, engines: int, tp: int,
                   trainers: int, node_num: int, per_node: int, cluster_resources: Mapping[str, float],
                   explorer_devices: int) -> None:
    """Check the layout against what the Ray cluster has, in total and node by node; raises ConfigError."""
    cpus = plan.cluster.cpus_per_bundle
    bundles = explorer_devices + trainers
    if key is not None:
        have = float(cluster_resources.get(key, 0))
        if bundles > have:
            raise ConfigError(
                f"cluster: the run asks for {bundles} {key} ({engines} engine(s) x {tp} + {trainers} trainer rank(s)"
                f"{' + auxiliary models' if plan.explorer.auxiliary else ''}) but the Ray cluster has {have:g}; "
                "check `ray status`, or lower cluster.gpu_per_node / explorer.rollout_model.engine_num"
            )
        offers = sorted((int(n.get(key, 0)) for n in nodes if int(n.get(key, 0)) > 0), reverse=True)
        if offers:
            _check_per_node(key, offers, node_num=node_num, per_node=per_node)
        unplaced = unpackable_groups(trainers, engines, tp, node_num, per_node)
        if unplaced:
            raise ConfigError(
                f"cluster: {unplaced} cannot be placed on {node_num} node(s) x {per_node} {key}: the trainer ranks "
                f"(when they fit a node) and each engine's {tp} device(s) must each share one node; change "
                "explorer.rollout_model.engine_num or tensor_parallel_size, or cluster.gpu_per_node"
            )
    have_cpus = float(cluster_resources.get("CPU", 0))
    if bundles * cpus > have_cpus:
        raise ConfigError(
            f"cluster.cpus_per_bundle: {bundles} bundle(s) x {cpus:g} CPU = {bundles * cpus:g} CPUs asked but the "
            f"Ray cluster has {have_cpus:g}; lower cluster.cpus_per_bundle, cluster.gpu_per_node or the engines"
        )


def _check_per_node(key: str, offers: list[int], *, node_num: int, per_node: int) -> None:
    """Refuse ``gpu_per_node`` / ``node_num`` beyond what the cluster's nodes offer (each node's ``key`` count)."""
    listing = ", ".join(str(o) for o in offers)
    if per_node > offers[0]:
        raise ConfigError(
            f"cluster.gpu_per_node: {per_node} {key} per node, but no node of the Ray cluster offers that many (its "
            f"nodes offer {listing}); set cluster.gpu_per_node: {offers[0]} (or 0 to detect it), and if the run then "
            "needs more devices than that, lower explorer.rollout_model.engine_num or tensor_parallel_size"
        )
    enough = [o for o in offers if o >= per_node]
    if node_num > len(enough):
        raise ConfigError(
            f"cluster.node_num: {node_num} node(s) of {per_node} {key}, but the Ray cluster has {len(enough)} such "
            f"node(s) (its nodes offer {listing}); set cluster.node_num: {len(enough)} (or 0 to detect it), or lower "
            "cluster.gpu_per_node"
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
