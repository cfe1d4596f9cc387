"""Stop signals of the driver: SIGTERM stops a run the way Ctrl-C does; a second signal ends it at once.

:func:`install` makes the first SIGTERM raise :class:`Terminated` (a
``KeyboardInterrupt``, so every teardown written for Ctrl-C runs for it too)
and the first SIGINT raise ``KeyboardInterrupt`` as Python does. A second
SIGTERM or SIGINT while the first one's stop is under way exits the process at
once with ``128 + signal``. Inside :func:`deferred`, the first SIGTERM only
records the request (:func:`requested`): the loop that entered it stops at its
next step boundary, so it can save a checkpoint of a whole step first.

``ray.init`` replaces the driver's SIGTERM handler; call :func:`install` again
after it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

#: Exit status after SIGTERM, as a shell reports it.
EXIT_TERMINATED = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """The driver received SIGTERM: the run stops and the command exits with :data:`EXIT_TERMINATED`."""


_state = {"signals": 0, "deferring": 0, "requested": False}
_lock = threading.Lock()


def _handle(signum: int, frame: FrameType | None) -> None:
    with _lock:
        _state["signals"] = int(_state["signals"]) + 1
        first = _state["signals"] == 1
    if not first:
        sys.stderr.write(f"trinity: error: {signal.Signals(signum).name} again: exiting at once\n")
        sys.stderr.flush()
        os._exit(128 + signum)
    if signum == signal.SIGTERM and _state["deferring"]:
        _state["requested"] = True
        return
    if signum == signal.SIGTERM:
        raise Terminated()
    raise KeyboardInterrupt()


def install() -> None:
    """Handle SIGTERM and SIGINT in this process as described in the module docstring (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, _handle)
    signal.signal(signal.SIGINT, _handle)


def reset() -> None:
    """Forget signals received so far (a new command in the same process starts afresh)."""
    with _lock:
        _state.update(signals=0, deferring=0, requested=False)


def requested() -> bool:
    """Return True once a SIGTERM arrived inside :func:`deferred` and the run should stop at its next step."""
    return bool(_state["requested"])


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
