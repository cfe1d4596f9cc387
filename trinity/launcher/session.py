"""What every mode needs before it starts: the model folder, Ray, the device decision, the layout, the run folder."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from trinity import device
from trinity.common.config.schema import Config
from trinity.common.config.validator import Layout, resolve_layout
from trinity.common.ray_connect import RayConnection, connect, disconnect
from trinity.device.selection import Selection

logger = logging.getLogger("trinity.launcher")


@dataclass
class Session:
    """A prepared run: Ray connected, backend selected, layout checked."""

    config: Config
    connection: RayConnection
    selection: Selection
    layout: Layout
    run_dir: Path

    def close(self) -> None:
        """Disconnect from Ray (stopping a cluster this process started)."""
        disconnect(self.connection)


def run_dir_of(config: Config) -> Path:
    """Return ``<checkpoint_root_dir>/<project>/<name>``."""
    return Path(config.checkpoint_root_dir) / config.project / config.name


def open_session(config: Config) -> Session:
    """Build the model if asked, connect Ray, select the device backend from the cluster, validate the layout."""
    import ray

    if config.model.tiny is not None and not (Path(config.model.model_path) / "config.json").is_file():
        from trinity.common.models.tiny import build_tiny_model

        logger.info("building the tiny model at %s", config.model.model_path)
        build_tiny_model(config.model.model_path, config.model.tiny)
    connection = connect(config.cluster.ray_address)
    try:
        resources = ray.cluster_resources()  # type: ignore[no-untyped-call]
        selection = device.select_backend(config.cluster.device, cluster_resources=resources)
        layout = resolve_layout(config, selection.backend, resources)
        if layout.engines:
            check_engine_requirements(config, alive_nodes=len([n for n in ray.nodes() if n.get("Alive")]))  # type: ignore[no-untyped-call]
    except BaseException:
        disconnect(connection)
        raise
    config.trainer.use_torch_compile = layout.use_torch_compile
    run_dir = run_dir_of(config)
    run_dir.mkdir(parents=True, exist_ok=True)
    logger.info(
        "device backend %s (%s); %d engine(s), %d trainer(s), sync %s; run folder %s",
        selection.name, selection.reason, layout.engines, layout.trainers, layout.sync_method, run_dir,
    )
    return Session(config, connection, selection, layout, run_dir)


def check_engine_requirements(config: Config, alive_nodes: int) -> None:
    """Fail early when the engine type cannot start: an error on a one-node cluster, a warning on a larger one.

    The driver may run on a head node without the engine's runtime (vLLM)
    while the engine nodes have it; on one node, the engines would run right
    here, so a missing runtime is certain to fail. Raises ConfigError (or
    UnknownNameError for an unknown engine type).
    """
    from trinity.common.config.loader import ConfigError
    from trinity.common.models.engines import ENGINES

    engine_cls = ENGINES.get(config.explorer.engine_type)()
    check = getattr(engine_cls, "missing_requirement", None)
    problem = check() if check is not None else None
    if problem is None:
        return
    if alive_nodes <= 1:
        raise ConfigError(problem)
    logger.warning("%s (on the driver's node; the engine nodes must have it)", problem)
