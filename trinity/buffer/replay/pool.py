"""The replay pool: groups the trainer may train on again, by priority, persisted in an SQLite file.

A priority queue of groups that survives a kill:

* a group enters the pool when the trainer reads it fresh, and again when its
  cooldown (``reuse_cooldown_time`` seconds after a use) has passed; each
  time the priority function gives its priority and whether it stays;
* the pool serves the highest priority first (first admitted first among
  equals); a use adds 1 to the group's ``use_count`` and sends it into
  cooldown, or out of the pool for good when there is no cooldown (None);
* ``capacity`` bounds the experiences of the groups ready to serve: a group
  that does not fit evicts the lowest-priority ones, unless its own priority
  is lower still, in which case it is the one left out.

Every change belongs to a *tick* (one trainer read). The file keeps each
group, when it was added and removed, and each use with its tick, so
:meth:`ReplayPool.rollback` returns the pool to the end of any earlier tick:
a run resumed from a checkpoint continues with the pool as the checkpoint saw
it, and no group is used more often than its priority function allows.
Groups back from cooldown at that point are admitted again, in the order
their cooldowns ended.
"""

from __future__ import annotations

import bisect
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, Index, MetaData, String, Text, delete, func, insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from trinity.buffer.errors import StorageError
from trinity.buffer.storage.sqlite import open_engine
from trinity.common.experience import Experience

Group = list[Experience]
PriorityFn = Callable[[Sequence[Experience]], tuple[float, bool]]


class _PoolBase(DeclarativeBase):
    metadata = MetaData()


class PoolGroupRow(_PoolBase):
    """A group that entered the pool."""

    __tablename__ = "replay_groups"
    __table_args__ = {"sqlite_autoincrement": True}

    #: Entry order (never reused).
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    #: The group's id.
    group_id: Mapped[str] = mapped_column(String)
    #: Model version that generated it.
    model_version: Mapped[int]
    #: Its experiences.
    rows: Mapped[int]
    #: Tick in which it entered.
    added_tick: Mapped[int] = mapped_column(index=True)
    #: Tick in which it left (evicted, out of uses, no cooldown); None while in the pool.
    removed_tick: Mapped[int | None] = mapped_column(index=True)
    #: A JSON list of ``Experience.to_dict()``.
    data: Mapped[str] = mapped_column(Text)


