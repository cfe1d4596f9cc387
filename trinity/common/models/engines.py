"""The inference-engine registry and how the explorer starts engines as Ray actors.

:data:`ENGINES` maps an engine type (``hf``, ``vllm``) to a loader returning
the engine class (loaded lazily: importing an engine may import torch,
transformers or vllm). :func:`create_engines` starts the rollout model's
engines, as Ray actors by default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trinity.common.config.plan.explorer import EnginePlan
from trinity.common.config.plan.run import RunPlan
from trinity.common.models.openai_api.serving import api_options
from trinity.utils.registry import Registry

#: Engine classes by engine type, as loaders (``ENGINES.get("hf")()`` is the class).
ENGINES: Registry[Callable[[], type]] = Registry("inference engine")

#: An engine class may offer ``missing_requirement() -> str | None``: what must be installed for it to start.


def _load_hf() -> type:
    from trinity.common.models.hf_engine import HFEngine

    return HFEngine


def _load_vllm() -> type:
    from trinity.common.models.vllm_engine import VLLMEngine  # imports no vllm: the engine does, when started

    return VLLMEngine


def _load_external() -> type:
    from trinity.common.models.external import ExternalChatEngine

    return ExternalChatEngine


ENGINES.add("hf", _load_hf)
ENGINES.add("vllm", _load_vllm)
ENGINES.add("external", _load_external)


def engine_actor_options(plan: RunPlan, engine_cls: type, engine: EnginePlan | None = None) -> dict[str, Any]:
    """Return the Ray options of one engine actor: its devices, a CPU, concurrency for the runners, worker env.

    An engine with ``tensor_parallel_size`` 1 takes its one device. A larger
    engine takes none itself: its workers (vLLM's executor) take the devices of
    the engine's placement group. An engine class whose ``manages_devices`` is
    true (vLLM) sets its devices' visibility itself, so Ray is told not to.
    """
    from trinity import device
    from trinity.utils.worker_env import quiet_worker_env

    engine = engine or plan.explorer.rollout
    if engine.external is not None:  # an HTTP client: no device, no CPU reserved; the endpoint's URL and key
        import os

        names = (engine.external.base_url_env, engine.external.api_key_env)
        return {"num_cpus": 0, "max_concurrency": plan.explorer.runners_per_engine + 2, "max_restarts": 0,
                "max_task_retries": 0,
                "runtime_env": {"env_vars": {name: os.environ[name] for name in names if name in os.environ}}}
    tp = engine.tensor_parallel_size
    self_managed = bool(getattr(engine_cls, "manages_devices", False))
    env = {**quiet_worker_env(), **plan.explorer.env_vars, **device.worker_env(self_managed_devices=self_managed)}
    options: dict[str, Any] = {
        "num_cpus": plan.cluster.cpus_per_bundle,
        # runners of this engine call it concurrently; the engine combines their requests into batches
        "max_concurrency": plan.explorer.runners_per_engine + 2,
        "runtime_env": {"env_vars": env},
        # Ray never restarts an engine by itself: a restarted actor would serve the model folder's weights at
        # once; the launcher replaces a dead engine and loads the current weights before it serves again
        "max_restarts": 0,
        "max_task_retries": 0,
    }
    options.update(device.ray_actor_resources(1 if tp == 1 else 0))
    return options


def create_engines(
    plan: RunPlan,
    engine_type: str,
    *,
    engine: EnginePlan | None = None,
    as_actors: bool = True,
    options_for: Callable[[int], dict[str, Any]] | None = None,
    **actor_options: Any,
) -> list[Any]:
    """Start the ``engine_num`` engines of an engine group (default: the rollout model's) and return them.

    ``engine_type`` is ``hf`` or ``vllm``. As Ray actors (Ray must be
    initialised) with :func:`engine_actor_options` updated by ``actor_options``
    and by ``options_for(index)`` (e.g. the engine's placement-group
    scheduling strategy), or in this process when ``as_actors`` is False. A
    missing model folder is built first when ``model.tiny`` is set (rollout
    model only). Raises UnknownNameError for an unknown engine type.
    """
    group = engine or plan.explorer.rollout
    if plan.model.tiny is not None and group.name == "rollout" and group.external is None:
        from pathlib import Path

        from trinity.common.models.tiny import build_tiny_model

        if not (Path(plan.model.path) / "config.json").is_file():
            build_tiny_model(plan.model.path, plan.model.tiny)
    return [create_engine(plan, engine_type, index, engine=group, as_actors=as_actors, options_for=options_for,
                          **actor_options) for index in range(group.engine_num)]


def create_engine(
    plan: RunPlan,
    engine_type: str,
    index: int,
    *,
    engine: EnginePlan | None = None,
    as_actors: bool = True,
    options_for: Callable[[int], dict[str, Any]] | None = None,
    **actor_options: Any,
) -> Any:
    """Start engine ``index`` of an engine group, as :func:`create_engines` starts each (also to replace a dead one).

    Returns the Ray actor handle at once (the model loads in the actor), or
    the engine object when ``as_actors`` is False.
    """
    cls = ENGINES.get(engine_type)()
    group = engine or plan.explorer.rollout
    kwargs = cls.plan_kwargs(  # type: ignore[attr-defined]
        group, seed=group.seed + index, verify_checksums=plan.sync.verify_checksums and group.name == "rollout"
    )
    api = api_options(group, index)
    if api is not None:
        kwargs["openai_api"] = api
    if not as_actors:
        return cls(**kwargs)
    import ray

    options = {**engine_actor_options(plan, cls, group), **actor_options, **(options_for(index) if options_for else {})}
    return ray.remote(cls).options(**options).remote(**kwargs)


def shutdown_engines(engines: list[Any], timeout_s: float = 60.0) -> None:
    """Ask every engine to shut down (vLLM stops its workers and processes), then end the Ray actors.

    Failures are logged, never raised: this runs while a job ends, possibly after an error.
    """
    import logging

    log = logging.getLogger(__name__)
    remote = [e for e in engines if hasattr(getattr(e, "shutdown", None), "remote")]
    for engine in engines:
        if engine not in remote:
            try:
                engine.shutdown()
            except Exception as exc:  # noqa: BLE001 - see the docstring
                log.warning("engine shutdown failed: %s", exc)
    if not remote:
        return
    import ray

    try:
        ray.get([e.shutdown.remote() for e in remote], timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        log.warning("engine shutdown failed or timed out: %s", exc)
    for engine in remote:
        try:
            ray.kill(engine)
        except Exception as exc:  # noqa: BLE001 - see the docstring
            log.debug("ending an engine actor: %s", exc)
