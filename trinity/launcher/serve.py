"""Mode ``serve``: the rollout engines' OpenAI API for programs outside the run, until stopped.

Starts the rollout engines (and auxiliary models) with their API servers,
prints each engine's URL (the rollout model's with the weights it serves:
the checkpoint step and the weights version, as ``/v1/models`` and
``/health`` also say) and writes them to ``<run>/serve.json``. At once and
then every ``explorer.service_status_check_interval`` seconds it loads the
run's newest weights when they are newer than the engines': those a ``train``
job published through the checkpoint sync method (``<run>/sync_weights``),
or the newest intact trainer checkpoint (``<run>/checkpoints/step-N``,
exported once to ``<run>/serve/step-N``), whichever has the higher step. So
a run folder is served from its last checkpoint, and keeps up with a
training job writing into it. Ctrl-C or SIGTERM stops it: the engines and
their servers shut down (the ports are released), and the job exits 0.

Requests that send the ``X-Trinity-Session`` header are recorded by the
engine that served them, as in a run; nothing here turns them into
experiences yet.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from pathlib import Path
from typing import Any

from trinity.launcher.explore import published_weights
from trinity.launcher.placement import place
from trinity.launcher.session import Session
from trinity.launcher.steps import call_all, start_engines

logger = logging.getLogger("trinity.launcher")

#: In the run folder: the URLs mode ``serve`` serves (removed when it stops).
SERVE_FILE = "serve.json"
#: In the run folder: the checkpoints mode ``serve`` exported for its engines.
SERVE_DIR = "serve"


def newest_weights(sync_path: Path, checkpoints: Any, loaded: int, skipped: set[int]
                   ) -> tuple[str, Path, int] | None:
    """Return ``(source, folder, step)`` of the run's newest weights above step ``loaded``, or None.

    ``source`` is ``published`` (the checkpoint sync folder, loadable as it
    is) or ``checkpoint`` (a trainer checkpoint, to export first). A
    checkpoint step in ``skipped`` (found damaged) is not offered again.
    """
    best: tuple[str, Path, int] | None = None
    published = published_weights(sync_path)
    if published is not None and published[1] > loaded:
        best = ("published", published[0], published[1])
    steps = [step for step in checkpoints.complete_steps() if step not in skipped]
    if steps and steps[-1] > max(loaded, best[2] if best is not None else loaded):
        best = ("checkpoint", checkpoints.step_path(steps[-1]), steps[-1])
    return best


def _endpoints(group: str, engines: list[Any]) -> list[dict[str, Any]]:
    described = call_all(engines, "describe")
    out = []
    for index, facts in enumerate(described):
        api = facts.get("openai_api")
        if api is not None:
            out.append({"model": group, "engine": index, "url": api["base_url"],
                        "model_names": api["model_names"]})
    return out


def run_serve(session: Session) -> None:
    """Serve until Ctrl-C or SIGTERM; see the module docstring."""
    from trinity.launcher.bench import export_for_engines
    from trinity.manager.checkpoint_converter import ConversionError
    from trinity.synchronizer.synchronizer import default_sync_path
    from trinity.trainer.checkpoint import CheckpointDir, describe
    from trinity.trainer.manifest import verify
    from trinity.utils import stop
    from trinity.utils.fs import write_text_atomic

    plan = session.plan
    checkpoints = CheckpointDir(session.run_dir / "checkpoints")
    interval = float(plan.config.explorer.service_status_check_interval)
    sync_path = default_sync_path(plan)
    serve_file = session.run_dir / SERVE_FILE
    with contextlib.ExitStack() as stack:
        placement = place(plan, session.layout)
        stack.callback(placement.remove)
        engines = start_engines(session, placement)
        stack.callback(engines.shutdown)
        state: dict[str, Any] = {"loaded": 0, "what": f"the model folder {plan.model.path} (no checkpoint yet)"}
        skipped: set[int] = set()

        def refresh() -> None:
            """Load the run's newest weights when they are newer than the engines' (see the module docstring)."""
            while (found := newest_weights(sync_path, checkpoints, state["loaded"], skipped)) is not None:
                source, folder, step = found
                if source == "checkpoint":
                    verdict = verify(folder)
                    try:
                        if not verdict.intact:
                            raise ConversionError(describe(verdict))
                        folder = export_for_engines(folder, session.run_dir / SERVE_DIR / f"step-{step}")
                    except ConversionError as exc:
                        logger.warning("serve: checkpoint %s cannot be served (%s); serving on without it", folder,
                                       exc)
                        skipped.add(step)
                        continue
                call_all(engines.rollout, "load_checkpoint_weights", str(folder), step)
                what = (f"checkpoint step-{step} ({folder})" if source == "checkpoint"
                        else f"the weights a train job published at step {step} ({sync_path})")
                call_all(engines.rollout, "mark_served_weights", step, what)
                state["loaded"], state["what"] = step, what
                if "printed" in state:  # the first weights are named in the serving lines
                    print(f"serving from now on: {what}, weights version {step}", flush=True)
                return

        try:
            refresh()  # the run's newest weights before the first request
            endpoints = _endpoints("rollout", engines.rollout)
            for aux in plan.explorer.auxiliary:
                if aux.external is None:  # an external endpoint is not served by this job
                    endpoints += _endpoints(aux.name, engines.auxiliary[aux.name])
            write_text_atomic(serve_file, json.dumps({"endpoints": endpoints}, indent=2) + "\n")
            stack.callback(serve_file.unlink, missing_ok=True)
            for endpoint in endpoints:
                weights = (f"; weights: {state['what']}, version {state['loaded']}"
                           if endpoint["model"] == "rollout" else "")
                print(f"serving {endpoint['model']} engine {endpoint['engine']}: {endpoint['url']} "
                      f"(models: {', '.join(endpoint['model_names'])}{weights})", flush=True)
            print(f"endpoints written to {serve_file}; Ctrl-C stops", flush=True)
            state["printed"] = True
            while True:
                time.sleep(interval)
                refresh()
        except KeyboardInterrupt as exc:  # stop.Terminated (SIGTERM) is one too
            logger.warning("serve: %s; shutting the engines down",
                           "SIGTERM" if isinstance(exc, stop.Terminated) else "interrupted")
