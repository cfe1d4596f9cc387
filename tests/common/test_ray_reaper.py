"""The reaper beside a driver's local Ray cluster: a killed driver's processes go at once, a finished one's stay.

Real processes stand in for Ray's node processes: a "driver" starts a shell
that starts two sleeps (a root and its descendants, as the raylet and its
agents), then the reaper; the test kills the driver or lets it say done.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trinity.common import ray_reaper

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the reaper reads /proc (Linux only)")

DRIVER = textwrap.dedent("""
    import json, subprocess, sys, time
    from trinity.common import ray_reaper
    root = subprocess.Popen(["bash", "-c", "sleep 300 & sleep 300 & wait"])
    time.sleep(0.3)
    ray_reaper.start([root.pid])
    time.sleep(2 * ray_reaper.SCAN_INTERVAL_S + 0.3)  # the reaper has noted the sleeps
    print(json.dumps({"root": root.pid}), flush=True)
    if sys.argv[1] == "done":
        ray_reaper.stop()
        print("stopped", flush=True)
    time.sleep(300)
""")


def tree(pid: int) -> list[int]:
    """Return ``pid`` and its descendants, read from ``/proc``."""
    children = ray_reaper._children_by_parent()
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(children.get(current, ()))
    return found


def running(pids: list[int], started: dict[int, int]) -> list[int]:
    """Return the ``pids`` still running (not zombies) with their start time unchanged."""
    alive = []
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[19]) == started[pid]:
            alive.append(pid)
    return alive


def start_driver(tmp_path: Path, ending: str) -> tuple[subprocess.Popen[str], list[int], dict[int, int]]:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    driver = subprocess.Popen([sys.executable, str(script), ending], stdout=subprocess.PIPE, text=True)
    assert driver.stdout is not None
    root = json.loads(driver.stdout.readline())["root"]
    if ending == "done":
        assert driver.stdout.readline().strip() == "stopped"
    pids = tree(root)
    started = {pid: ray_reaper._stat(pid)[1] for pid in pids}  # type: ignore[index]
    assert len(pids) == 3
    return driver, pids, started


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_a_killed_driver_s_processes_are_reaped_within_seconds(tmp_path: Path) -> None:
    driver, pids, started = start_driver(tmp_path, "kill")
    try:
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + ray_reaper.KILL_GRACE_S + 3
        while running(pids, started) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert running(pids, started) == []
    finally:
        kill_all(running(pids, started))


def test_a_driver_that_said_done_leaves_everything_alone(tmp_path: Path) -> None:
    driver, pids, started = start_driver(tmp_path, "done")
    try:
        driver.kill()
        driver.wait()
        time.sleep(ray_reaper.KILL_GRACE_S + 1)
        assert running(pids, started) == pids
    finally:
        kill_all(pids)


def test_a_root_that_is_not_the_driver_s_child_is_refused() -> None:
    # the sleep's parent (the shell) exits at once: it is nobody's child here, so no reaper may start from it
    stranger = int(subprocess.run(["bash", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], capture_output=True,
                                  text=True, check=True).stdout)
    started = {stranger: ray_reaper._stat(stranger)[1]}  # type: ignore[index]
    try:
        assert ray_reaper.own_roots([stranger, 1, os.getpid()], os.getpid()) == []
        done = subprocess.run([sys.executable, "-m", "trinity.common.ray_reaper", str(stranger), "1"],
                              stdin=subprocess.DEVNULL, timeout=30, check=False)  # EOF at once: "the driver died"
        assert done.returncode == 0
        assert running([stranger], started) == [stranger]
    finally:
        kill_all([stranger])
