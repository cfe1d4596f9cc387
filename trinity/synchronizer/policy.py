"""When weights are synced, and how far the explorer may run ahead of the trainer.

Steps count from 1. Trainer step ``s`` trains on the experiences of explorer
step ``s``; after trainer step ``s`` the policy's *version* is ``s`` (version 0
is the initial model). With ``sync_interval = N`` the trainer syncs after
steps ``N, 2N, ...``; with ``sync_offset = o`` the explorer may run ``o``
steps further ahead than strict alternation allows:

* explorer step ``k`` needs weights of at least version
  ``required_version(k) = max(0, floor((k - 1 - o) / N) * N)``;
* so with ``N = 1, o = 0`` (strictly on-policy) step ``k`` uses version ``k - 1``;
  with ``N = 2`` steps 1-2 use version 0, steps 3-4 version 2; with ``o = 1``
  steps 1 and 2 both use version 0, step 3 version 1 (one step off-policy).

The launcher asks :meth:`SyncPolicy.should_sync` after each trainer step and
:meth:`SyncPolicy.can_explore` before each explorer step.
"""

from __future__ import annotations

from dataclasses import dataclass

from trinity.common.config.plan.run import SyncPlan


@dataclass(frozen=True)
class SyncPolicy:
    """``sync_interval`` and ``sync_offset`` semantics in one place."""

    interval: int = 1
    offset: int = 0

    def __post_init__(self) -> None:
        if self.interval < 1:
            raise ValueError(f"synchronizer.sync_interval: must be at least 1, got {self.interval}")
        if self.offset < 0:
            raise ValueError(f"synchronizer.sync_offset: must be 0 or more, got {self.offset}")

    @classmethod
    def from_config(cls, config: SyncPlan) -> SyncPolicy:
        """Return the policy of a run's sync settings."""
        return cls(interval=config.interval, offset=config.offset)

    def should_sync(self, trainer_step: int) -> bool:
        """Return whether the weights are synced right after trainer step ``trainer_step`` (1-based)."""
        return trainer_step >= 1 and trainer_step % self.interval == 0

    def required_version(self, explorer_step: int) -> int:
        """Return the oldest weights version explorer step ``explorer_step`` (1-based) may run with."""
        if explorer_step < 1:
            raise ValueError(f"explorer steps count from 1, got {explorer_step}")
        ahead = explorer_step - 1 - self.offset
        return max(0, (ahead // self.interval) * self.interval) if ahead > 0 else 0

    def can_explore(self, explorer_step: int, synced_version: int) -> bool:
        """Return whether explorer step ``explorer_step`` may start while the engines hold ``synced_version``."""
        return synced_version >= self.required_version(explorer_step)

    def staleness(self, explorer_step: int, synced_version: int) -> int:
        """Return how many trainer steps behind the newest possible policy explorer step ``explorer_step`` runs."""
        return max(0, explorer_step - 1 - synced_version)

    @property
    def max_lead(self) -> int:
        """The most explorer steps that can be completed beyond the trainer's last synced step."""
        return self.interval + self.offset

    def sync_steps(self, total_steps: int) -> list[int]:
        """Return the trainer steps after which a sync happens, up to ``total_steps``."""
        return [step for step in range(1, total_steps + 1) if self.should_sync(step)]
