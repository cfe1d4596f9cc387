"""The inference-engine registry and how the explorer starts engines as Ray actors.

:data:`ENGINES` maps ``explorer.engine_type`` to a loader returning the
engine class (loaded lazily: importing an engine may import torch,
transformers or vllm). :func:`create_engines` starts ``explorer.engine_num``
engines, as Ray actors by default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trinity.common.config.schema import Config
from trinity.common.registry import Registry

#: Engine classes by ``explorer.engine_type``, as loaders (``ENGINES.get("hf")()`` is the class).
ENGINES: Registry[Callable[[], type]] = Registry("inference engine")


def _load_hf() -> type:
    from trinity.common.models.hf_engine import HFEngine

    return HFEngine


ENGINES.add("hf", _load_hf)


def engine_actor_options(config: Config) -> dict[str, Any]:
    """Return the Ray options of one engine actor: its devices, a CPU, concurrency for the runners, worker env."""
    from trinity import device

    options: dict[str, Any] = {
        "num_cpus": config.cluster.cpus_per_bundle,
        # runners of this engine call it concurrently; the engine combines their requests into batches
        "max_concurrency": config.explorer.runners_per_engine + 2,
        "runtime_env": {"env_vars": device.worker_env()},
    }
    options.update(device.ray_actor_resources(config.explorer.tensor_parallel_size))
    return options


def create_engines(
    config: Config,
    *,
    as_actors: bool = True,
    options_for: Callable[[int], dict[str, Any]] | None = None,
    **actor_options: Any,
) -> list[Any]:
    """Start ``config.explorer.engine_num`` engines of ``config.explorer.engine_type`` and return them.

    As Ray actors (Ray must be initialised) with :func:`engine_actor_options`
    updated by ``actor_options`` and by ``options_for(index)`` (e.g. the
    engine's placement-group scheduling strategy), or in this process when
    ``as_actors`` is False. A missing model folder is built first when
    ``model.tiny`` is set. Raises UnknownNameError for an unknown engine type.
    """
    cls = ENGINES.get(config.explorer.engine_type)()
    if config.model.tiny is not None:
        from pathlib import Path

        from trinity.common.models.tiny import build_tiny_model

        if not (Path(config.model.model_path) / "config.json").is_file():
            build_tiny_model(config.model.model_path, config.model.tiny)
    engines = []
    for index in range(config.explorer.engine_num):
        kwargs = cls.config_kwargs(config.model, config.explorer, seed=config.seed + index)  # type: ignore[attr-defined]
        if not as_actors:
            engines.append(cls(**kwargs))
            continue
        import ray

        options = {**engine_actor_options(config), **actor_options, **(options_for(index) if options_for else {})}
        engines.append(ray.remote(cls).options(**options).remote(**kwargs))
    return engines