class PoolUseRow(_PoolBase):
    """One use of a group: the trainer trained on it."""

    __tablename__ = "replay_uses"
    __table_args__ = (Index("ix_replay_uses_entry", "entry"),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    #: ``replay_groups.id`` of the group used.
    entry: Mapped[int]
    #: Tick of the use.
    tick: Mapped[int] = mapped_column(index=True)
    #: Unix time of the use (its cooldown counts from here).
    at: Mapped[float]


class PoolStateRow(_PoolBase):
    """Small facts: the last tick."""

    __tablename__ = "replay_state"

    key: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[str] = mapped_column(Text)


@dataclass
class _Entry:
    """A group in the pool, as held in memory."""

    entry: int
    group: Group
    use_count: int = 0
    last_use: float = 0.0
    #: Priority at its last admission; None while cooling down.
    priority: float | None = None
    #: Order of admission among equal priorities.
    order: int = 0
    ready_at: float = 0.0
    rows: int = field(init=False)

    def __post_init__(self) -> None:
        self.rows = len(self.group)


class ReplayPool:
    """Groups ready to be trained on again, by priority (see the module docstring)."""

    def __init__(
        self,
        path: str | Path,
        *,
        priority_fn: PriorityFn,
        capacity: int = 0,
        cooldown: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Open (or create) the pool file at ``path``; call :meth:`rollback` before use.

        ``capacity`` (experiences, 0: unbounded) bounds the groups ready to
        serve; ``cooldown`` (seconds, None: no reuse) is the wait after a use.
        Raises StorageError when the file cannot be used and ValueError for a
        negative capacity or cooldown.
        """
        if capacity < 0:
            raise ValueError(f"replay capacity must be 0 (unbounded) or positive, got {capacity}")
        if cooldown is not None and cooldown < 0:
            raise ValueError(f"reuse_cooldown_time must not be negative, got {cooldown}")
        self.path = Path(path)
        self.priority_fn = priority_fn
        self.capacity = capacity
        self.cooldown = cooldown
        self.clock = clock
        self._engine: Engine | None = None
        self.tick = 0
        self._entries: dict[int, _Entry] = {}
        #: Ready entries sorted by (-priority, order).
        self._ready: list[tuple[float, int, int]] = []
        self._admitted = 0
        self._pending_removals: list[int] = []
        #: Groups that left since the pool was opened: pushed out by (or refused for) capacity, and retired
        #: (their priority function said no, or they were used without a cooldown to come back from).
        self.counters: dict[str, int] = {"evicted_groups": 0, "retired_groups": 0}

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (opened on first use, also after unpickling)."""
        if self._engine is None:
            self._engine = open_engine(self.path, 30.0, _PoolBase.metadata)
        return self._engine

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_engine"] = None
        return state

    def close(self) -> None:
        """Close the file's connections."""
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None

    def _fail(self, doing: str, exc: SQLAlchemyError) -> StorageError:
        text = str(getattr(exc, "orig", None) or exc).splitlines()
        return StorageError(f"replay pool {self.path}: {doing} failed ({text[0] if text else type(exc).__name__})")

    # -- position --------------------------------------------------------------------------------

    def rollback(self, tick: int) -> int:
        """Return the pool to the end of ``tick`` (0: empty) and reload it; return the groups dropped.

        Groups added after ``tick`` go, uses after it are forgotten and groups
        removed after it come back.
        """
        if tick < 0:
            raise ValueError(f"replay tick must not be negative, got {tick}")
        try:
            with self.engine.begin() as db:
                dropped = db.execute(delete(PoolGroupRow).where(PoolGroupRow.added_tick > tick)).rowcount
                db.execute(delete(PoolUseRow).where(PoolUseRow.tick > tick))
                db.execute(update(PoolGroupRow).where(PoolGroupRow.removed_tick > tick).values(removed_tick=None))
                self._set_tick(db, tick)
                rows = db.execute(
                    select(PoolGroupRow.id, PoolGroupRow.data).where(PoolGroupRow.removed_tick.is_(None))
                    .order_by(PoolGroupRow.id)
                ).all()
                uses = db.execute(
                    select(PoolUseRow.entry, func.count(), func.max(PoolUseRow.at)).group_by(PoolUseRow.entry)
                ).all()
        except SQLAlchemyError as exc:
            raise self._fail(f"rolling back to tick {tick}", exc) from None
        used = {entry: (int(count), float(at)) for entry, count, at in uses}
        self.tick = tick
        self._entries.clear()
        self._ready.clear()
        self._pending_removals = []
        for entry_id, data in rows:
            group = [Experience.from_dict(d) for d in json.loads(data)]
            count, last = used.get(entry_id, (0, 0.0))
            entry = _Entry(entry_id, group, use_count=count, last_use=last)
            self._entries[entry_id] = entry
            if count:
                entry.ready_at = last + (self.cooldown or 0.0)
            else:
                self._admit(entry)
        if self._pending_removals:  # the capacity or the priority function changed since the groups came in
            try:
                with self.engine.begin() as db:
                    self._flush_removals(db)
            except SQLAlchemyError as exc:
                raise self._fail(f"rolling back to tick {tick}", exc) from None
        return int(dropped or 0)

    def begin_tick(self) -> int:
        """Start the next tick (one trainer read); return its number."""
        self.tick += 1
        return self.tick

    @staticmethod
    def _set_tick(db: Any, tick: int) -> None:
        db.execute(delete(PoolStateRow).where(PoolStateRow.key == "tick"))
        db.execute(insert(PoolStateRow).values(key="tick", value=str(tick)))

    # -- contents --------------------------------------------------------------------------------

    def _labelled(self, entry: _Entry) -> Group:
        for exp in entry.group:
            exp.info["model_version"] = int(exp.model_version)
            exp.info["use_count"] = entry.use_count
        return entry.group

    def _ready_rows(self) -> int:
        return sum(self._entries[e].rows for _, _, e in self._ready)

    def _admit(self, entry: _Entry) -> bool:
        """Ask the priority function about ``entry`` and place it; False (and the entry removed) when it left."""
        priority, keep = self.priority_fn(self._labelled(entry))
        if not keep:
            self._remove(entry.entry, evicted=False)
            return False
        if self.capacity:
            free = self.capacity - self._ready_rows()
            victims = []
            for key in reversed(self._ready):  # lowest priority first
                if free >= entry.rows:
                    break
                if -key[0] > priority:
                    self._remove(entry.entry, evicted=True)  # every group it would push out ranks higher
                    return False
                victims.append(key)
                free += self._entries[key[2]].rows
            # a group larger than the capacity pushes every other one out, as a queue admits it when empty
            for key in victims:
                self._ready.remove(key)
                self._remove(key[2], evicted=True)
        entry.priority = float(priority)
        self._admitted += 1
        entry.order = self._admitted
        bisect.insort(self._ready, (-entry.priority, entry.order, entry.entry))
        return True

    def _remove(self, entry_id: int, *, evicted: bool) -> None:
        self._entries.pop(entry_id, None)
        self._pending_removals.append(entry_id)
        self.counters["evicted_groups" if evicted else "retired_groups"] += 1

    def _flush_removals(self, db: Any) -> None:
        if self._pending_removals:
            db.execute(update(PoolGroupRow).where(PoolGroupRow.id.in_(self._pending_removals))
                       .values(removed_tick=self.tick))
            self._pending_removals = []

    def add(self, groups: Sequence[Group]) -> int:
        """Offer fresh groups to the pool (in this tick); return how many it kept."""
        self._pending_removals = []
        kept = 0
        try:
            with self.engine.begin() as db:
                for group in groups:
                    if not group:
                        continue
                    data = json.dumps([e.to_dict() for e in group], separators=(",", ":"))
                    key = db.execute(
                        insert(PoolGroupRow).values(
                            group_id=str(group[0].group_id), model_version=int(group[0].model_version),
                            rows=len(group), added_tick=self.tick, removed_tick=None, data=data,
                        )
                    ).inserted_primary_key
                    assert key is not None
                    entry_id = key[0]
                    entry = _Entry(int(entry_id), list(group))
                    self._entries[entry.entry] = entry
                    kept += int(self._admit(entry))
                self._flush_removals(db)
                self._set_tick(db, self.tick)
        except SQLAlchemyError as exc:
            raise self._fail("storing fresh groups", exc) from None
        return kept

    def refresh(self) -> None:
        """Admit the groups whose cooldown has ended, in the order it ended."""
        now = self.clock()
        back = sorted((e for e in self._entries.values() if e.priority is None and e.ready_at <= now),
                      key=lambda e: (e.ready_at, e.entry))
        if not back:
            return
        self._pending_removals = []
        for entry in back:
            self._admit(entry)
        try:
            with self.engine.begin() as db:
                self._flush_removals(db)
                self._set_tick(db, self.tick)
        except SQLAlchemyError as exc:
            raise self._fail("admitting groups back from cooldown", exc) from None

    def take(self, *, groups: int | None = None, rows: int | None = None) -> list[Group]:
        """Use the highest-priority ready groups: ``groups`` of them, or whole groups up to ``rows`` experiences.

        With ``rows`` the first group is taken whatever its size. Returns
        copies whose ``info["use_count"]`` counts this use too (1 the first
        time, as upstream labels them); each group then cools down, or leaves
        without a cooldown.
        """
        chosen: list[_Entry] = []
        total = 0
        while self._ready:
            entry = self._entries[self._ready[0][2]]
            if groups is not None and len(chosen) >= groups:
                break
            if rows is not None and chosen and total + entry.rows > rows:
                break
            self._ready.pop(0)
            chosen.append(entry)
            total += entry.rows
        if not chosen:
            return []
        now = self.clock()
        self._pending_removals = []
        for entry in chosen:
            entry.use_count += 1
        batch = [[_copy(e) for e in self._labelled(entry)] for entry in chosen]
        for entry in chosen:
            entry.last_use = now
            entry.priority = None
            if self.cooldown is None:
                self._remove(entry.entry, evicted=False)
            else:
                entry.ready_at = now + self.cooldown
        try:
            with self.engine.begin() as db:
                db.execute(insert(PoolUseRow), [{"entry": e.entry, "tick": self.tick, "at": now} for e in chosen])
                self._flush_removals(db)
                self._set_tick(db, self.tick)
        except SQLAlchemyError as exc:
            raise self._fail("recording a use", exc) from None
        return batch

    def ready_groups(self) -> int:
        """Return how many groups are ready to serve now."""
        return len(self._ready)

    def ready_rows(self) -> int:
        """Return the experiences of the groups ready to serve now."""
        return self._ready_rows()

    def cooling_groups(self) -> int:
        """Return how many groups wait for their cooldown to end."""
        return sum(1 for e in self._entries.values() if e.priority is None)

    def next_ready_in(self) -> float | None:
        """Return the seconds until the next cooldown ends (0 when one has), or None when none cools down."""
        ends = [e.ready_at for e in self._entries.values() if e.priority is None]
        return max(0.0, min(ends) - self.clock()) if ends else None

    def use_counts(self) -> dict[str, int]:
        """Return the uses recorded in the file up to the current tick, by group id (for inspection and tests)."""
        try:
            with self.engine.connect() as db:
                found = db.execute(
                    select(PoolGroupRow.group_id, func.count(PoolUseRow.id))
                    .join(PoolUseRow, PoolUseRow.entry == PoolGroupRow.id)
                    .group_by(PoolGroupRow.group_id)
                ).all()
        except SQLAlchemyError as exc:
            raise self._fail("reading use counts", exc) from None
        return {str(group): int(count) for group, count in found}


def _copy(exp: Experience) -> Experience:
    """Return ``exp`` with its own ``info`` dict (the pool keeps labelling its copy)."""
    import dataclasses

    return dataclasses.replace(exp, info=dict(exp.info))
