"""``trinity convert``: a trainer checkpoint to a Hugging Face model folder.

A trainer checkpoint (see :mod:`trinity.trainer.checkpoint`) holds the actor's
weights as torch.distributed.checkpoint (DCP) shards, one per trainer rank,
plus the model's config and tokenizer files under ``hf/``. Conversion reads
every shard in this one process (DCP's no-process-group mode), so it needs no
process group and no device; it works for a checkpoint written by any
number of ranks. The result, written atomically (a temporary folder beside
the output, then renamed), holds ``config.json``, ``model.safetensors``,
the generation config and the tokenizer, and loads with
``AutoModelForCausalLM.from_pretrained`` (a vision-language model's with
``AutoModelForImageTextToText``).

A LoRA run's checkpoint holds its adapters only: conversion reads the base
model the run started from (the recorded ``model_path``, or ``--model-path``)
and writes the merged weights, or with ``adapter=True`` the adapters as a PEFT
adapter folder (``adapter_config.json`` + ``adapter_model.safetensors``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

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
    adapter: bool = False,
) -> Path:
    """Write the actor of ``checkpoint`` (a ``step-N`` folder, or a checkpoint root: its latest) to ``output``.

    ``dtype`` (``float32``/``bfloat16``/``float16``) defaults to the run's
    ``model.dtype``. ``model_path`` is used for config and tokenizer only when the
    checkpoint carries none. With ``check`` the checkpoint's files are first
verified against its manifest. ``adapter`` writes a LoRA checkpoint's adapters as
    a PEFT adapter folder instead of merged weights. Returns ``output``. Raises :class:`ConversionError`.
    """
    from transformers import AutoConfig

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

    record = state.get("lora")
    if adapter and not record:
        raise ConversionError(f"{folder}: --adapter exports a LoRA run's adapters, but this checkpoint holds the "
                              "full model; convert it without --adapter")
    config = AutoConfig.from_pretrained(support)
    if record:
        base = _base_model_folder(folder, state, model_path)
        model = _lora_model(folder, base, record, merged=not adapter)
        if adapter:
            return _write_atomically(target, lambda staging: _write_adapter(model, record, base, staging))
    else:
        model = _auto_class(config).from_config(config, dtype=torch.float32)
        weights = {"model": model.state_dict()}
        _dcp_read(folder, weights)
        missing, unexpected = model.load_state_dict(weights["model"], strict=False)
        if missing or unexpected:
            raise ConversionError(
                f"{folder}: the weights do not fit {config.model_type} (missing {sorted(missing)[:5]}, "
                f"unexpected {sorted(unexpected)[:5]})"
            )
    model.to(_DTYPES[dtype_name])

    def write(staging: Path) -> None:
        model.save_pretrained(staging)
        for file in sorted(support.iterdir()):
            if not file.is_file() or file.name == "config.json" or file.name.endswith((".safetensors", ".bin")):
                continue
            if file.name.endswith(".index.json"):
                continue
            shutil.copy2(file, staging / file.name)  # tokenizer, chat template, generation config

    return _write_atomically(target, write)


def _auto_class(config: Any) -> Any:
    """transformers' auto class of a model config: image-text-to-text for a vision-language model."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from trinity.common.models.vision import is_vision_language

    return AutoModelForImageTextToText if is_vision_language(config) else AutoModelForCausalLM


def _dcp_read(folder: Path, weights: dict[str, Any]) -> None:
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    try:
        with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
            warnings.filterwarnings("ignore", message=".*single process.*")
            dcp_load(weights, checkpoint_id=str(folder / "actor"), no_dist=True)
    except Exception as exc:
        raise ConversionError(f"{folder}: cannot read the actor weights: {type(exc).__name__}: {exc}") from exc


def _base_model_folder(folder: Path, state: dict[str, Any], model_path: str | None) -> Path:
    for candidate in (model_path, state.get("model_path")):
        if isinstance(candidate, str) and candidate and (Path(candidate) / "config.json").is_file():
            return Path(candidate)
    raise ConversionError(
        f"{folder}: a LoRA checkpoint holds the adapters only, and the base model it was trained on "
        f"({state.get('model_path')}) is not a local folder; pass --model-path pointing at that model"
    )


def _lora_model(folder: Path, base: Path, record: dict[str, Any], *, merged: bool) -> Any:
    """The base model with the checkpoint's adapters: merged into its weights, or (not ``merged``) still apart."""
    from transformers import AutoConfig

    from trinity.trainer import lora

    plan = lora.plan_from_record(record)
    auto = _auto_class(AutoConfig.from_pretrained(base))
    with_adapters = auto.from_pretrained(base, dtype=torch.float32)
    try:
        lora.inject(with_adapters, plan)
    except lora.LoraError as exc:
        raise ConversionError(f"{folder}: {exc}") from None
    adapters = {name: value for name, value in with_adapters.state_dict().items() if lora.is_adapter(name)}
    weights = {"model": adapters}
    _dcp_read(folder, weights)
    with_adapters.load_state_dict(weights["model"], strict=False)
    if not merged:
        return with_adapters
    merged_weights = lora.merged_state(with_adapters.state_dict(), plan.scaling)
    model = auto.from_pretrained(base, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(merged_weights, strict=False)
    if missing or unexpected:
        raise ConversionError(f"{folder}: the merged weights do not fit {base} (missing {sorted(missing)[:5]}, "
                              f"unexpected {sorted(unexpected)[:5]})")
    return model


def _write_adapter(model: Any, record: dict[str, Any], base: Path, staging: Path) -> None:
    from trinity.trainer import lora

    lora.write_adapter_folder(staging, model.state_dict(), lora.plan_from_record(record), str(base))


def _write_atomically(target: Path, write: Any) -> Path:
    """Run ``write(staging)`` on a temporary folder beside ``target``, then put it in ``target``'s place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        write(staging)
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
