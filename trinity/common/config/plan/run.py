"""The resolved plan of a run: everything derived from a config before Ray starts or a model loads.

These are the plan's types, which every part of the run reads instead of the
raw config. :func:`trinity.planner.resolve_run` builds them: it checks every
name a config uses against the catalogs, derives what upstream Trinity-RFT
derives and records every choice it made on the user's behalf in
:attr:`RunPlan.notes`. The device layout is resolved later, against the
selected backend and the cluster (:mod:`trinity.common.config.validator`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trinity.common.config.plan.data import BufferPlan
from trinity.common.config.plan.explorer import ExplorerPlan
from trinity.common.config.plan.model import ModelPlan
from trinity.common.config.plan.trainer import TrainerPlan
from trinity.common.config.schema import Config


@dataclass(frozen=True)
class ClusterPlan:
    """The cluster as the config declares it (0: detect from the Ray cluster)."""

    #: ``auto``, ``local`` or an address.
    ray_address: str
    #: Nodes (0: detect).
    node_num: int
    #: Devices per node (0: detect).
    devices_per_node: int
    #: Device backend asked for.
    device: str
    #: Ray CPUs per bundle.
    cpus_per_bundle: float


@dataclass(frozen=True)
class SyncPlan:
    """How and when weights reach the engines."""

    #: The method as written (``nccl``/``online``, ``checkpoint``/``offline``, ``memory``, or a collective).
    method: str
    #: Sync every N steps.
    interval: int
    #: Explorer lead in steps.
    offset: int
    #: Seconds per sync.
    timeout: float
    #: Online bucket size in MiB.
    bucket_size_mb: int
    #: Compare checksums after each sync.
    verify_checksums: bool
    #: Who decides when to sync in mode both: ``fixed``, ``explorer_driven`` or ``trainer_driven``.
    style: str = "fixed"


@dataclass(frozen=True)
class MonitorPlan:
    """Where metrics go."""

    #: ``tensorboard``, ``wandb`` or ``none``.
    monitor_type: str
    #: Its arguments.
    monitor_args: dict[str, Any]
    #: Evaluation metrics also as std/max/min.
    detailed_stats: bool
    #: Write a Ray timeline at the end.
    enable_ray_timeline: bool
    #: metrics.jsonl.
    jsonl: bool
    #: Reward-curve PNG.
    plot: bool
    #: Console progress.
    progress: bool


@dataclass(frozen=True)
class RunPlan:
    """A run, resolved: what every part reads instead of the raw config."""

    #: The config as written (with defaults), never rewritten.
    config: Config
    #: ``both``, ``explore``, ``train`` or ``bench``.
    mode: str
    #: ``<checkpoint_root_dir>/<project>/<group>/<name>``, absolute.
    run_dir: Path
    #: Ray namespace.
    ray_namespace: str
    model: ModelPlan
    cluster: ClusterPlan
    explorer: ExplorerPlan
    buffer: BufferPlan
    #: What a training step computes (``trinity.trainer.plan.TrainingPlan``).
    algorithm: Any
    trainer: TrainerPlan
    sync: SyncPlan
    monitor: MonitorPlan
    #: Choices made on the user's behalf, inert settings, mapped veRL keys: one line each.
    notes: tuple[str, ...] = field(default=())
    #: ``(stage number, stage count, name)`` when this plan is one stage of a multi-stage run.
    stage: tuple[int, int, str] | None = None

    @property
    def uses_explorer(self) -> bool:
        """Whether the run starts rollout engines."""
        return self.mode in ("both", "colocate", "explore", "bench", "serve")

    @property
    def uses_trainer(self) -> bool:
        """Whether the run trains."""
        return self.mode in ("both", "colocate", "train")
