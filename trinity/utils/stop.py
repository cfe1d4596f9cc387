"""Stop signals of the driver: SIGTERM stops a run the way Ctrl-C does; SIGUSR1 asks it to save and stop.

:func:`install` makes the first SIGTERM raise :class:`Terminated` (a
``KeyboardInterrupt``, so every teardown written for Ctrl-C runs for it too)
and the first SIGINT raise ``KeyboardInterrupt`` as Python does. A second
SIGTERM or SIGINT while the first one's stop is under way exits the process at
once with ``128 + signal``. Inside :func:`deferred` (``trainer.save_on_stop``),
the first SIGTERM only records the request (:func:`requested`): the loop that
entered it stops at its next step boundary, so it can save a checkpoint of a
whole step first.

:data:`SAVE_SIGNAL` (SIGUSR1) is the early warning a batch scheduler sends
ahead of its time limit (Slurm: ``--signal=B:USR1@120``): whatever
``save_on_stop`` says, the run stops at its next step boundary after saving
that step's checkpoint, and exits with ``128 + SIGUSR1``.

When a stop signal reaches every process of the job at once (Slurm's
``scancel`` and its time limit signal the whole job), Ray's own processes
stop with the driver and nothing more can be saved or torn down: a
registered :func:`watch_cluster` probe sees the cluster gone and the process
exits at once with one line, instead of waiting out Ray's reconnection.

``ray.init`` replaces the driver's SIGTERM handler; call :func:`install` again
after it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

#: Exit status after SIGTERM, as a shell reports it.
EXIT_TERMINATED = 128 + signal.SIGTERM
#: The early-warning signal: save the current step's checkpoint, then stop.
SAVE_SIGNAL = signal.SIGUSR1
#: Seconds between two looks at the cluster once a stop signal arrived.
WATCH_EVERY_S = 0.1


class Terminated(KeyboardInterrupt):
    """A stop signal (SIGTERM, or :data:`SAVE_SIGNAL`) ended the run; the command exits with ``128 + signal``."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def name(self) -> str:
        """The signal's name (``SIGTERM``)."""
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """``128 + signal``, as a shell reports it."""
        return 128 + self.signum


_state: dict[str, int | bool] = {"signals": 0, "deferring": 0, "requested": False, "by": 0}
_lock = threading.Lock()
#: ``(cluster answers?, what the run kept)`` of the session, while one is open.
_watch: dict[str, tuple[Callable[[], bool], Callable[[], str]] | None] = {"cluster": None}
_watcher: dict[str, threading.Thread | None] = {"thread": None}


def _handle(signum: int, frame: FrameType | None) -> None:
    if signum == SAVE_SIGNAL:
        with _lock:
            first = not _state["requested"]
            _state["requested"], _state["by"] = True, signum
        if first:
            sys.stderr.write(f"trinity: warning: {signal.Signals(signum).name}: saving the current step's "
                             "checkpoint, then stopping\n")
            sys.stderr.flush()
        _start_watcher(signum)
        return
    with _lock:
        _state["signals"] = int(_state["signals"]) + 1
        first = _state["signals"] == 1
    if not first:
        sys.stderr.write(f"trinity: error: {signal.Signals(signum).name} again: exiting at once\n")
        sys.stderr.flush()
        os._exit(128 + signum)
    _start_watcher(signum)
    if signum == signal.SIGTERM and _state["deferring"]:
        with _lock:
            _state["requested"], _state["by"] = True, signum
        return
    if signum == signal.SIGTERM:
        raise Terminated(signum)
    raise KeyboardInterrupt()


def install() -> None:
    """Handle SIGTERM, SIGINT and :data:`SAVE_SIGNAL` as the module docstring says (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGINT, SAVE_SIGNAL):
        signal.signal(signum, _handle)


def reset() -> None:
    """Forget signals received so far (a new command in the same process starts afresh)."""
    with _lock:
        _state.update(signals=0, deferring=0, requested=False, by=0)


def requested() -> bool:
    """Return True once the run should save its step and stop (SIGTERM inside :func:`deferred`, or SIGUSR1)."""
    return bool(_state["requested"])


def signalled() -> bool:
    """Return True once any stop signal arrived (the run is stopping: no new work, no engine replaced)."""
    return bool(_state["requested"]) or int(_state["signals"]) > 0


def terminated() -> Terminated:
    """Return the :class:`Terminated` of the signal that requested the stop (SIGTERM when none did)."""
    return Terminated(int(_state["by"]) or signal.SIGTERM)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """While inside, the first SIGTERM sets :func:`requested` instead of raising :class:`Terminated`."""
    with _lock:
        _state["deferring"] = int(_state["deferring"]) + 1
    try:
        yield
    finally:
        with _lock:
            _state["deferring"] = int(_state["deferring"]) - 1


def watch_cluster(alive: Callable[[], bool] | None, kept: Callable[[], str] = lambda: "") -> None:
    """Register the open session's cluster probe (None: none); see the module docstring.

    ``alive()`` says whether the Ray cluster still answers (it must return
    within a second); ``kept()`` says what the run has kept (its newest
    checkpoint), for the line printed when the cluster went with the signal.
    """
    _watch["cluster"] = (alive, kept) if alive is not None else None


def _start_watcher(signum: int) -> None:
    with _lock:
        if _watch["cluster"] is None or _watcher["thread"] is not None:
            return
        thread = threading.Thread(target=_exit_when_cluster_gone, args=(signum,), name="trinity-stop-watch",
                                  daemon=True)
        _watcher["thread"] = thread
    thread.start()


def _exit_when_cluster_gone(signum: int) -> None:
    """Once the cluster stops answering after a stop signal, say so in one line and exit at once."""
    while True:
        watched = _watch["cluster"]
        if watched is None:
            with _lock:
                _watcher["thread"] = None
            return
        alive, kept = watched
        try:
            gone = not alive()
        except Exception:  # noqa: BLE001 - a probe that cannot tell says nothing
            gone = False
        if gone:
            name = signal.Signals(signum).name
            what = kept() or "rerun the same command to resume from the newest checkpoint"
            sys.stderr.write(
                f"trinity: error: {name} reached the whole job: Ray's processes stopped with the driver, so nothing "
                f"more can be saved; {what}. To have the current step saved first, send "
                f"{signal.Signals(SAVE_SIGNAL).name} to trinity ahead of the stop (Slurm: sbatch "
                "--signal=B:USR1@120; see docs/slurm.md)\n")
            sys.stderr.flush()
            os._exit(128 + signum)
        time.sleep(WATCH_EVERY_S)
