"""Placement groups of a run: the trainer ranks packed together, each engine on its own devices."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trinity.common.config.schema import Config
from trinity.common.config.validator import Layout
from trinity.common.models.placement import create_placement_group


@dataclass
class Placement:
    """The placement groups of a run and the actor options that put actors in them."""

    trainer_group: Any = None
    engine_groups: list[Any] = field(default_factory=list)

    def engine_options(self, index: int) -> dict[str, Any]:
        """Ray actor options placing engine ``index`` in its group."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        # the engine sits on bundle 0; its own workers (vLLM's Ray executor) are placed in the same group
        return {"scheduling_strategy": PlacementGroupSchedulingStrategy(
            placement_group=self.engine_groups[index], placement_group_bundle_index=0,
            placement_group_capture_child_tasks=True)}

    def remove(self) -> None:
        """Release every group."""
        import ray

        for group in [self.trainer_group, *self.engine_groups]:
            if group is not None:
                ray.util.remove_placement_group(group)


def place(config: Config, layout: Layout) -> Placement:
    """Reserve the trainer's bundles (one device + CPUs per rank, STRICT_PACK when they fit a node) and the engines'.

    Each engine gets a group of ``tensor_parallel_size`` bundles of one device
    each, packed on one node (vLLM's Ray executor starts one worker per
    bundle). Bundles ask the backend's Ray resource key, or CPUs only on the
    CPU backend.
    """
    placement = Placement()
    per_node = config.cluster.devices_per_node
    try:
        if layout.trainers:
            placement.trainer_group = create_placement_group(
                layout.trainers, layout.resource_key, layout.cpus_per_bundle, per_node,
                name=f"{config.project}/{config.name}/trainer",
            )
        for index in range(layout.engines):
            placement.engine_groups.append(create_placement_group(
                layout.devices_per_engine, layout.resource_key, layout.cpus_per_bundle, per_node,
                name=f"{config.project}/{config.name}/engine-{index}",
            ))
    except BaseException:
        placement.remove()
        raise
    return placement
