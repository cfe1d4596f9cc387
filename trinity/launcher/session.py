"""What every mode needs before it starts: the run folder's lock, the model, Ray, the device decision, the layout."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from trinity import device
from trinity.common.config.plan.run import RunPlan
from trinity.common.config.validator import Layout, colocated_plan, resolve_layout
from trinity.common.ray_connect import (
    RayConnection,
    check_address,
    connect,
    describe_connection,
    disconnect,
    gcs_problem,
)
from trinity.device.selection import Selection
from trinity.launcher.run_lock import RunFolderLock, is_lock_file, lock_run_folder
from trinity.monitor.run_log import RunLog
from trinity.utils import stop

logger = logging.getLogger("trinity.launcher")


@dataclass
class Session:
    """A prepared run: Ray connected, backend selected, layout checked."""

    plan: RunPlan
    connection: RayConnection
    selection: Selection
    layout: Layout
    #: The run folder's role locks, held until :meth:`close`; None for a session built without them.
    lock: RunFolderLock | None = None
    #: ``<run>/trinity.log``, written until :meth:`close`; None for a session built without it.
    run_log: RunLog | None = None

    @property
    def run_dir(self) -> Path:
        """The run folder."""
        return self.plan.run_dir

    def close(self) -> None:
        """Disconnect from Ray (stopping a cluster this process started), then let go of the run folder."""
        stop.watch_cluster(None)
        try:
            disconnect(self.connection)
        finally:
            if self.run_log is not None:
                self.run_log.close()
            if self.lock is not None:
                self.lock.release()


def kept_checkpoint(plan: RunPlan) -> str:
    """Return what a run stopped now keeps, for the line of a stop: its newest complete checkpoint, or none."""
    from trinity.trainer.checkpoint import CheckpointDir

    if plan.mode == "explore":
        return "the same command continues after the last batch this job stored"
    if plan.mode == "serve":
        return "mode serve keeps nothing of its own"
    folder = plan.run_dir / "checkpoints"
    steps = CheckpointDir(folder).complete_steps()
    if not steps:
        return "no checkpoint was saved yet: the same command starts the run again"
    newest = folder / f"step-{steps[-1]}"
    return f"its newest checkpoint is step {steps[-1]} ({newest}): the same command resumes from it"


def fresh_run_dir(plan: RunPlan) -> RunPlan:
    """Return ``plan`` moved to a timestamped run folder when it must not continue an existing one.

    As upstream does: with ``continue_from_checkpoint: false`` a run folder
    that already holds files (other than its lock files) gets
    ``<name>_<YYYYmmddHHMMSS>`` (mode bench always reads the existing folder).
    """
    folder = plan.run_dir
    if plan.config.continue_from_checkpoint or plan.mode in ("bench", "serve"):
        return plan
    if not folder.is_dir() or not any(not is_lock_file(entry) for entry in folder.iterdir()):
        return plan
    stamp = time.strftime("%Y%m%d%H%M%S")
    renamed = folder.with_name(f"{folder.name}_{stamp}")
    logger.warning("run folder %s exists and continue_from_checkpoint is false: this run uses %s", folder, renamed)
    return dataclasses.replace(plan, run_dir=renamed)


def open_session(plan: RunPlan) -> Session:
    """Lock the run folder, build the model if asked, connect Ray, select the backend, validate the layout.

    Raises RunFolderBusyError (exit 2) at once when another run holds a role
    this mode needs in the run folder.
    """
    import ray

    from trinity.common.config.precision import check_named_backend
    from trinity.planner.preflight import preflight

    plan = fresh_run_dir(plan)
    with contextlib.ExitStack() as undo:
        # config and address checks first: a refused run leaves no run folder behind
        preflight(plan)  # files and folders, before Ray starts: one line on the first problem
        check_named_backend(plan)  # a dtype an explicitly chosen device cannot compute in, before Ray starts
        check_address(plan.cluster.ray_address)  # an address where no Ray cluster listens, before the model is built
        lock = lock_run_folder(plan.run_dir, plan.mode)  # before anything is written into the run folder
        undo.callback(lock.release)
        model = plan.model
        if model.tiny is not None and not (Path(model.path) / "config.json").is_file():
            from trinity.common.models.tiny import build_tiny_model

            logger.info("building the tiny model at %s", model.path)
            build_tiny_model(model.path, model.tiny)
        connection = connect(plan.cluster.ray_address, namespace=plan.ray_namespace,
                             local_resources=lambda: device.local_ray_resources(plan.cluster.device))
        undo.callback(disconnect, connection)
        stop.install()  # ray.init replaced the driver's SIGTERM handler with one that aborts the process
        gcs = str(ray.get_runtime_context().gcs_address)  # type: ignore[no-untyped-call]
        stop.watch_cluster(lambda: gcs_problem(gcs, timeout_s=0.5) is None, lambda: kept_checkpoint(plan))
        undo.callback(stop.watch_cluster, None)
        resources = ray.cluster_resources()  # type: ignore[no-untyped-call]
        alive = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
        selection = device.select_backend(plan.cluster.device, cluster_resources=resources)
        layout = resolve_layout(plan, selection.backend, resources, alive)
        plan = colocated_plan(plan, layout)
        if layout.engines:
            check_engine_requirements(layout, alive_nodes=len(alive))
        plan.run_dir.mkdir(parents=True, exist_ok=True)
        run_log = RunLog(plan.run_dir)  # from here every INFO line and metric row reaches <run>/trinity.log
        undo.callback(run_log.close)
        undo.pop_all()  # the session owns the connection, the lock and the log from here; Session.close lets go
    logger.info(
        "Ray: %s; device backend %s (%s); %d %s engine(s), %d trainer rank(s), sync %s; run folder %s",
        describe_connection(connection), selection.name, selection.reason, layout.engines, layout.engine_type,
        layout.trainers, layout.sync_method, plan.run_dir,
    )
    for note in plan.notes:
        logger.info("config: %s", note)
    for note in layout.notes:
        logger.info("layout: %s", note)
    if (chose := layout.chose_colocate(plan)) is not None:  # a mode the config does not name: on the console
        logger.warning("%s", chose)
    return Session(plan, connection, selection, layout, lock, run_log)


def check_engine_requirements(layout: Layout, alive_nodes: int) -> None:
    """Fail early when the engine type cannot start: an error on a one-node cluster, a warning on a larger one.

    The driver may run on a head node without the engine's runtime (vLLM)
    while the engine nodes have it; on one node, the engines would run right
    here, so a missing runtime is certain to fail. Raises ConfigError.
    """
    from trinity.common.config.loader import ConfigError
    from trinity.common.models.engines import ENGINES

    engine_cls = ENGINES.get(layout.engine_type)()
    check = getattr(engine_cls, "missing_requirement", None)
    problem = check() if check is not None else None
    if problem is None:
        return
    if alive_nodes <= 1:
        raise ConfigError(problem)
    logger.warning("%s (on the driver's node; the engine nodes must have it)", problem)
