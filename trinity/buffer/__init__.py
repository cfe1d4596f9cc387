"""The buffer: tasks in (task files, scheduler), experiences out (storages, sample strategies, pipeline).

Public API, for the launcher, explorer and trainer:

* tasks: :func:`load_tasks`, :class:`TaskScheduler` (``for_training`` /
  ``for_evaluation``, ``next_batch``, ``state_dict`` / ``load_state_dict``);
* storages: :func:`make_storage` and :data:`STORAGES` (``queue``, ``sqlite``, ``jsonl``);
* sampling: :func:`make_sample_strategy` and :data:`SAMPLE_STRATEGIES` (``default``, ``staleness``);
* pipeline: :func:`pipeline_for_algorithm` / :func:`build_pipeline`, :func:`buffer_advantage_fn`,
  :data:`REWARD_SHAPERS`, :data:`GROUP_ADVANTAGE_FNS`;
* errors: :mod:`trinity.buffer.errors`.
"""

from trinity.buffer.errors import (
    BufferExhaustedError,
    StorageClosedError,
    StorageError,
    StorageTimeoutError,
    TaskFileError,
    TaskPositionError,
    TrinityBufferError,
)
from trinity.buffer.pipeline import (
    GROUP_ADVANTAGE_FNS,
    ExperiencePipeline,
    ExperienceProcessor,
    GroupAdvantages,
    RewardShaping,
    buffer_advantage_fn,
    build_pipeline,
    computes_in_buffer,
    pipeline_for_algorithm,
)
from trinity.buffer.sampling import SAMPLE_STRATEGIES, SampleStrategy, StalenessStrategy, make_sample_strategy
from trinity.buffer.shaping import REWARD_SHAPERS
from trinity.buffer.storage import (
    STORAGES,
    ExperienceStorage,
    JsonlStorage,
    QueueStorage,
    SQLiteStorage,
    make_storage,
)
from trinity.buffer.task_files import TaskRecord, load_tasks
from trinity.buffer.task_scheduler import TaskPosition, TaskScheduler

__all__ = [
    "GROUP_ADVANTAGE_FNS",
    "REWARD_SHAPERS",
    "SAMPLE_STRATEGIES",
    "STORAGES",
    "BufferExhaustedError",
    "ExperiencePipeline",
    "ExperienceProcessor",
    "ExperienceStorage",
    "GroupAdvantages",
    "JsonlStorage",
    "QueueStorage",
    "RewardShaping",
    "SQLiteStorage",
    "SampleStrategy",
    "StalenessStrategy",
    "StorageClosedError",
    "StorageError",
    "StorageTimeoutError",
    "TaskFileError",
    "TaskPosition",
    "TaskPositionError",
    "TaskRecord",
    "TaskScheduler",
    "TrinityBufferError",
    "buffer_advantage_fn",
    "build_pipeline",
    "computes_in_buffer",
    "load_tasks",
    "make_sample_strategy",
    "make_storage",
    "pipeline_for_algorithm",
]
