"""Reading a task set: its records through Hugging Face ``datasets``, each formatted into task fields.

A task set is read as upstream Trinity-RFT reads it: ``path`` (a local
folder or JSON/JSONL/Parquet/Arrow file, or a hub id where the hub is
reachable), ``subset_name`` and ``split``, then every record formatted with the
task set's ``format`` (:func:`trinity.buffer.formatters.format_task`): the
prompt, the reference answer, a per-record workflow and reward function.
Every problem is one line (:class:`~trinity.buffer.datasets.DatasetError`
or :class:`~trinity.buffer.formatters.FormatError`).
"""

from __future__ import annotations

from trinity.buffer.formatters import TaskFields, format_task
from trinity.common.config.plan.data import TasksetPlan

#: A task set's record, formatted (a plain dict at run time).
TaskRecord = TaskFields


def load_tasks(task_set: TasksetPlan, cache_dir: str | None = None) -> list[TaskRecord]:
    """Return every task record of ``task_set``, in data-set order.

    The format's ``prompt_key`` is required in every record; the answer
    (``response_key``) is None where a record has none, as upstream allows.
    ``cache_dir`` is where ``datasets`` keeps its Arrow cache. Raises
    :class:`~trinity.buffer.datasets.DatasetError` or
    :class:`~trinity.buffer.formatters.FormatError`.
    """
    from trinity.buffer.datasets import load_split

    dataset = load_split(task_set.where, task_set.path, task_set.split, task_set.subset_name,
                         progress=task_set.enable_progress_bar, cache_dir=cache_dir)
    return [format_task(row, task_set.format, index=index, name=task_set.where, require_response=False)
            for index, row in enumerate(dataset)]
