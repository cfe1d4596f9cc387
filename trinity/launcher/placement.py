"""Placement groups of a run: the trainer ranks packed together, each engine on its own devices.

In mode colocate the one engine has no group: it joins the trainer rank's
bundle, and each of the two asks half of the bundle's device, so Ray hands both
the same device (and sets its visibility for both, as for any device share).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trinity.common.config.plan.run import RunPlan
from trinity.common.config.validator import Layout
from trinity.common.models.placement import create_placement_group

#: The share of the one device the trainer rank and the engine each ask in mode colocate.
COLOCATED_SHARE = 0.5


@dataclass
class Placement:
    """The placement groups of a run and the actor options that put actors in them."""

    trainer_group: Any = None
    engine_groups: list[Any] = field(default_factory=list)
    #: Each auxiliary model's engine groups, by its name.
    auxiliary_groups: dict[str, list[Any]] = field(default_factory=dict)
    #: Mode colocate: the engine shares the trainer rank's bundle and device.
    colocated: bool = False

    @property
    def trainer_device_share(self) -> float:
        """The share of its device each trainer rank asks (half of it when colocated with the engine)."""
        return COLOCATED_SHARE if self.colocated else 1.0

    def engine_options(self, index: int) -> dict[str, Any]:
        """Ray actor options placing rollout engine ``index`` in its group (none for an external endpoint's)."""
        if self.colocated:
            from trinity import device

            return {**_in_group(self.trainer_group), "num_cpus": 0, **device.ray_actor_resources(COLOCATED_SHARE)}
        return _in_group(self.engine_groups[index]) if self.engine_groups else {}

    def auxiliary_options(self, name: str) -> Callable[[int], dict[str, Any]]:
        """Return ``options_for(index)`` placing the engines of auxiliary model ``name`` in their groups."""
        groups = self.auxiliary_groups[name]
        return lambda index: _in_group(groups[index])

    def remove(self) -> None:
        """Release every group."""
        import ray

        for group in [self.trainer_group, *self.engine_groups, *(g for gs in self.auxiliary_groups.values()
                                                                 for g in gs)]:
            if group is not None:
                ray.util.remove_placement_group(group)


def _in_group(group: Any) -> dict[str, Any]:
    """Ray options putting an engine on bundle 0 of ``group`` (its own workers, vLLM's executor, in the same group)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return {"scheduling_strategy": PlacementGroupSchedulingStrategy(
        placement_group=group, placement_group_bundle_index=0, placement_group_capture_child_tasks=True)}


def place(plan: RunPlan, layout: Layout) -> Placement:
    """Reserve the groups of the actors the run's mode starts, and return them (every mode calls this first).

    The trainer's ranks (modes both and train) get one group: one device +
    CPUs per rank, STRICT_PACK when they fit a node. Each rollout engine and
    each auxiliary model's engine (modes both, explore and bench) gets a group
    of ``tensor_parallel_size`` bundles of one device each, packed on one node
    (vLLM's Ray executor starts one worker per bundle). Bundles ask the
    backend's Ray resource key, or CPUs only on the CPU backend. A group that
    cannot be placed raises :class:`~trinity.common.models.placement.PlacementError`
    after the groups reserved before it are removed; the caller removes the
    rest with :meth:`Placement.remove` when its run ends, however it ends.
    """
    placement = Placement(colocated=layout.colocated)
    per_node = layout.devices_per_node
    prefix = f"{plan.ray_namespace}/{plan.run_dir.name}"
    try:
        if layout.trainers:
            placement.trainer_group = create_placement_group(
                layout.trainers, layout.resource_key, layout.cpus_per_bundle, per_node,
                name=f"{prefix}/trainer",
            )
        for index in range(layout.engines if layout.engine_type != "external" and not layout.colocated else 0):
            placement.engine_groups.append(create_placement_group(
                layout.devices_per_engine, layout.resource_key, layout.cpus_per_bundle, per_node,
                name=f"{prefix}/engine-{index}",
            ))
        for aux in plan.explorer.auxiliary if layout.engines else ():
            if aux.external is not None:  # nothing of the run serves it
                continue
            placement.auxiliary_groups[aux.name] = [create_placement_group(
                aux.tensor_parallel_size, layout.resource_key, layout.cpus_per_bundle, per_node,
                name=f"{prefix}/{aux.name}-{index}",
            ) for index in range(aux.engine_num)]
    except BaseException:
        placement.remove()
        raise
    return placement
