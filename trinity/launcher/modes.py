"""Running one resolved plan: open its session and run its mode."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from trinity.common.config.plan.run import RunPlan
from trinity.launcher.lost_actor import lost_actor
from trinity.launcher.session import Session, open_session


def _modes() -> dict[str, Callable[[Session], None]]:
    from trinity.launcher.bench import run_bench
    from trinity.launcher.both import run_both
    from trinity.launcher.explore import run_explore
    from trinity.launcher.serve import run_serve
    from trinity.launcher.train import run_train

    return {"both": run_both, "colocate": run_both, "explore": run_explore, "train": run_train, "bench": run_bench,
            "serve": run_serve}


def run_plan(plan: RunPlan) -> int:
    """Run a resolved plan; return the exit status. The session is closed (Ray disconnected) however the mode ends.

    Raises :class:`~trinity.launcher.lost_actor.ActorLostError` when one of the
    run's Ray actors died and the mode could not go on without it.
    """
    with contextlib.ExitStack() as stack:
        session = open_session(plan)
        stack.callback(session.close)
        try:
            _modes()[plan.mode](session)
        except Exception as exc:
            lost = lost_actor(exc)
            if lost is None:
                raise
            raise lost from exc
    return 0
