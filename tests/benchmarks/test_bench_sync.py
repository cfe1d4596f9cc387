"""The sync benchmark runs end to end on the quickstart's model and reports what it measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "bench_sync.py"


def test_one_round_with_one_trainer_rank_reports_the_sync_against_the_raw_broadcast(tmp_path: Path) -> None:
    out = tmp_path / "sync.json"
    env = {**os.environ, "RAY_ADDRESS": "local"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--size", "quickstart", "--ranks", "1", "--rounds", "1", "--out", str(out)],
        capture_output=True, text=True, cwd=REPO, env=env, check=False, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    entry = result["ranks"]["1"]
    # every parameter once: the tied lm_head is not sent a second time
    assert entry["bytes"] == result["params"] * 4
    assert len(entry["sync_s"]) == len(entry["raw_s"]) == 1 and entry["sync_s"][0] > 0 and entry["raw_s"][0] > 0
    assert entry["ratio"] == entry["sync_s"][0] / entry["raw_s"][0]
    assert set(entry["added_rss_bytes"]) == {"trainer rank 0", "engine"}
    assert "| 1 |" in done.stdout
