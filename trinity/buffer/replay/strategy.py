"""Experience replay as a sample strategy: fresh groups enter a :class:`ReplayPool`, batches leave it by priority.

:class:`ReplayStrategy` wraps the run's sample strategy (``default``,
``staleness``, ...). Each call reads fresh whole groups through it, as many as
a batch without replay would, adds them to the pool and returns a batch of
the same size made of the highest-priority groups in the pool: fresh ones,
or earlier ones back from their cooldown. The loops' accounting of explored
and trained batches is therefore unchanged.

When no fresh batch is there, :meth:`ReplayStrategy.sample_replay` makes a
batch of pool groups alone, so the trainer can take more steps than the
explorer (upstream's ``sync_style: explorer_driven``; mode ``train`` does it
whenever its buffer has nothing new). Every returned experience carries
``info["use_count"]`` (its uses so far, this one included) and
``info["model_version"]``.

The pool's tick is part of :meth:`state_dict`: a run resumed from a
checkpoint rolls the pool back to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trinity.buffer.errors import StorageTimeoutError
from trinity.buffer.replay.pool import Group, ReplayPool
from trinity.common.experience import Experience


def split_groups(experiences: Sequence[Experience]) -> list[Group]:
    """Return ``experiences`` cut into runs of one group each (an experience without ``group_id`` alone)."""
    groups: list[Group] = []
    for exp in experiences:
        if groups and exp.group_id and groups[-1][0].group_id == exp.group_id:
            groups[-1].append(exp)
        else:
            groups.append([exp])
    return groups


class ReplayStrategy:
    """A sample strategy whose batches come from a replay pool (see the module docstring)."""

    def __init__(self, inner: Any, pool: ReplayPool, *, replay_when_starved: bool = False) -> None:
        """Read fresh groups with ``inner``; ``replay_when_starved``: a read that times out is served by the pool."""
        self.inner = inner
        #: The strategy reading fresh groups (the loops read its group size).
        self.usual = inner
        self.pool = pool
        self.replay_when_starved = replay_when_starved
        self.batch_size = int(inner.batch_size)
        self.batch_rows: int | None = getattr(inner, "batch_rows", None)
        self._opened = False
        self._counts: dict[str, float] = {"replay/reused_groups": 0, "replay/replay_only_batches": 0}
        self._last: dict[str, float] = {}

    # what the loops read of a strategy
    @property
    def count_dropped(self) -> bool:
        """Whether groups the explorer dropped count toward a batch (the inner strategy's setting)."""
        return bool(getattr(self.inner, "count_dropped", False))

    @count_dropped.setter
    def count_dropped(self, value: bool) -> None:
        self.inner.count_dropped = value

    @property
    def last_places(self) -> int:
        """Batch places the last fresh read used (the inner strategy's count)."""
        return int(getattr(self.inner, "last_places", 0))

    @property
    def stats(self) -> dict[str, float]:
        """The inner strategy's counters and the pool's (``replay/...``)."""
        pool = self.pool
        return {
            **dict(getattr(self.inner, "stats", {})),
            **self._counts,
            **self._last,
            "replay/pool_groups": float(pool.ready_groups()),
            "replay/cooling_groups": float(pool.cooling_groups()),
            "replay/evicted_groups": float(pool.counters["evicted_groups"]),
            "replay/retired_groups": float(pool.counters["retired_groups"]),
        }

    def metrics(self) -> dict[str, float]:
        """Return :attr:`stats`."""
        return self.stats

    def describe(self) -> str:
        """Return what the inner strategy reads, and the pool's file."""
        return f"{self.inner.describe()} through the replay pool {self.pool.path}"

    def _open(self) -> None:
        if not self._opened:  # a run that restored no checkpoint starts with an empty pool
            self.pool.rollback(0)
            self._opened = True

    def sample(self, trainer_version: int, timeout: float | None = None, groups: int | None = None) -> list[Experience]:
        """Read a batch's fresh groups, add them to the pool and return as many groups by priority.

        With :attr:`replay_when_starved`, a read that times out returns a batch
        of pool groups instead when the pool holds one. Otherwise raises what
        the inner strategy raises, with the pool unchanged.
        """
        self._open()
        try:
            fresh = self.inner.sample(trainer_version=trainer_version, timeout=timeout, groups=groups)
        except StorageTimeoutError:
            if self.replay_when_starved:
                batch = self.sample_replay(trainer_version)
                if batch:
                    return batch
            raise
        fresh_groups = split_groups(fresh)
        self.pool.begin_tick()
        self.pool.refresh()
        self.pool.add(fresh_groups)
        if self.batch_rows is not None and groups is None:
            taken = self.pool.take(rows=self.batch_rows)
        else:
            taken = self.pool.take(groups=len(fresh_groups))
        return self._record(taken, trainer_version)

    def can_replay(self) -> bool:
        """Whether the pool holds a whole batch ready to serve now (cooldowns that ended included)."""
        self._open()
        if self.pool.next_ready_in() == 0:  # admitting them changes the pool: in a tick of its own, not a saved one
            self.pool.begin_tick()
            self.pool.refresh()
        if self.batch_rows is not None:
            return self.pool.ready_rows() >= self.batch_rows
        return self.pool.ready_groups() >= self.batch_size

    def sample_replay(self, trainer_version: int) -> list[Experience]:
        """Return a batch made of pool groups alone, or [] when the pool holds no whole batch."""
        if not self.can_replay():
            return []
        self.pool.begin_tick()
        if self.batch_rows is not None:
            taken = self.pool.take(rows=self.batch_rows)
        else:
            taken = self.pool.take(groups=self.batch_size)
        self._counts["replay/replay_only_batches"] += 1
        return self._record(taken, trainer_version)

    def _record(self, taken: list[Group], trainer_version: int) -> list[Experience]:
        uses = [int(g[0].info.get("use_count", 1)) for g in taken]
        reused = sum(1 for u in uses if u > 1)
        self._counts["replay/reused_groups"] += reused
        self._last = {
            "replay/batch_reused_groups": float(reused),
            "replay/batch_max_use_count": float(max(uses, default=0)),
            "replay/batch_max_staleness": float(
                max((trainer_version - int(g[0].model_version) for g in taken), default=0)
            ),
        }
        return [e for g in taken for e in g]

    def state_dict(self) -> dict[str, Any]:
        """Return the inner strategy's state and the pool's tick."""
        return {**self.inner.state_dict(), "replay_tick": self.pool.tick}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the inner strategy and roll the pool back to the saved tick (0 when there is none)."""
        self.inner.load_state_dict({k: v for k, v in state.items() if k != "replay_tick"})
        self.restore_pool(int(state.get("replay_tick", 0)))

    def restore_pool(self, tick: int) -> None:
        """Roll the pool back to ``tick`` (a checkpoint's); the inner strategy is left as it is."""
        self.pool.rollback(tick)
        self._opened = True


def replay_pool_path(run_dir: str | Path, name: str) -> Path:
    """Return the pool file of the experience buffer ``name``: ``<run_dir>/buffer/<name>.replay.sqlite``."""
    return Path(run_dir) / "buffer" / f"{name}.replay.sqlite"
