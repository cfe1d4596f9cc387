"""A driver killed with SIGKILL (the OOM killer, `kill -9`) takes its local Ray cluster with it within seconds.

Without the reaper (trinity/common/ray_reaper.py), Ray's dashboard and
runtime-env agents outlived such a driver by 60 to 90 s, holding about 200 MB.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.faults.operator_view import REPO, start, train_steps
from tests.processes import kill_session, session_pids

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the reaper reads /proc (Linux only)")

#: Seconds the run's processes may outlive a killed driver: the reaper's scan, its SIGTERM grace and Ray's exits.
ALLOWED_S = 10


def test_a_killed_driver_leaves_no_ray_process_behind(tmp_path: Path, ray_tmp: Path) -> None:
    raw = yaml.safe_load((REPO / "examples" / "quickstart" / "cpu.yaml").read_text())
    raw["checkpoint_root_dir"] = str(tmp_path / "ckpt")
    raw["buffer"]["total_steps"] = 1000
    raw.setdefault("monitor", {})["progress"] = False
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump(raw))
    run_dir = tmp_path / "ckpt" / raw["project"] / raw["name"]
    log = tmp_path / "run.log"
    process = start(config, log, ray_tmp=ray_tmp)
    try:
        deadline = time.monotonic() + 240
        while not ((run_dir / "metrics.jsonl").is_file() and train_steps(run_dir)):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        before = session_pids(process.pid)
        assert len(before) >= 6, before  # driver, GCS, raylet, agents, engine, trainer
        os.kill(process.pid, signal.SIGKILL)  # the driver alone, as the OOM killer would
        process.wait(30)
        killed = time.monotonic()
        while session_pids(process.pid) and time.monotonic() < killed + ALLOWED_S:
            time.sleep(0.2)
        left = session_pids(process.pid)
        assert left == [], f"{len(left)} of the run's {len(before)} processes outlived the driver by {ALLOWED_S} s"
    finally:
        kill_session(process.pid)
