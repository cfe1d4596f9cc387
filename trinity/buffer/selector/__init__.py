"""Task selectors, upstream Trinity-RFT's extension point for which tasks the explorer reads next, at upstream's path.

The built-in read orders (``sequential``, ``shuffle``, ``random``) are the task
scheduler's own. A *selector* is a class named by
``buffer.explorer_input.taskset.data_selector.selector_type`` and registered
in :data:`SELECTORS` (built-ins: ``offline_easy2hard``, ``difficulty_based``;
users' selectors through plugins). It is built as upstream builds it,
``cls(data_source, config)``:

* ``data_source.dataset[key]``: the column ``key`` of the task set (one value
  per record, in data-set order), ``data_source.dataset_size``: its size;
* ``config``: the ``data_selector`` section (``selector_type``, ``seed``,
  ``feature_keys``, ``kwargs``).

For each explorer step the scheduler asks ``get_indices(batch_size)`` and,
after the step, tells it how the tasks went with ``feedback(indices, values)``
(each explored task's pass rate: the mean reward of its rollouts).
``state_dict`` / ``load_state_dict`` travel in the run's checkpoints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trinity.utils.registry import Registry

#: Task selectors by config name.
SELECTORS: Registry[Any] = Registry("task selector")
SELECTORS.declare("offline_easy2hard", "trinity.buffer.selector.selectors:OfflineEasy2HardSelector")
SELECTORS.declare("difficulty_based", "trinity.buffer.selector.selectors:DifficultyBasedSelector")

#: Read orders the task scheduler implements itself (no selector class).
NATIVE_ORDERS = ("sequential", "shuffle", "random")


class TaskColumns:
    """A task set seen as columns, as upstream's selectors read it (``dataset["key"]``)."""

    def __init__(self, records: Sequence[dict[str, Any]], where: str = "the task set") -> None:
        self._records = records
        self._where = where

    def __getitem__(self, key: str) -> list[Any]:
        """Return the value of ``key`` in every record; raises KeyError naming the first record without it."""
        values = []
        for index, record in enumerate(self._records):
            if key not in record:
                raise KeyError(f"{self._where}: record {index} has no {key!r} (a selector's feature_keys must be "
                               f"columns of the task set)")
            values.append(record[key])
        return values

    def __len__(self) -> int:
        return len(self._records)

    @property
    def column_names(self) -> list[str]:
        """The keys of the first record."""
        return list(self._records[0]) if self._records else []


class DataSource:
    """What a selector is built with: the task set's columns and size."""

    def __init__(self, records: Sequence[dict[str, Any]], where: str = "the task set") -> None:
        #: The task set's columns (``dataset["key"]``).
        self.dataset = TaskColumns(records, where)
        #: How many tasks the set holds.
        self.dataset_size = len(records)


class BaseSelector:
    """A selector of the next tasks: ``get_indices``, ``feedback``, ``state_dict``, ``load_state_dict``."""

    def __init__(self, data_source: DataSource, config: Any) -> None:
        self.data_source = data_source
        self.config = config

    def get_indices(self, batch_size: int, return_extra_info: bool = False) -> Any:
        """Return the indices of the next ``batch_size`` tasks (and, with ``return_extra_info``, a dict)."""
        raise NotImplementedError

    def feedback(self, indices: list[int], values: list[float]) -> None:
        """Learn from how the tasks at ``indices`` went (``values``: their pass rates)."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Return what a checkpoint saves to resume the selection exactly."""
        raise NotImplementedError

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a saved :meth:`state_dict`."""
        raise NotImplementedError


__all__ = ["NATIVE_ORDERS", "SELECTORS", "BaseSelector", "DataSource", "TaskColumns"]
