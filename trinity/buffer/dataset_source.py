"""SFT and DPO training batches straight from a data set, epoch after epoch, with a resumable position.

The trainer of an ``sft`` or ``dpo`` run reads its batches here instead of
from an experience buffer: every record is formatted once into an
:class:`~trinity.common.experience.Experience` (assistant-only masks from the
chat template; DPO pairs with their rejected response), then served in
batches of ``buffer.train_batch_size`` across ``total_epochs`` in the data
set's read order, exactly like a task set (:class:`TaskScheduler`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trinity.buffer.errors import BufferExhaustedError
from trinity.buffer.task_scheduler import TaskScheduler
from trinity.common.config.plan.data import DatasetPlan
from trinity.common.experience import Experience


def load_experiences(data: DatasetPlan, tokenizer: Any, chat_template: str | None = None,
                     cache_dir: str | None = None, vision: Any = None) -> list[Experience]:
    """Return the experiences of every record of ``data`` (``sft`` or ``dpo``), in data-set order.

    ``vision``: a vision-language model's :class:`~trinity.common.models.vision.VisionInputs`, for records
    with images.

    Raises :class:`~trinity.buffer.datasets.DatasetError` or
    :class:`~trinity.buffer.formatters.FormatError` (one line each).
    """
    from trinity.buffer.datasets import load_split
    from trinity.buffer.formatters import format_records

    dataset = load_split(data.where, data.path, data.split, data.subset_name, progress=data.enable_progress_bar,
                         cache_dir=cache_dir)
    experiences = format_records(list(dataset), data.schema, data.format, tokenizer, chat_template=chat_template,
                                 name=data.where, vision=vision)
    return [dataclasses.replace(e, group_id=f"{data.name}/{i}") for i, e in enumerate(experiences)]


class DatasetSource:
    """Serves ``batch_size`` experiences per training step from a formatted data set (the sample-strategy API)."""

    def __init__(self, experiences: list[Experience], batch_size: int, *, total_epochs: int = 1,
                 selector: str = "sequential", seed: int = 0, name: str = "data") -> None:
        """Raise ValueError for no experiences or a batch size below 1."""
        self.name = name
        self.scheduler: TaskScheduler[Experience] = TaskScheduler(
            experiences, batch_size, total_epochs=total_epochs, selector=selector, seed=seed)

    @classmethod
    def for_plan(cls, plan: Any) -> DatasetSource:
        """Return the source of a run plan's SFT/DPO data set, ``train_batch_size`` records per step."""
        data = plan.buffer.dataset
        if data is None:
            raise ValueError("this run trains on an experience buffer, not on a data set")
        return cls.for_dataset(plan, data, plan.buffer.train_batch_size)

    @classmethod
    def for_dataset(cls, plan: Any, data: DatasetPlan, batch_size: int) -> DatasetSource:
        """Return the source of the data set ``data`` of a run plan, ``batch_size`` records per call.

        Records are formatted with the model's tokenizer and chat template.
        """
        from transformers import AutoTokenizer

        from trinity.common.models.pretrained import load_pretrained

        tokenizer = load_pretrained(AutoTokenizer.from_pretrained, plan.model.path,
                                    trust_remote_code=plan.model.trust_remote_code)
        cache = str(plan.run_dir / "buffer" / "datasets")
        vision = None
        if data.format.image_key:
            from trinity.common.models.vision import VisionInputs, folder_is_vision_language

            if folder_is_vision_language(plan.model.path):
                vision = VisionInputs(plan.model.path, tokenizer=tokenizer)
        experiences = load_experiences(data, tokenizer, plan.model.chat_template, cache_dir=cache, vision=vision)
        return cls(experiences, batch_size, total_epochs=data.total_epochs, selector=data.selector, seed=data.seed,
                   name=data.name)

    @property
    def total_batches(self) -> int:
        """Training steps the whole data set gives (every epoch)."""
        return self.scheduler.total_batches

    def sample(self, trainer_version: int = 0, timeout: float | None = None) -> list[Experience]:
        """Return the next batch; raises :class:`BufferExhaustedError` after the last epoch."""
        batch = self.scheduler.next_batch()
        if batch is None:
            raise BufferExhaustedError(f"{self.describe()} has served its {self.scheduler.total_epochs} epoch(s)")
        return batch

    def describe(self) -> str:
        """Return ``data set '<name>'`` for messages."""
        return f"data set {self.name!r}"

    def state_dict(self) -> dict[str, Any]:
        """Return the read position (what a checkpoint saves)."""
        return {"dataset": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state_dict`; raises TaskPositionError when the data set changed."""
        self.scheduler.load_state_dict(state["dataset"])
