"""``<run>/device.json``: which backend the run chose and why, and which devices each of its actors drives.

Written once per run after its actors are up, atomically (a temporary file
renamed over the old one), with one summary line in the log.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from trinity.device.facade import process_group_backend_for
from trinity.launcher.session import Session

logger = logging.getLogger("trinity.launcher")

#: The file's name in the run folder.
DEVICE_RECORD_FILE = "device.json"


def device_record(session: Session, trainer: Any = None, engines: Any = None) -> dict[str, Any]:
    """Return the run's device decision and each actor's devices (trainer ranks, then every engine's workers).

    ``trainer`` is the run's ``FSDPTrainer`` (its ranks report their
    assignment when set up); ``engines`` an ``EngineSet`` whose engine actors
    report one entry per worker.
    """
    backend = session.selection.backend
    info = backend.info
    actors: list[dict[str, Any]] = []
    if trainer is not None:
        for rank, rank_info in enumerate(trainer.rank_info):
            actors.append({"role": "trainer", "name": f"trainer-{rank}", "rank": rank, **rank_info["assignment"]})
    if engines is not None:
        groups = {"rollout": engines.rollout, **engines.auxiliary}
        for group, members in groups.items():
            for index, engine in enumerate(members):
                for worker in _assignments(engine):
                    actors.append(
                        {"role": "engine", "name": f"{group}-{index}", "engine_group": group, "engine": index, **worker}
                    )
    return {
        "backend": session.selection.name,
        "selection_source": session.selection.source,
        "selection_reason": session.selection.reason,
        "device_type": info.device_type,
        "resource_key": info.ray_resource_key,
        "collective": info.collective_backend,
        "process_group_backend": process_group_backend_for(backend),
        "visible_devices_env": info.visible_devices_env,
        "ray": {"address": session.connection.address, "from": session.connection.origin,
                "started_here": session.connection.started_here},
        "actors": actors,
    }


def write_device_record(session: Session, trainer: Any = None, engines: Any = None, folder: Path | None = None) -> Path:
    """Write ``device.json`` (see :func:`device_record`) into ``folder`` (default: the run folder), log its
    summary line and return its path."""
    from trinity.utils.fs import write_text_atomic

    record = device_record(session, trainer, engines)
    target = folder if folder is not None else session.run_dir
    target.mkdir(parents=True, exist_ok=True)
    path = target / DEVICE_RECORD_FILE
    write_text_atomic(path, json.dumps(record, indent=2) + "\n")
    logger.info("%s", summary(record))
    return path


def summary(record: dict[str, Any]) -> str:
    """Return the one-line summary of a device record, such as

    ``device: acme (...) collective gloo; trainer 2 rank(s) on devices [0,1]@node 1a2b3c4d; rollout-0 [2]@node ...``
    """
    parts = [f"device: {record['backend']} ({record['selection_reason']}) collective {record['collective']}"]
    trainers = [a for a in record["actors"] if a["role"] == "trainer"]
    if trainers:
        parts.append(f"trainer {len(trainers)} rank(s) on devices {_where(trainers)}")
    names = list(dict.fromkeys(a["name"] for a in record["actors"] if a["role"] == "engine"))
    for name in names:
        parts.append(f"{name} {_where([a for a in record['actors'] if a['name'] == name])}")
    return "; ".join(parts)


def _where(actors: list[dict[str, Any]]) -> str:
    """``[0,1]@node 1a2b3c4d`` per node the actors run on (``[]`` without devices, ``local`` outside Ray)."""
    by_node: dict[str, list[int]] = {}
    for actor in actors:
        node = actor.get("node_id")
        by_node.setdefault(f"node {node[:8]}" if node else "local", []).extend(actor.get("devices") or [])
    return " ".join(f"[{','.join(map(str, devices))}]@{node}" for node, devices in by_node.items())


def _assignments(engine: Any) -> list[dict[str, Any]]:
    """Return an engine's per-worker assignments (a Ray actor or an in-process engine)."""
    method = engine.device_assignments
    if hasattr(method, "remote"):
        import ray

        return list(ray.get(method.remote()))
    return list(method())
