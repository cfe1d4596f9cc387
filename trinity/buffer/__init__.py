"""The buffer: tasks in (task files, scheduler), experiences out (storages, sample strategies, pipeline).

Public API, for the launcher, explorer and trainer:

* tasks: :func:`load_tasks`, :class:`TaskScheduler` (``for_training``,
  ``next_batch``, ``state_dict`` / ``load_state_dict``);
* storages: :func:`make_storage` and :data:`STORAGES` (``queue``, ``sqlite``, ``jsonl``);
* sampling: :func:`make_sample_strategy` and :data:`SAMPLE_STRATEGIES` (``default``,
  ``staleness_control``, ``mix``, ...);
* pipeline: :func:`pipeline_for_plan` / :func:`build_pipeline`, :func:`buffer_advantage_fn`,
  :data:`EXPERIENCE_OPERATORS` (also :data:`REWARD_SHAPERS`);
* errors: :mod:`trinity.buffer.errors`.
"""

from trinity.utils.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "BufferExhaustedError": "errors",
    "StorageClosedError": "errors",
    "StorageError": "errors",
    "StorageTimeoutError": "errors",
    "TaskFileError": "errors",
    "TaskPositionError": "errors",
    "TrinityBufferError": "errors",
    "ExperiencePipeline": "pipeline",
    "ExperienceProcessor": "pipeline",
    "GroupAdvantages": "pipeline",
    "Operators": "pipeline",
    "buffer_advantage_fn": "pipeline",
    "build_pipeline": "pipeline",
    "pipeline_for_plan": "pipeline",
    "SAMPLE_STRATEGIES": "catalog",
    "SampleStrategy": "sampling",
    "StalenessStrategy": "sampling",
    "make_sample_strategy": "sampling",
    "REWARD_SHAPERS": "catalog",
    "EXPERIENCE_OPERATORS": "catalog",
    "STORAGES": "storage",
    "ExperienceStorage": "storage",
    "JsonlStorage": "storage",
    "LocalQueueStorage": "storage",
    "QueueStorage": "storage",
    "SQLiteStorage": "storage",
    "make_storage": "storage",
    "TaskRecord": "task_files",
    "load_tasks": "task_files",
    "TaskPosition": "task_scheduler",
    "TaskScheduler": "task_scheduler",
})
