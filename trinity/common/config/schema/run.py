"""The top of a run configuration: cluster, synchronizer, monitor, log, data processing, stages, and ``Config``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trinity.common.config.schema.algorithm import AlgorithmConfig
from trinity.common.config.schema.buffer import BufferConfig
from trinity.common.config.schema.explorer import ExplorerConfig
from trinity.common.config.schema.fields import ConfigSource, inert, internal, refused, refused_factory, refused_values
from trinity.common.config.schema.model import ModelConfig
from trinity.common.config.schema.trainer import TrainerConfig
from trinity.device.collectives import UPSTREAM_ONLINE_SYNC_METHOD


@dataclass
class ClusterConfig:
    """Where the job runs. A "device" is an accelerator of the selected backend (a CPU bundle on ``cpu``)."""

    #: Ray address: ``auto`` is ``RAY_ADDRESS`` when set, else a running local cluster, else a fresh one;
    #: ``local`` always starts a fresh one; anything else is a cluster's address.
    ray_address: str = "auto"
    #: Nodes; 0: every node of the Ray cluster.
    node_num: int = 0
    #: Devices per node on any backend (GPUs, NPUs, ...); 0: detect. ``devices_per_node`` is the same setting.
    gpu_per_node: int = 0
    #: (trinity-rft) Device backend: ``auto`` or an installed backend's name (``cpu``, ``cuda``, ``npu``, ...).
    device: str = "auto"
    #: (trinity-rft) Ray CPUs (fractions allowed) reserved with each engine device and trainer rank.
    cpus_per_bundle: float = 1.0


@dataclass
class SynchronizerConfig:
    """How and when weights flow from the trainer to the engines."""

    #: ``nccl``/``online``: the backend's collective (nccl, hccl, gloo); ``checkpoint``/``offline``; ``memory``.
    sync_method: str = UPSTREAM_ONLINE_SYNC_METHOD
    #: Mode both: ``fixed`` (sync after every ``sync_interval`` trainer steps; the explorer waits for the weights
    #: it needs), ``trainer_driven`` (the same syncs; the explorer never waits for them), ``explorer_driven``
    #: (the explorer asks for a sync after every ``sync_interval`` of its steps); ``dynamic_by_*`` are aliases.
    sync_style: str = "fixed"
    #: Sync every N trainer steps.
    sync_interval: int = 1
    #: The explorer runs this many steps ahead of the trainer (0: strictly on-policy).
    sync_offset: int = 0
    #: Seconds a sync may take before the run fails.
    sync_timeout: float = 3600.0
    #: Upstream placeholder ("to be used").
    wait_for_checkpoint: bool = inert(False, "checkpoint sync always publishes complete weights atomically here")
    #: (trinity-rft) Bucket size of the online broadcast, in MiB.
    bucket_size_mb: int = 64
    #: (trinity-rft) After each sync, compare the engines' weight checksums with the trainer's (slow).
    verify_checksums: bool = False


@dataclass
class MonitorConfig:
    """Where metrics go."""

    #: ``tensorboard``, ``wandb`` or ``none``.
    monitor_type: str = refused_values("tensorboard", {
        "mlflow": "the mlflow monitor is not supported; use tensorboard or wandb",
        "swanlab": "the swanlab monitor is not supported; use tensorboard or wandb",
    })
    #: Arguments of the monitor (wandb: ``entity``, ``tags``, ...).
    monitor_args: dict[str, Any] | None = None
    #: Evaluation metrics also as std, max and min (not only the mean).
    detailed_stats: bool = False
    #: Write a Ray timeline (``<run>/monitor/timeline.json``) at the end.
    enable_ray_timeline: bool = False
    #: (trinity-rft) Metrics as JSON lines under the run folder.
    jsonl: bool = True
    #: (trinity-rft) A reward-curve PNG at the end of the run.
    plot: bool = True
    #: (trinity-rft) Rich progress display on the console.
    progress: bool = True


@dataclass
class LogConfig:
    """Logging."""

    #: ``DEBUG``, ``INFO``, ``WARNING`` or ``ERROR``.
    level: str = "INFO"
    #: Group logs by node IP (upstream).
    group_by_node: bool = inert(False, "Ray forwards every actor's log to the driver's console here")


@dataclass
class OperatorConfig:
    """One operator of a data pipeline."""

    #: Operator name.
    name: str = ""
    #: Its arguments.
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExperiencePipelineConfig:
    """Operators applied to experiences before they are stored."""

    #: Operators, applied in order.
    operators: list[OperatorConfig] = field(default_factory=list)
    #: Record every explored experience (before the operators) in ``input_save_path``.
    save_input: bool = True
    #: Where: ``sqlite:///...`` or a ``.jsonl`` file; default ``<run>/buffer/explorer_output.db``.
    input_save_path: str | None = None
    #: Extra input buffers (upstream experiment).
    inputs: dict[str, Any] = refused_factory(dict, "extra experience-pipeline inputs are not supported")
    #: Output buffer (upstream experiment; always the trainer's experience buffer here).
    output: Any = refused(None, "the experience pipeline always writes to the trainer's experience buffer")


@dataclass
class DataProcessorConfig:
    """Data processing pipelines."""

    #: Data-Juicer task pipeline (upstream).
    task_pipeline: dict[str, Any] | None = refused(
        None, "the Data-Juicer task pipeline is not supported; prepare the task set before the run"
    )
    #: Experience pipeline.
    experience_pipeline: ExperiencePipelineConfig = field(default_factory=ExperiencePipelineConfig)


@dataclass
class ServiceConfig:
    """Outside services."""

    #: Data-Juicer server (upstream).
    data_juicer: dict[str, Any] | None = refused(None, "the Data-Juicer service is not supported; remove service")


@dataclass
class StageConfig:
    """One stage of a multi-stage run: the sections it replaces, whole."""

    #: Stage name (the run folder of the stage is ``<name>/<stage_name>``).
    stage_name: str = ""
    #: Mode of the stage.
    mode: str | None = None
    #: Replaces ``algorithm``.
    algorithm: AlgorithmConfig | None = None
    #: Replaces ``buffer``.
    buffer: BufferConfig | None = None
    #: Replaces ``data_processor``.
    data_processor: DataProcessorConfig | None = None
    #: Replaces ``explorer``.
    explorer: ExplorerConfig | None = None
    #: Replaces ``trainer``.
    trainer: TrainerConfig | None = None


@dataclass
class Config:
    """A whole run."""

    #: ``both`` (explore and train), ``colocate`` (both on one device: the engine and the trainer rank share it),
    #: ``explore``, ``train``, ``bench`` (evaluate checkpoints) or ``serve`` (the rollout engines' OpenAI API until
    #: stopped, loading published weights).
    mode: str = "both"
    #: Project name (folder level 1).
    project: str = "Trinity-RFT"
    #: Group name (folder level 2, may be empty).
    group: str = ""
    #: Run name (last folder level).
    name: str = "rft"
    #: Root of checkpoints, buffers and metrics: ``<root>/<project>/<group>/<name>``; empty: the working folder.
    checkpoint_root_dir: str = ""
    #: Ray namespace; default ``<project>/<name>``.
    ray_namespace: str = ""
    #: Resume from the run folder's latest checkpoint; false: a run folder in use gets a timestamped new name.
    continue_from_checkpoint: bool = True
    #: Upstream's memory-check prompts.
    ignore_validator_suggestions: bool = inert(False, "no interactive memory suggestions are made here")
    #: What is optimised: the algorithm type and its pieces.
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    #: Operators applied to experiences (and upstream's task pipeline).
    data_processor: DataProcessorConfig = field(default_factory=DataProcessorConfig)
    #: The policy model, its lengths and default sampling.
    model: ModelConfig = field(default_factory=ModelConfig)
    #: Nodes, devices per node, the device backend.
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    #: Task sets, data sets, experience buffers, batch sizes.
    buffer: BufferConfig = field(default_factory=BufferConfig)
    #: Rollout engines, workflow runners, evaluation.
    explorer: ExplorerConfig = field(default_factory=ExplorerConfig)
    #: The FSDP2 trainer and its checkpoints.
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    #: Where metrics go.
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    #: How and when weights reach the engines.
    synchronizer: SynchronizerConfig = field(default_factory=SynchronizerConfig)
    #: Outside services (upstream).
    service: ServiceConfig = field(default_factory=ServiceConfig)
    #: Logging.
    log: LogConfig = field(default_factory=LogConfig)
    #: Stages run one after another, each a copy of this config with its sections replaced.
    stages: list[StageConfig] = field(default_factory=list)
    #: (internal) The file this config was read from and the keys it set.
    source: ConfigSource = internal(ConfigSource)
