"""``sqlite``: experiences persisted in an SQLite file through SQLAlchemy 2.

Each experience is one row of ``experiences``: the JSON of
:meth:`Experience.to_dict` plus indexed columns (``group_id``,
``model_version``, ``consumed``). Rows are read in insertion order and marked
consumed in the same transaction, so:

* a write is atomic (one transaction per ``put``) and contiguous;
* several writers and readers, in any Ray actors or processes, share the file
  (WAL journal, busy timeout, every transaction ``BEGIN IMMEDIATE``): each row
  is read by exactly one reader;
* a new storage object on the same file (after a restart) sees every earlier
  row and continues after the last consumed one. Because rows are claimed in
  order, the consumed rows are always a prefix: the read position is the
  largest consumed id (``state_dict``), and ``load_state_dict`` rewinds or
  advances to a checkpoint's position;
* ids are never reused, so the write end is the largest id
  (``end_position``) and ``truncate`` deletes the rows written after it
  (and reopens a closed storage);
* ``put_marked`` stores a writer's mark (mode explore's task position) in the
  same transaction as its experiences, so after a kill the mark says exactly
  which write landed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, Index, String, Text, create_engine, delete, event, func, insert, select, update
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from trinity.buffer.errors import BufferExhaustedError, StorageClosedError, StorageError, StorageTimeoutError
from trinity.buffer.storage.base import (
    STORAGES,
    Deadline,
    ExperienceStorage,
    check_count,
    dump_experience,
    load_experience,
    resolve_path,
    seconds,
)
from trinity.common.config.plan.data import StoragePlan
from trinity.common.experience import Experience
from trinity.errors import EXIT_USAGE, describe_storage_error, storage_error

#: Key of the ``buffer_state`` row that says the writers closed the storage.
CLOSED_KEY = "closed"
#: Prefix of the ``buffer_state`` keys that hold writers' marks (:meth:`SQLiteStorage.put_marked`).
_MARK_PREFIX = "mark/"
#: Where the failed writes of a full or read-only buffer file can be moved, as a storage error's fix names it.
_PATH_SETTING = "the storage's path (or checkpoint_root_dir)"


class _Base(DeclarativeBase):
    pass


class ExperienceRow(_Base):
    """One stored experience."""

    __tablename__ = "experiences"
    __table_args__ = (Index("ix_experiences_consumed_id", "consumed", "id"), {"sqlite_autoincrement": True})

    #: Insertion order (never reused).
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    #: The experience's group (all rollouts of one task).
    group_id: Mapped[str] = mapped_column(String, index=True)
    #: Its index within the group.
    run_id: Mapped[int]
    #: Policy version that generated it.
    model_version: Mapped[int] = mapped_column(index=True)
    #: Its reward, for queries and inspection.
    reward: Mapped[float | None]
    #: Whether a reader has taken it.
    consumed: Mapped[bool] = mapped_column(default=False)
    #: Unix time of the write.
    created_at: Mapped[float]
    #: ``Experience.to_dict()`` as JSON.
    data: Mapped[str] = mapped_column(Text)


class StateRow(_Base):
    """Small key/value facts about the storage (whether it is closed)."""

    __tablename__ = "buffer_state"

    key: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[str] = mapped_column(Text)


def open_engine(path: Path, busy_timeout: float, metadata: Any = None) -> Engine:
    """Return an engine on ``path`` in WAL mode whose transactions all start with ``BEGIN IMMEDIATE``.

    Creates the file and the tables of ``metadata`` (default: the storage's) when missing (safely when several
    processes do it at once). Raises StorageError when the file cannot be used.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"sqlite storage: cannot create folder {path.parent} ({exc.strerror})") from None
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": busy_timeout, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        # autocommit at the driver level: SQLAlchemy's "begin" event below emits our own BEGIN
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = FULL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection: Any) -> None:
        # take the write lock up front: read-then-claim cannot interleave with another reader
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    try:
        with engine.begin() as connection:
            (metadata if metadata is not None else _Base.metadata).create_all(connection)
    except SQLAlchemyError as exc:
        engine.dispose()
        disk = storage_error(exc)
        if disk is not None:
            disk.filename = disk.filename or str(path)
            raise StorageError(
                f"sqlite storage: cannot create {path}: {describe_storage_error(disk, _PATH_SETTING)}",
                exit_code=EXIT_USAGE,
            ) from None
        raise StorageError(f"sqlite storage: {path} is not a usable SQLite database ({_first_line(exc)})") from None
    return engine


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc)
    return text.splitlines()[0] if text else type(exc).__name__


