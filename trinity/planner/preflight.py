"""Checks of the files a plan names (model folder, task sets, data sets) before Ray or a model starts.

A run calls :func:`preflight` and fails with one line on the first problem;
``trinity run --dry-run`` calls it with ``strict=False``: a problem with a
local file is still an error, but a hub id it cannot reach from here (the
cluster may) is reported as a warning.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trinity.common.config.loader import ConfigError
from trinity.common.config.plan.run import RunPlan


@dataclass
class Preflight:
    """What a preflight found: warnings (strict mode raises instead)."""

    warnings: list[str] = field(default_factory=list)


#: Patterns of the files that hold a model's weights, in any format transformers loads.
WEIGHT_FILES = ("*.safetensors", "*.safetensors.index.json", "*.bin", "*.bin.index.json", "*.pt", "*.pth",
                "*.h5", "*.msgpack", "*.gguf")
#: Files of which a tokenizer needs at least one.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model",
                   "sentencepiece.bpe.model", "tiktoken.model", "tokenizer.tiktoken")


def missing_model_files(folder: Path, *, tokenizer: bool = True) -> list[str]:
    """Return what a model folder lacks of ``config.json``, weights and (with ``tokenizer``) tokenizer files."""
    missing = []
    if not (folder / "config.json").is_file():
        missing.append("config.json")
    if not any(next(folder.glob(pattern), None) is not None for pattern in WEIGHT_FILES):
        missing.append("weights (*.safetensors or *.bin)")
    if tokenizer and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        missing.append("tokenizer files (tokenizer.json, tokenizer.model or vocab.json)")
    return missing


def hub_cached(repo_id: str) -> bool:
    """Return whether the local Hugging Face cache holds ``repo_id``'s ``config.json`` (loadable offline)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # noqa: BLE001 - a malformed id or cache means: not cached
        return False
    return isinstance(found, str)


def check_model_path(path: str, where: str, *, tiny: bool = False, tokenizer: bool = True) -> str | None:
    """Return a warning for a model path that is not a local model folder, or None; raises ConfigError.

    A local folder that lacks ``config.json``, weights or (with ``tokenizer``)
    tokenizer files is not a model (ConfigError naming what is missing). A
    path that does not exist is a hub id or a mistake: None when the model is
    in the local Hugging Face cache or the hub answers (transformers downloads
    it), else a one-line problem the caller raises or reports. With ``tiny`` a
    missing folder is built at run time.
    """
    from trinity.buffer.datasets import hub_reachable, looks_like_hub_id, offline_by_env

    folder = Path(path).expanduser()
    if folder.is_dir():
        missing = missing_model_files(folder, tokenizer=tokenizer)
        if "config.json" in missing:
            raise ConfigError(f"{where}: {path} is a folder but not a Hugging Face model (no config.json); point it "
                              "at a model folder")
        if missing:
            raise ConfigError(f"{where}: {path} is not a complete Hugging Face model folder: "
                              f"no {' and no '.join(missing)}; copy the whole model there (`save_pretrained` of "
                              "the model and its tokenizer) or point the path at one")
        return None
    if folder.exists():
        raise ConfigError(f"{where}: {path} is a file, not a Hugging Face model folder")
    if tiny:
        return None
    if not looks_like_hub_id(path):
        raise ConfigError(f"{where}: {path} does not exist; point it at a Hugging Face model folder")
    if hub_cached(path):
        return None
    if offline_by_env():
        return (f"{where}: {path} is not a local folder nor in the Hugging Face cache, and HF_HUB_OFFLINE / "
                "TRANSFORMERS_OFFLINE forbid downloading it; download it where the hub is reachable (e.g. "
                "`huggingface-cli download <id>`) or point the path at a local model folder")
    if hub_reachable():
        return None
    return (f"{where}: {path} is not a local folder and the Hugging Face hub is not reachable; download the model "
            "first (e.g. `huggingface-cli download <id> --local-dir <folder>`) and point the path at that folder")


def preflight(plan: RunPlan, *, strict: bool = True,
              check_data: Callable[..., str | None] | None = None) -> Preflight:
    """Check the model folder and every data path of ``plan``; return the warnings (strict: raise the first).

    ``check_data(path, split, subset_name, format, where, schema)`` checks one
    task set or data set and returns a problem line or None (default: the
    buffer's fast data-set check).
    """
    from trinity.buffer.datasets import looks_like_hub_id
    from trinity.common.config.loader import in_file

    try:
        return _preflight(plan, strict, check_data or _default_data_check(), looks_like_hub_id)
    except ConfigError as exc:
        raise in_file(plan.config, exc) from None


def _preflight(plan: RunPlan, strict: bool, checker: Callable[..., str | None],
               looks_like_hub_id: Callable[[str], bool]) -> Preflight:
    found = Preflight()

    def report(problem: str | None, path: str) -> None:
        if problem is None:
            return
        if strict or Path(path).expanduser().exists() or not looks_like_hub_id(path):
            raise ConfigError(problem)
        found.warnings.append(problem)

    if plan.explorer.rollout.external is None:  # else model_path names the model at the endpoint
        report(check_model_path(plan.model.path, "model.model_path", tiny=plan.model.tiny is not None),
               plan.model.path)
    critic = plan.trainer.critic
    if critic is not None and critic.path != plan.model.path:
        report(check_model_path(critic.path, "model.critic_model_path", tokenizer=False), critic.path)
    for aux in plan.explorer.auxiliary:
        if aux.external is not None:  # served elsewhere: its model_path is a name at the endpoint
            continue
        policy = Path(plan.model.path).expanduser()
        same_tiny = plan.model.tiny is not None and Path(aux.model_path).expanduser() == policy
        report(check_model_path(aux.model_path, f"explorer.auxiliary_models ({aux.name}).model_path", tiny=same_tiny),
               aux.model_path)  # the policy's tiny model is built before any engine starts
    buffer = plan.buffer
    for taskset in [t for t in (buffer.train_taskset, *buffer.eval_tasksets) if t is not None]:
        report(checker(taskset.path, taskset.split, taskset.subset_name, taskset.format, taskset.where, "task"),
               taskset.path)
    for dataset in [d for d in (buffer.dataset, *buffer.auxiliary.values()) if d is not None]:
        report(checker(dataset.path, dataset.split, dataset.subset_name, dataset.format, dataset.where,
                       dataset.schema), dataset.path)
    return found


def _default_data_check() -> Callable[..., str | None]:
    from trinity.buffer.dataset_check import check_dataset

    def check(path: str, split: str, subset: str | None, fmt: object, where: str,  # noqa: PLR0917
              schema: str) -> str | None:
        # a task set's records may lack the answer (upstream allows it); SFT/DPO records need every key
        problem: str | None = check_dataset(path, split, subset, fmt, where, schema,  # type: ignore[arg-type]
                                            require_response=schema != "task")
        return problem

    return check
