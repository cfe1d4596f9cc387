"""The ledger counts what the fault tests report."""

from __future__ import annotations

import json
from pathlib import Path

from tests.faults.ledger import FaultLedger


def test_ledger_totals_cases_kills_and_lost_steps(tmp_path: Path) -> None:
    ledger = FaultLedger()
    ledger.case("driver-kill", seed=7)
    ledger.case("lock-busy")
    ledger.kill("driver")
    ledger.kill("driver")
    ledger.kill("engine")
    ledger.lost(0)
    assert ledger.line() == "fault suite: 2 cases, 3 kills injected (driver 2, engine 1), steps lost 0"
    ledger.write(tmp_path / "summary.json")
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data == {
        "cases": 2,
        "kills": 3,
        "kills_by_target": {"driver": 2, "engine": 1},
        "steps_lost": 0,
        "seeds": {"driver-kill": 7},
        "replay": {},
    }
    ledger.replay_uses("replay", [2, 1, 2, 2], limit=2)
    assert ledger.line().endswith("steps lost 0; replay: groups by uses {1: 1, 2: 3}, bound 2")
