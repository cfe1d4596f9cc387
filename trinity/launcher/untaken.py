"""The explored batches mode both has not yet handed to training steps, and what the next step takes of them.

Each explorer batch leaves *places*: one per task, whether its group was
stored or dropped because its rollouts failed. A training step takes places
from the oldest batches, a batch's stored groups first, and trains on the
stored groups among them:

* by tasks (``train_batch_rows`` None): ``groups_per_step`` places;
* by experiences (``train_batch_rows`` set, upstream's ``train_batch_size``):
  stored groups while they fit in that many experiences (the first one
  whatever its size), each group whole however many experiences its task's
  episodes produced; a batch's dropped places go with its last stored group.

A step of places whose groups were all dropped trains nothing (the loop skips
it).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StepTake:
    """What the next training step takes: places, stored groups among them, and their experiences."""

    places: int
    groups: int
    rows: int


class UntakenBatches:
    """Explored batches not yet wholly taken, oldest first: each the sizes of its stored groups and its drops."""

    def __init__(self, groups_per_step: int, rows_per_step: int | None = None) -> None:
        """Form steps of ``groups_per_step`` places, or of ``rows_per_step`` experiences when given."""
        self.groups_per_step = groups_per_step
        self.rows_per_step = rows_per_step
        #: ``[stored group sizes in storage order, dropped places]`` per batch.
        self.batches: collections.deque[tuple[list[int], int]] = collections.deque()
        #: Stored groups the sample strategy consumed before their batch was added (see :meth:`absorb`).
        self.owed = 0

    def add(self, sizes: list[int], dropped: int) -> None:
        """Add an explored batch: the experience count of each stored group, in order, and its dropped groups."""
        paid = min(self.owed, len(sizes))
        self.owed -= paid
        sizes = list(sizes[paid:])
        if sizes or dropped:
            self.batches.append((sizes, int(dropped)))

    def places(self) -> int:
        """Return the places not yet taken."""
        return sum(len(sizes) + dropped for sizes, dropped in self.batches)

    def next_step(self, final: bool = False) -> StepTake | None:
        """Return what the next step takes, or None until enough is explored (``final``: whatever is left)."""
        steps = self._steps(limit=1, final=final)
        return steps[0] if steps else None

    def full_steps(self) -> int:
        """Return how many whole steps the untaken places make."""
        return len(self._steps(limit=None, final=False))

    def _steps(self, limit: int | None, final: bool) -> list[StepTake]:
        """Return the successive steps the untaken places make (at most ``limit``); the last only if ``final``."""
        steps: list[StepTake] = []
        places = groups = rows = 0
        for sizes, dropped in self.batches:
            for size in sizes:
                if self._full(places, groups, rows, size):
                    steps.append(StepTake(places, groups, rows))
                    if limit is not None and len(steps) >= limit:
                        return steps
                    places = groups = rows = 0
                places, groups, rows = places + 1, groups + 1, rows + size
            for _ in range(dropped):
                if self.rows_per_step is None and places >= self.groups_per_step:
                    steps.append(StepTake(places, groups, rows))
                    if limit is not None and len(steps) >= limit:
                        return steps
                    places = groups = rows = 0
                places += 1
        if places and (self._complete(places, rows) or final):
            steps.append(StepTake(places, groups, rows))
        return steps[:limit] if limit is not None else steps

    def _full(self, places: int, groups: int, rows: int, size: int) -> bool:
        """Whether a step holding ``places``/``groups``/``rows`` is closed before a stored group of ``size``."""
        if self.rows_per_step is None:
            return places >= self.groups_per_step
        return groups > 0 and rows + size > self.rows_per_step

    def _complete(self, places: int, rows: int) -> bool:
        """Whether a step holding ``places``/``rows`` is whole without what is not explored yet."""
        if self.rows_per_step is None:
            return places >= self.groups_per_step
        return rows >= self.rows_per_step

    def take(self, places: int) -> tuple[int, int]:
        """Take ``places`` from the oldest batches (a batch's stored groups first); return its groups and rows."""
        groups = rows = 0
        while places and self.batches:
            sizes, dropped = self.batches[0]
            stored = min(len(sizes), places)
            groups += stored
            rows += sum(sizes[:stored])
            del sizes[:stored]
            places -= stored
            gone = min(dropped, places)
            places -= gone
            self.batches[0] = (sizes, dropped - gone)
            if not sizes and dropped == gone:
                self.batches.popleft()
        return groups, rows

    def absorb(self, groups: int) -> None:
        """Remove ``groups`` stored groups from the oldest batches: the sample strategy already consumed them.

        Groups of batches not added yet are removed from them when they come.
        """
        for sizes, _ in self.batches:
            if not groups:
                break
            gone = min(len(sizes), groups)
            del sizes[:gone]
            groups -= gone
        self.owed += groups
        while self.batches and self.batches[0] == ([], 0):
            self.batches.popleft()

    def state(self) -> list[list[Any]]:
        """Return the batches as JSON: ``[[sizes...], dropped]`` each, then ``["owed", n]`` when groups are owed."""
        batches: list[list[Any]] = [[list(sizes), dropped] for sizes, dropped in self.batches]
        return batches + ([["owed", self.owed]] if self.owed else [])

    def load(self, state: list[list[Any]], group_size: int) -> None:
        """Restore :meth:`state`; a checkpoint written before group sizes were kept holds ``[stored, dropped]``."""
        self.batches.clear()
        self.owed = 0
        for stored, dropped in state:
            if stored == "owed":
                self.owed = int(dropped)
                continue
            sizes = [int(n) for n in stored] if isinstance(stored, list) else [group_size] * int(stored)
            if sizes or dropped:
                self.batches.append((sizes, int(dropped)))
