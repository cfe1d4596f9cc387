"""The processes of a run started in its own session (``start_new_session=True``): list them, kill them all.

A run's Ray workers share its session but not its process group (each
worker leads a group of its own), so ``os.killpg`` on the driver leaves them
running for a while: long enough to finish a step and save a checkpoint. A
test that simulates a crash kills the whole session and waits for it to be
gone before it reads what the run left on disk.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def session_pids(session: int) -> list[int]:
    """Return the live processes of the session ``session`` (a run's driver, its Ray cluster, its workers)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def kill_session(session: int, timeout: float = 30) -> None:
    """SIGKILL every process of ``session`` until none is left; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while pids := session_pids(session):
        assert time.monotonic() < deadline, f"processes of session {session} outlived SIGKILL: {pids}"
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def signal_session(session: int, signum: int) -> list[int]:
    """Send ``signum`` to every live process of ``session`` at once (as Slurm signals a job); return their pids."""
    pids = session_pids(session)
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass
    return pids
