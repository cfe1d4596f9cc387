"""The task scheduler: batches of tasks across epochs, with a position that a checkpoint can save and restore.

Tasks are served from the stream "epoch 0 in its order, then epoch 1 in its
order, ..."; a batch may straddle two epochs, so every batch but the last has
exactly ``batch_size`` tasks. Each epoch's order (file order, a seeded
permutation, or seeded draws with replacement: the ``selector``) depends only
on the seed and the epoch number, so a restored scheduler recomputes it: resuming from a saved :class:`TaskPosition`
continues with exactly the next batch, none lost or repeated.

The run ends after ``total_epochs`` passes, or, when ``total_steps`` is set,
after ``total_steps`` batches however many epochs that takes (``total_steps``
then overrides ``total_epochs``).

A task set may name a *selector* class instead of a read order
(:mod:`trinity.buffer.selector`: ``difficulty_based``, ``offline_easy2hard``,
users' own): each batch is then the tasks it picks, an epoch is
``len(tasks) // batch_size`` batches (as upstream counts it), it learns from
:meth:`TaskScheduler.feedback` after each step, and its state travels in
:meth:`TaskScheduler.state_dict`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Generic, TypeVar

from trinity.buffer.errors import TaskFileError, TaskPositionError
from trinity.buffer.task_files import TaskRecord, load_tasks
from trinity.common.config.plan.data import BufferPlan

T = TypeVar("T")


@dataclass(frozen=True)
class TaskPosition:
    """Where the scheduler stands: the next task to serve and how many batches were served."""

    #: Epoch of the next task (0-based).
    epoch: int = 0
    #: Offset of the next task in that epoch's order.
    index: int = 0
    #: Batches served so far (the training step the next batch belongs to, 0-based).
    step: int = 0

    def to_dict(self) -> dict[str, int]:
        """Return the position as a JSON-serialisable dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskPosition:
        """Read a position written by :meth:`to_dict`; raises TaskPositionError on missing or negative fields."""
        try:
            position = cls(epoch=int(data["epoch"]), index=int(data["index"]), step=int(data["step"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise TaskPositionError(f"saved task position {data!r} is malformed ({exc!r})") from None
        if min(position.epoch, position.index, position.step) < 0:
            raise TaskPositionError(f"saved task position {data!r} has a negative field")
        return position


class TaskScheduler(Generic[T]):
    """Serves ``tasks`` in batches of ``batch_size`` across epochs; see the module docstring."""

    def __init__(
        self,
        tasks: Sequence[T],
        batch_size: int,
        *,
        total_epochs: int = 1,
        total_steps: int = 0,
        selector: str = "sequential",
        seed: int = 0,
        drop_last: bool = False,
        selector_config: Any = None,
        name: str = "",
    ) -> None:
        """Raise ValueError for no tasks, ``batch_size < 1``, negative epochs/steps or an unknown ``selector``.

        ``selector``: ``sequential`` (file order), ``shuffle`` (a seeded
        permutation per epoch), ``random`` (each epoch's order drawn with
        replacement, seeded by the epoch), or a selector class's name
        (:data:`~trinity.buffer.selector.SELECTORS`), built with the task
        records and ``selector_config`` (the ``data_selector`` section). ``name``
        is the task set's, as experiences name it (for :meth:`feedback`).
        """
        from trinity.buffer.selector import NATIVE_ORDERS, SELECTORS, DataSource

        self.picker: Any = None
        if selector not in NATIVE_ORDERS:
            if selector_config is None or selector not in SELECTORS:
                raise ValueError(f"selector must be sequential, shuffle, random or a registered selector, "
                                 f"got {selector!r}")
        if not tasks:
            raise ValueError("a task scheduler needs at least one task")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if total_epochs < 0 or total_steps < 0:
            raise ValueError(f"total_epochs and total_steps must not be negative, got {total_epochs}, {total_steps}")
        self.tasks = tasks
        self.batch_size = batch_size
        self.total_epochs = total_epochs
        self.total_steps = total_steps
        self.selector = selector
        self.seed = seed
        self.drop_last = drop_last
        self.name = name
        self._position = TaskPosition()
        self._order_epoch = -1
        self._order: list[int] = []
        if selector not in NATIVE_ORDERS:
            records = [dict(t["raw"]) for t in tasks]  # type: ignore[index]  # task records: the selector reads raw
            self.picker = SELECTORS.get(selector)(DataSource(records, name or "the task set"), selector_config)

    @classmethod
    def for_training(cls, buffer: BufferPlan) -> TaskScheduler[TaskRecord]:
        """Return the scheduler of the training task set with the buffer's batch size, epochs, steps and order.

        Raises :class:`~trinity.buffer.errors.TaskFileError` when the task set cannot be read.
        """
        taskset = buffer.train_taskset
        if taskset is None:
            raise ValueError("this run has no training task set")
        tasks = load_tasks(taskset)
        try:
            return TaskScheduler(
                tasks,
                buffer.batch_size,
                total_epochs=buffer.total_epochs,
                total_steps=buffer.total_steps or 0,
                selector=taskset.selector,
                seed=taskset.seed,
                selector_config=taskset.selector_config,
                name=taskset.name,
            )
        except (KeyError, ValueError) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            raise TaskFileError(f"{taskset.where}.data_selector: {message}") from None

    @property
    def position(self) -> TaskPosition:
        """The current position (next task, batches served)."""
        return self._position

    @property
    def steps_per_epoch(self) -> int:
        """Batches of a selector's epoch (``len(tasks) // batch_size``, at least 1)."""
        return max(1, len(self.tasks) // self.batch_size)

    @property
    def finished(self) -> bool:
        """Whether every batch has been served."""
        pos = self._position
        if self.total_steps:
            return pos.step >= self.total_steps
        if self.picker is not None:
            return pos.step >= self.total_epochs * self.steps_per_epoch
        if pos.epoch >= self.total_epochs:
            return True
        # drop_last: the remaining tasks do not fill a batch
        remaining = (self.total_epochs - pos.epoch) * len(self.tasks) - pos.index
        return self.drop_last and remaining < self.batch_size

    @property
    def total_batches(self) -> int:
        """Number of batches the whole run serves."""
        if self.total_steps:
            return self.total_steps
        if self.picker is not None:
            return self.total_epochs * self.steps_per_epoch
        tasks = self.total_epochs * len(self.tasks)
        return tasks // self.batch_size if self.drop_last else math.ceil(tasks / self.batch_size)

    def epoch_order(self, epoch: int) -> list[int]:
        """Return the task indices of ``epoch`` in serving order (see ``selector``); depends on seed and epoch only."""
        if epoch != self._order_epoch:
            order = list(range(len(self.tasks)))
            rng = random.Random(f"trinity-tasks:{self.seed}:{epoch}")
            if self.selector == "shuffle":
                rng.shuffle(order)
            elif self.selector == "random":
                order = [rng.randrange(len(self.tasks)) for _ in order]
            self._order_epoch, self._order = epoch, order
        return self._order

    def next_batch(self) -> list[T] | None:
        """Return the next batch of tasks and advance the position; None when the run is over."""
        batch = self.next_batch_with_epochs()
        return None if batch is None else [task for _, task in batch]

    def next_batch_with_epochs(self) -> list[tuple[int, T]] | None:
        """Return the next batch as ``(epoch, task)`` pairs (a batch may straddle two epochs); None when over.

        The batch's step is ``position.step`` before the call.
        """
        if self.finished:
            return None
        if self.picker is not None:
            step = self._position.step
            epoch = step // self.steps_per_epoch
            picked = [int(i) for i in self.picker.get_indices(self.batch_size)]
            if any(not 0 <= i < len(self.tasks) for i in picked):
                raise TaskPositionError(f"selector {self.selector!r} picked {picked}, outside the task set of "
                                        f"{len(self.tasks)} tasks")
            self._position = TaskPosition(epoch=(step + 1) // self.steps_per_epoch, index=0, step=step + 1)
            return [(epoch, self.tasks[i]) for i in picked]
        epoch, index = self._position.epoch, self._position.index
        batch: list[tuple[int, T]] = []
        while len(batch) < self.batch_size and (self.total_steps or epoch < self.total_epochs):
            order = self.epoch_order(epoch)
            take = order[index : index + self.batch_size - len(batch)]
            batch.extend((epoch, self.tasks[i]) for i in take)
            index += len(take)
            if index >= len(order):
                epoch, index = epoch + 1, 0
        self._position = TaskPosition(epoch=epoch, index=index, step=self._position.step + 1)
        return batch

    def __iter__(self) -> Iterator[list[T]]:
        """Yield the remaining batches."""
        while (batch := self.next_batch()) is not None:
            yield batch

    def feedback(self, experiences: Sequence[Any]) -> None:
        """Tell a selector how the step's tasks of this task set went: each one's pass rate (mean reward)."""
        if self.picker is None:
            return
        rewards: dict[int, list[float]] = {}
        for exp in experiences:
            info = exp.info
            if info.get("task_set") == self.name and exp.reward is not None and "task_index" in info:
                rewards.setdefault(int(info["task_index"]), []).append(float(exp.reward))
        if rewards:
            indices = sorted(rewards)
            self.picker.feedback(indices, [sum(rewards[i]) / len(rewards[i]) for i in indices])

    def state_dict(self) -> dict[str, Any]:
        """Return what a checkpoint saves: the position and the settings that fix the task order (and a
        selector's own state)."""
        state = {**self._position.to_dict(), "num_tasks": len(self.tasks), "selector": self.selector,
                 "seed": self.seed}
        if self.picker is not None:
            state["picker"] = self.picker.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved :meth:`state_dict`.

        Raises :class:`TaskPositionError` when the task set changed size, the
        selector or seed differ (the order would differ), or the position lies
        outside the task set.
        """
        position = TaskPosition.from_dict(state)
        saved = {"num_tasks": state.get("num_tasks"), "selector": state.get("selector"), "seed": state.get("seed")}
        current = {"num_tasks": len(self.tasks), "selector": self.selector, "seed": self.seed}
        changed = [
            f"{key} {saved[key]!r} -> {current[key]!r}"
            for key in saved
            if saved[key] is not None and saved[key] != current[key]
        ]
        if changed:
            raise TaskPositionError(
                f"cannot resume the task position: {', '.join(changed)} since the checkpoint; "
                "restore the original task set and seed or start a new run"
            )
        if position.index >= len(self.tasks):
            raise TaskPositionError(
                f"saved task position index {position.index} is outside the task set of {len(self.tasks)} tasks"
            )
        if self.picker is not None:
            try:
                self.picker.load_state_dict(dict(state.get("picker") or {}))
            except (KeyError, ValueError) as exc:
                raise TaskPositionError(f"cannot resume selector {self.selector!r}: {exc}") from None
        self._position = position