@STORAGES.register("sqlite")
class SQLiteStorage(ExperienceStorage):
    """Experiences in an SQLite file; see the module docstring."""

    storage_type = "sqlite"

    def __init__(
        self, path: str | Path, name: str = "experience", *, busy_timeout: float = 30.0, poll_interval: float = 0.05
    ) -> None:
        """Open (or create) the storage file at ``path``; raises StorageError when it is unusable."""
        super().__init__(name)
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        self.poll_interval = poll_interval
        self._closed_here = False
        self._engine: Engine | None = open_engine(self.path, busy_timeout)

    @classmethod
    def from_config(cls, config: StoragePlan, *, name: str, run_dir: str | Path) -> SQLiteStorage:
        """Return the storage at ``config.path`` (default ``<run_dir>/buffer/<name>.sqlite``)."""
        return cls(resolve_path(config.path, run_dir, name, ".sqlite"), name)

    def describe(self) -> str:
        """Return the storage's name and file for messages."""
        return f"sqlite storage {self.name!r} ({self.path})"

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (reopened after unpickling)."""
        if self._engine is None:
            self._engine = open_engine(self.path, self.busy_timeout)
        return self._engine

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_engine"] = None  # connections do not cross processes
        return state

    def put(self, experiences: Sequence[Experience], timeout: float | None = None) -> None:
        """Insert ``experiences`` in one transaction (all or none); see the base class.

        ``timeout`` is not used: a write waits for the lock up to the busy timeout.
        A put through a new storage object re-opens a storage closed by an earlier run.
        """
        if experiences:
            self._write(experiences, None)

    def put_marked(
        self, experiences: Sequence[Experience], key: str, mark: str, timeout: float | None = None
    ) -> bool:
        """Insert ``experiences`` and set the mark ``key`` in one transaction (all or none); return True."""
        self._write(experiences, (key, mark))
        return True

    def read_mark(self, key: str) -> str | None:
        """Return the mark ``key`` the last :meth:`put_marked` set, or None."""
        try:
            with self.engine.begin() as connection:
                found = connection.execute(select(StateRow.value).where(StateRow.key == _MARK_PREFIX + key)).first()
        except SQLAlchemyError as exc:
            raise self._error("read", exc) from None
        return None if found is None else str(found[0])

    def _write(self, experiences: Sequence[Experience], mark: tuple[str, str] | None) -> None:
        if self._closed_here:
            raise StorageClosedError(f"{self.describe()} is closed for writing; {len(experiences)} experiences refused")
        now = time.time()
        rows = [
            {
                "group_id": e.group_id,
                "run_id": e.run_id,
                "model_version": e.model_version,
                "reward": e.reward,
                "consumed": False,
                "created_at": now,
                "data": dump_experience(e),
            }
            for e in experiences
        ]
        try:
            with self.engine.begin() as connection:
                if rows:
                    connection.execute(insert(ExperienceRow), rows)
                connection.execute(delete(StateRow).where(StateRow.key == CLOSED_KEY))
                if mark is not None:
                    connection.execute(delete(StateRow).where(StateRow.key == _MARK_PREFIX + mark[0]))
                    connection.execute(insert(StateRow).values(key=_MARK_PREFIX + mark[0], value=mark[1]))
        except SQLAlchemyError as exc:
            raise self._error("write", exc) from None

    def get(self, n: int, timeout: float | None = None, *, at_least: int | None = None) -> list[Experience]:
        """Claim and return the oldest ``n`` unconsumed experiences; see the base class."""
        need = check_count(n, at_least)
        deadline = Deadline(timeout)
        wait = self.poll_interval
        while True:
            try:
                with self.engine.begin() as connection:
                    rows = connection.execute(
                        select(ExperienceRow.id, ExperienceRow.data)
                        .where(ExperienceRow.consumed.is_(False))
                        .order_by(ExperienceRow.id)
                        .limit(n)
                    ).all()
                    closed = (
                        connection.execute(select(StateRow.value).where(StateRow.key == CLOSED_KEY)).first() is not None
                    )
                    if len(rows) >= need or (closed and rows):
                        connection.execute(
                            update(ExperienceRow)
                            .where(ExperienceRow.id.in_([r.id for r in rows]))
                            .values(consumed=True)
                        )
                        return [self._decode(row.id, row.data) for row in rows]
            except SQLAlchemyError as exc:
                raise self._error("read", exc) from None
            if closed:
                raise BufferExhaustedError(f"{self.describe()} is closed and every experience has been read")
            if deadline.expired():
                raise StorageTimeoutError(
                    f"{self.describe()}: waited {seconds(timeout)} for {need} experiences, {len(rows)} unread; "
                    "is the explorer running?"
                )
            deadline.sleep(wait)
            wait = min(wait * 2, 0.5)

    def _decode(self, row_id: int, data: str) -> Experience:
        try:
            return load_experience(data)
        except (ValueError, TypeError) as exc:
            raise StorageError(f"{self.describe()}: row {row_id} holds no valid experience ({exc})") from None

    def _error(self, action: str, exc: SQLAlchemyError) -> StorageError:
        disk = storage_error(exc)
        if disk is not None:  # the disk is full or read-only: the user's to fix (exit status 2)
            disk.filename = disk.filename or str(self.path)
            return StorageError(
                f"{self.describe()}: {action} failed: {describe_storage_error(disk, _PATH_SETTING)}",
                exit_code=EXIT_USAGE,
            )
        hint = " (another process held the lock past the busy timeout)" if isinstance(exc, OperationalError) else ""
        return StorageError(f"{self.describe()}: {action} failed: {_first_line(exc)}{hint}")

    def close(self) -> None:
        """Mark the storage closed: readers drain it, then get BufferExhaustedError; this object stops writing."""
        self._closed_here = True
        try:
            with self.engine.begin() as connection:
                connection.execute(delete(StateRow).where(StateRow.key == CLOSED_KEY))
                connection.execute(insert(StateRow).values(key=CLOSED_KEY, value=str(time.time())))
        except SQLAlchemyError as exc:
            raise self._error("close", exc) from None

    def size(self) -> int:
        """Return the number of unconsumed experiences."""
        with self.engine.begin() as connection:
            return int(
                connection.execute(
                    select(func.count()).select_from(ExperienceRow).where(ExperienceRow.consumed.is_(False))
                ).scalar_one()
            )

    def total(self) -> int:
        """Return the number of experiences ever stored, consumed or not."""
        with self.engine.begin() as connection:
            return int(connection.execute(select(func.count()).select_from(ExperienceRow)).scalar_one())

    def state_dict(self) -> dict[str, Any]:
        """Return ``{"read_offset": largest consumed row id}`` (0 when nothing was read)."""
        with self.engine.begin() as connection:
            offset = connection.execute(
                select(func.max(ExperienceRow.id)).where(ExperienceRow.consumed.is_(True))
            ).scalar_one()
        return {"read_offset": int(offset or 0)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Set the read position to a checkpoint's: rows up to ``read_offset`` consumed, every later row unread.

        Raises StorageError when the offset is missing or beyond the stored rows.
        """
        try:
            offset = int(state["read_offset"])
        except (KeyError, TypeError, ValueError):
            raise StorageError(f"{self.describe()}: saved state {state!r} has no integer read_offset") from None
        with self.engine.begin() as connection:
            last = int(connection.execute(select(func.max(ExperienceRow.id))).scalar_one() or 0)
            if not 0 <= offset <= last:
                raise StorageError(
                    f"{self.describe()}: saved read_offset {offset} is outside the stored rows 0..{last}; "
                    "was the buffer file replaced?"
                )
            connection.execute(update(ExperienceRow).values(consumed=ExperienceRow.id <= offset))

    def end_position(self) -> dict[str, Any]:
        """Return ``{"last_id": largest row id}`` (0 when nothing was stored)."""
        with self.engine.begin() as connection:
            return {"last_id": int(connection.execute(select(func.max(ExperienceRow.id))).scalar_one() or 0)}

    def truncate(self, position: dict[str, Any]) -> int:
        """Delete the rows stored after ``position["last_id"]`` and reopen the storage; return how many rows.

        A close is undone with the rows: the writers that closed it are
        being rolled back too. Raises StorageError when the position is
        malformed or beyond the stored rows.
        """
        try:
            keep = int(position["last_id"])
        except (KeyError, TypeError, ValueError):
            raise StorageError(f"{self.describe()}: saved end position {position!r} has no integer last_id") from None
        try:
            with self.engine.begin() as connection:
                last = int(connection.execute(select(func.max(ExperienceRow.id))).scalar_one() or 0)
                if not 0 <= keep <= last:
                    raise StorageError(
                        f"{self.describe()}: saved last_id {keep} is outside the stored rows 0..{last}; "
                        "was the buffer file replaced?"
                    )
                deleted = connection.execute(delete(ExperienceRow).where(ExperienceRow.id > keep)).rowcount
                connection.execute(delete(StateRow).where(StateRow.key == CLOSED_KEY))
        except SQLAlchemyError as exc:
            raise self._error("truncate", exc) from None
        return int(deleted or 0)

    def release(self) -> None:
        """Close the connections (the file and its rows stay)."""
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
