"""What the fault suite injected and what it found: cases run, kills sent, training steps lost.

Every fault test records into the session's :class:`FaultLedger` (the ``fault_ledger`` fixture);
the totals are printed at the end of the run and written as JSON to ``$TRINITY_FAULT_SUMMARY`` when set.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class FaultLedger:
    """Counts of one pytest session's fault injections."""

    cases: list[str] = field(default_factory=list)
    kills: Counter[str] = field(default_factory=Counter)
    steps_lost: int = 0
    seeds: dict[str, int] = field(default_factory=dict)
    #: Per replay case: how many groups were trained 1, 2, ... times in its effective history, and the bound.
    replay: dict[str, dict[str, object]] = field(default_factory=dict)

    def case(self, name: str, seed: int | None = None) -> None:
        """Record that the fault case ``name`` ran (with the seed that chose its fault points, if any)."""
        self.cases.append(name)
        if seed is not None:
            self.seeds[name] = seed

    def kill(self, target: str) -> None:
        """Record one SIGKILL (or other fatal signal) sent to ``target`` (``driver``, ``trainer``, ``engine``...)."""
        self.kills[target] += 1

    def lost(self, steps: int) -> None:
        """Record training steps that no run trained (the suite's invariant says this stays 0)."""
        self.steps_lost += steps

    def replay_uses(self, name: str, uses: list[int], limit: int) -> None:
        """Record the effective use count of each group of the replay case ``name`` and its configured bound."""
        self.replay[name] = {"groups_by_uses": dict(sorted(Counter(uses).items())), "limit": limit}

    def summary(self) -> dict[str, object]:
        """Return the totals as plain data."""
        return {
            "cases": len(self.cases),
            "kills": sum(self.kills.values()),
            "kills_by_target": dict(self.kills),
            "steps_lost": self.steps_lost,
            "seeds": dict(self.seeds),
            "replay": dict(self.replay),
        }

    def line(self) -> str:
        """Return the totals as one line."""
        by_target = ", ".join(f"{target} {count}" for target, count in sorted(self.kills.items())) or "none"
        replay = "".join(f"; {name}: groups by uses {entry['groups_by_uses']}, bound {entry['limit']}"
                         for name, entry in self.replay.items())
        return (
            f"fault suite: {len(self.cases)} cases, {sum(self.kills.values())} kills injected ({by_target}), "
            f"steps lost {self.steps_lost}{replay}"
        )

    def write(self, path: Path) -> None:
        """Write :meth:`summary` as JSON to ``path``."""
        path.write_text(json.dumps(self.summary(), indent=2, sort_keys=True) + "\n")
