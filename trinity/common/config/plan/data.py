"""Task sets, SFT/DPO data sets and experience buffers as a run plan holds them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from trinity.common.config.schema import (
    FormatConfig,
    OperatorConfig,
)

StorageKind = Literal["queue", "sqlite", "jsonl"]
Schema = Literal["experience", "sft", "dpo"]
#: A read order (``sequential``, ``shuffle``, ``random``) or a selector's registered name.
SelectorType = str


@dataclass(frozen=True)
class TasksetPlan:
    """A task set ready to read: where, which keys, which workflow and reward, how to sample."""

    #: Name in metrics.
    name: str
    #: Dotted path of its section (for messages).
    where: str
    #: Local folder/file or hub id.
    path: str
    #: Split.
    split: str
    #: Dataset configuration.
    subset_name: str | None
    #: Which keys hold what.
    format: FormatConfig
    #: Workflow (registry name or Python path).
    workflow: str
    #: Reward function, or None for the workflow's default.
    reward_fn: str | None
    #: Workflow arguments.
    workflow_args: dict[str, Any]
    #: Reward function arguments.
    reward_fn_args: dict[str, Any]
    #: Sampling of its rollouts (``temperature``, ``top_p``, ``top_k``, ``max_tokens``, ...).
    sampling: dict[str, Any]
    #: Rollouts per task.
    repeat_times: int
    #: Read order.
    selector: SelectorType
    #: Seed of the read order.
    seed: int
    #: Whether it is an evaluation set.
    is_eval: bool
    #: Progress bar while loading.
    enable_progress_bar: bool = False
    #: The ``data_selector`` section a selector class is built with (None for the read orders).
    selector_config: Any = None
    #: The config key that named ``workflow`` / ``reward_fn`` (for messages); empty: ``where``.
    workflow_key: str = ""
    reward_key: str = ""


@dataclass(frozen=True)
class DatasetPlan:
    """A data set the trainer reads directly: SFT/DPO training data, or an auxiliary set (``mix``)."""

    #: Name (metrics, messages).
    name: str
    #: Dotted path of its section.
    where: str
    #: Local folder/file or hub id.
    path: str
    #: Split.
    split: str
    #: Dataset configuration.
    subset_name: str | None
    #: Record layout.
    format: FormatConfig
    #: ``sft`` or ``dpo`` records.
    schema: Schema
    #: Passes over it.
    total_epochs: int
    #: Read order.
    selector: SelectorType
    #: Seed of the read order.
    seed: int
    #: Progress bar while loading.
    enable_progress_bar: bool = False


@dataclass(frozen=True)
class ReplayPlan:
    """Experience replay: the trainer draws its batches by priority from a pool of groups it may reuse."""

    #: Priority function (registry name or Python path).
    priority_fn: str
    #: Its arguments (over its defaults).
    priority_fn_args: dict[str, Any]
    #: Seconds after a use before a group may serve again (None: never reused).
    cooldown: float | None
    #: Experiences the pool holds ready to serve (0: unbounded).
    capacity: int


@dataclass(frozen=True)
class StoragePlan:
    """The experience buffer between explorer and trainer."""

    #: ``queue`` (Ray actor), ``sqlite`` (persistent) or ``jsonl`` (append-only file).
    kind: StorageKind
    #: Name (file names, metrics).
    name: str
    #: File of a persistent storage ("" : ``<run>/buffer/<name>.<suffix>``).
    path: str
    #: Queue capacity in experiences (0: unbounded).
    capacity: int
    #: Seconds the trainer waits for a batch.
    read_timeout: float
    #: Experience replay (None: every group is trained once, in arrival order).
    replay: ReplayPlan | None = None


@dataclass(frozen=True)
class BufferPlan:
    """Batches, epochs and every source and sink of data."""

    #: Tasks per explorer step.
    batch_size: int
    #: Experiences (rows) per training step.
    train_batch_size: int
    #: Passes over the training data.
    total_epochs: int
    #: Explorer steps at most (None: all epochs).
    total_steps: int | None
    #: The training task set (modes both/explore).
    train_taskset: TasksetPlan | None
    #: Evaluation task sets.
    eval_tasksets: tuple[TasksetPlan, ...]
    #: The experience buffer (None when the trainer reads a data set).
    experience: StoragePlan | None
    #: SFT/DPO training data (mode train with an sft/dpo algorithm).
    dataset: DatasetPlan | None
    #: Auxiliary data sets by name.
    auxiliary: dict[str, DatasetPlan]
    #: Also record every explored experience here (``sqlite:///...`` or ``.jsonl``), or None.
    record_path: str | None
    #: Experience operators, in order.
    operators: tuple[OperatorConfig, ...] = field(default=())
    #: How the trainer draws a step's experiences.
    sample_strategy: str = "default"
    #: Its arguments.
    sample_strategy_args: dict[str, Any] = field(default_factory=dict)
    #: Experiences a training step takes, in whole tasks, when the config sets ``train_batch_size`` for rollouts
    #: (upstream counts a batch in experiences); None: ``batch_size`` whole tasks per step, whatever their size.
    train_batch_rows: int | None = None
