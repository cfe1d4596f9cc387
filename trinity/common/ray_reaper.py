"""Fate-sharing for a local Ray cluster: when the driver that started it dies, its processes go at once.

When a driver is killed (SIGKILL, the OOM killer), Ray's GCS and raylet
follow within seconds, but the raylet's agents (the dashboard and runtime-env
agents) first try to report the raylet's death to the GCS that is gone and
linger for a minute or more, holding a few hundred MB. A driver that starts a
local cluster therefore starts a reaper beside it: a small process that
reads a pipe from the driver and, every second, notes the cluster's
processes (the node processes Ray started and all their descendants). When
the pipe closes without the driver having said ``done`` (the driver died),
the reaper sends SIGTERM to every noted process still alive, then SIGKILL to
those still alive two seconds later, and exits. A driver that disconnects
normally says ``done`` after Ray has shut down, and the reaper exits without
touching anything.

Only processes descended from the node processes this driver's Ray started
are touched, each checked by its start time so a reused process id is never
signalled; a cluster the driver joined is not its to reap. Linux only
(``/proc``); elsewhere no reaper starts.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

logger = logging.getLogger(__name__)

#: Seconds between two looks at the cluster's process tree.
SCAN_INTERVAL_S = 1.0
#: Seconds between SIGTERM and SIGKILL when the driver died.
KILL_GRACE_S = 2.0
_PROC = Path("/proc")
_DONE = b"done\n"

_reaper: subprocess.Popen[bytes] | None = None


def _stat(pid: int) -> tuple[int, int] | None:
    """Return ``(parent pid, start time)`` of ``pid`` from ``/proc``, or None when it is gone."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses
    return int(fields[1]), int(fields[19])


def _children_by_parent() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                children.setdefault(stat[0], []).append(int(entry.name))
    return children


def scan(noted: dict[int, int], roots: list[int]) -> None:
    """Add to ``noted`` (pid -> start time) the live ``roots`` and every live descendant of a noted process."""
    children = _children_by_parent()
    stack = [pid for pid in roots if pid not in noted and pid not in _never()]
    stack += [pid for pid in noted if _alive(pid, noted[pid])]
    while stack:
        pid = stack.pop()
        if pid not in noted:
            stat = _stat(pid)
            if stat is None:
                continue
            noted[pid] = stat[1]
        stack.extend(child for child in children.get(pid, ()) if child not in noted and child not in _never())


def _never() -> set[int]:
    """Processes a reaper never notes: init, itself and its parent (the driver, or whoever started it)."""
    return {1, os.getpid(), os.getppid()}


def _alive(pid: int, started: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[1] == started


def reap(noted: dict[int, int], grace_s: float = KILL_GRACE_S) -> list[int]:
    """SIGTERM every noted process still alive, SIGKILL those left after ``grace_s``; return the pids signalled."""
    signalled = []
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
        alive = [pid for pid, started in noted.items() if _alive(pid, started)]
        for pid in alive:
            try:
                os.kill(pid, sig)
            except OSError:
                continue
            if pid not in signalled:
                signalled.append(pid)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(_alive(pid, noted[pid]) for pid in alive):
            time.sleep(0.05)
    return signalled


def watch(pipe: IO[bytes], roots: list[int], interval_s: float = SCAN_INTERVAL_S) -> bool:
    """Note the cluster's processes until ``pipe`` closes; reap them unless the driver said done (return True then)."""
    noted: dict[int, int] = {}
    fd = pipe.fileno()
    received = b""
    while True:
        scan(noted, roots)
        ready, _, _ = select.select([fd], [], [], interval_s)
        if not ready:
            continue
        chunk = os.read(fd, 64)
        if chunk:
            received += chunk
            continue
        if received.endswith(_DONE):
            return False
        scan(noted, roots)  # the driver is gone: a last look, then everything noted goes
        reap(noted)
        return True


def node_process_ids() -> list[int]:
    """Return the pids of the node processes (GCS, raylet, monitors) Ray started in this process; [] if unknown."""
    try:
        from ray._private import worker

        node = worker._global_node
        if node is None:
            return []
        return [info.process.pid for infos in node.all_processes.values() for info in infos
                if getattr(info, "process", None) is not None]
    except Exception:  # noqa: BLE001 - a Ray private API that may change: no reaper rather than a failed run
        return []


def start(roots: list[int]) -> None:
    """Start the reaper for the cluster whose node processes are ``roots`` (no-op off Linux or without roots)."""
    global _reaper
    stop()
    if not roots or not _PROC.is_dir() or sys.platform != "linux":
        return
    _reaper = subprocess.Popen(
        [sys.executable, "-m", "trinity.common.ray_reaper", *map(str, roots)],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C in the terminal reaches the driver, which stops Ray itself
    )


def stop() -> None:
    """Tell the reaper the driver is done (Ray has shut down) and wait for it to exit."""
    global _reaper
    process, _reaper = _reaper, None
    if process is None or process.stdin is None:
        return
    try:
        process.stdin.write(_DONE)
        process.stdin.close()
        process.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        process.kill()
        process.wait()


def own_roots(candidates: list[int], driver: int) -> list[int]:
    """Return the ``candidates`` that are children of ``driver``: the only processes a reaper may start from."""
    roots = []
    for pid in candidates:
        stat = _stat(pid)
        if pid > 1 and driver > 1 and stat is not None and stat[0] == driver:
            roots.append(pid)
    return roots


def main(argv: list[str]) -> int:
    """Entry of the reaper: ``python -m trinity.common.ray_reaper ROOT_PID...`` (roots: the driver's children)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    roots = own_roots([int(arg) for arg in argv if arg.isdigit()], os.getppid())
    if roots:
        watch(sys.stdin.buffer, roots)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
