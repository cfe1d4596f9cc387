"""A run whose Ray actor died (a trainer rank killed, out of memory or crashed) ends with one line, not Ray's text.

Ray reports a dead actor to its caller as an ``ActorDiedError`` (a
``RayActorError``) whose text runs to a paragraph; :func:`lost_actor` finds one
behind an error and turns it into an :class:`ActorLostError` naming the
actor's role, class and process and how to resume.
"""

from __future__ import annotations

import re

from trinity.errors import TrinityError, error_chain

#: The role of each of the run's actor classes, as its message names it.
ROLES = {"FSDPWorker": "trainer rank", "HFEngine": "rollout engine", "VLLMEngine": "rollout engine"}
_CLASS = re.compile(r"class_name: ([\w.<>]+)")
_PID = re.compile(r"\bpid: (\d+)")


class ActorLostError(TrinityError):
    """A Ray actor of the run died and the run cannot go on without it (exit status 1)."""


def _is_actor_death(error: BaseException) -> bool:
    from ray.exceptions import RayActorError

    return isinstance(error, RayActorError)


def lost_actor(exc: BaseException) -> ActorLostError | None:
    """Return the one-line error for the dead Ray actor behind ``exc``, or None when no actor death is behind it.

    None too when ``exc`` is a :class:`~trinity.errors.TrinityError`: its own line already says what happened.
    """
    if isinstance(exc, TrinityError):
        return None
    for error in error_chain(exc):
        if not _is_actor_death(error):
            continue
        text = str(error)
        found = _CLASS.search(text)
        pid = _PID.search(text)
        process = f" (pid {pid.group(1)})" if pid else ""
        if found:
            name = found.group(1).rpartition(".")[2]
            who = f"its {ROLES.get(name, 'Ray actor')} {name}{process}"
        else:
            who = f"one of its Ray actors{process}"
        return ActorLostError(
            f"the run stopped: {who} died (its process was killed, ran out of memory or crashed); "
            "run the same command again to resume from the newest checkpoint"
        )
    return None
