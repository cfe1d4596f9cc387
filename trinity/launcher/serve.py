"""Mode ``serve``: the rollout engines' OpenAI API for programs outside the run, until stopped.

Starts the rollout engines (and auxiliary models) with their API servers,
prints each engine's URL and writes them to ``<run>/serve.json``, then every
``explorer.service_status_check_interval`` seconds loads the weights a
``train`` job published through the checkpoint sync method
(``<run>/sync_weights``), as mode ``explore`` does. Ctrl-C or SIGTERM stops
it: the engines and their servers shut down (the ports are released), and
the job exits 0.

Requests that send the ``X-Trinity-Session`` header are recorded by the
engine that served them, as in a run; nothing here turns them into
experiences yet.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from typing import Any

from trinity.launcher.explore import published_weights
from trinity.launcher.placement import place
from trinity.launcher.session import Session
from trinity.launcher.steps import call_all, start_engines

logger = logging.getLogger("trinity.launcher")

#: In the run folder: the URLs mode ``serve`` serves (removed when it stops).
SERVE_FILE = "serve.json"


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
    from trinity.synchronizer.synchronizer import default_sync_path
    from trinity.utils import stop
    from trinity.utils.fs import write_text_atomic

    plan = session.plan
    interval = float(plan.config.explorer.service_status_check_interval)
    sync_path = default_sync_path(plan)
    serve_file = session.run_dir / SERVE_FILE
    with contextlib.ExitStack() as stack:
        placement = place(plan, session.layout)
        stack.callback(placement.remove)
        engines = start_engines(session, placement)
        stack.callback(engines.shutdown)
        endpoints = _endpoints("rollout", engines.rollout)
        for aux in plan.explorer.auxiliary:
            if aux.external is None:  # an external endpoint is not served by this job
                endpoints += _endpoints(aux.name, engines.auxiliary[aux.name])
        write_text_atomic(serve_file, json.dumps({"endpoints": endpoints}, indent=2) + "\n")
        stack.callback(serve_file.unlink, missing_ok=True)
        for endpoint in endpoints:
            print(f"serving {endpoint['model']} engine {endpoint['engine']}: {endpoint['url']} "
                  f"(models: {', '.join(endpoint['model_names'])})", flush=True)
        print(f"endpoints written to {serve_file}; Ctrl-C stops", flush=True)
        loaded = 0
        try:
            while True:
                published = published_weights(sync_path)
                if published is not None and published[1] > loaded:
                    folder, version = published
                    call_all(engines.rollout, "load_checkpoint_weights", str(folder), version)
                    loaded = version
                    logger.info("serve: engines now hold the published weights of version %d", version)
                time.sleep(interval)
        except KeyboardInterrupt as exc:  # stop.Terminated (SIGTERM) is one too
            logger.warning("serve: %s; shutting the engines down",
                           "SIGTERM" if isinstance(exc, stop.Terminated) else "interrupted")
