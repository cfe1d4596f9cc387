"""``trinity convert``: a trainer checkpoint to a Hugging Face model folder.

A trainer checkpoint (see :mod:`trinity.trainer.checkpoint`) holds the actor's
weights as torch.distributed.checkpoint (DCP) shards, one per trainer rank,
plus the model's config and tokenizer files under ``hf/``. Conversion reads
every shard in this one process (DCP's no-process-group mode), so it needs no
process group and no device; it works for a checkpoint written by any
number of ranks. The result, written atomically (a temporary folder beside
the output, then renamed), holds ``config.json``, ``model.safetensors``,
the generation config and the tokenizer, and loads with
``AutoModelForCausalLM.from_pretrained``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path

import torch

from trinity.trainer.checkpoint import CheckpointError, describe, read_state, resolve_checkpoint
from trinity.trainer.manifest import verify

__all__ = ["CheckpointError", "ConversionError", "convert_checkpoint"]


class ConversionError(CheckpointError):
    """A checkpoint could not be converted; the message says what and where (a :class:`CheckpointError`)."""


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _support_folder(checkpoint: Path, state: dict[str, object], model_path: str | None) -> Path:
    bundled = checkpoint / "hf"
    if (bundled / "config.json").is_file():
        return bundled
    for candidate in (model_path, state.get("model_path")):
        if isinstance(candidate, str) and candidate and (Path(candidate) / "config.json").is_file():
            return Path(candidate)
    raise ConversionError(
        f"{checkpoint}: no hf/config.json in the checkpoint and the original model folder is gone; "
        "pass --model-path pointing at the model the run started from"
    )


def convert_checkpoint(
    checkpoint: str | Path,
    output: str | Path,
    *,
    model_path: str | None = None,
    dtype: str | None = None,
    overwrite: bool = False,
    check: bool = True,
) -> Path:
    """Write the actor of ``checkpoint`` (a ``step-N`` folder, or a checkpoint root: its latest) to ``output``.

    ``dtype`` (``float32``/``bfloat16``/``float16``) defaults to the run's
    ``model.dtype``. ``model_path`` is used for config and tokenizer only when the
    checkpoint carries none. With ``check`` the checkpoint's files are first
verified against its manifest. Returns ``output``. Raises :class:`ConversionError`.
    """
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        folder = resolve_checkpoint(checkpoint)
        if check:
            verdict = verify(folder)
            if not verdict.intact:
                raise ConversionError(f"refusing to convert {folder}: it is {describe(verdict)}; convert an intact "
                                      f"checkpoint (`trinity checkpoints verify {folder.parent}` lists them)")
        state = read_state(folder)
    except ConversionError:
        raise
    except CheckpointError as exc:
        raise ConversionError(str(exc)) from exc
    target = Path(output)
    if target.exists() and not overwrite:
        raise ConversionError(f"output {target} exists; choose another folder or pass --overwrite")
    if not (folder / "actor" / ".metadata").is_file():
        raise ConversionError(f"{folder}: no actor weights (actor/.metadata missing); the checkpoint is incomplete")
    support = _support_folder(folder, state, model_path)
    dtype_name = dtype or str(state.get("dtype") or "float32")
    if dtype_name not in _DTYPES:
        raise ConversionError(f"unknown dtype {dtype_name!r}; use one of {', '.join(_DTYPES)}")

    config = AutoConfig.from_pretrained(support)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # type: ignore[no-untyped-call]
    weights = {"model": model.state_dict()}
    try:
        with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
            warnings.filterwarnings("ignore", message=".*single process.*")
            dcp_load(weights, checkpoint_id=str(folder / "actor"), no_dist=True)
    except Exception as exc:
        raise ConversionError(f"{folder}: cannot read the actor weights: {type(exc).__name__}: {exc}") from exc
    missing, unexpected = model.load_state_dict(weights["model"], strict=False)
    if missing or unexpected:
        raise ConversionError(
            f"{folder}: the weights do not fit {config.model_type} (missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]})"
        )
    model.to(_DTYPES[dtype_name])

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        for file in sorted(support.iterdir()):
            if not file.is_file() or file.name == "config.json" or file.name.endswith((".safetensors", ".bin")):
                continue
            if file.name.endswith(".index.json"):
                continue
            shutil.copy2(file, staging / file.name)  # tokenizer, chat template, generation config
        if target.exists():
            aside = target.parent / f".{target.name}.old-{os.getpid()}"
            os.replace(target, aside)
            os.replace(staging, target)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target
