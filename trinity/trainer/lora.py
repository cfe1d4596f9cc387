"""LoRA on the trainer's policy: PEFT adapters put into the model, and the weights the rest of the run sees.

The adapters are PEFT's own layers, injected into the transformers model in
place (``peft.inject_adapter_in_model``): the model keeps its class, its
blocks and its forward, so FSDP2 sharding, packing and gradient checkpointing
work unchanged. The base weights are frozen, so the optimizer holds the
adapters only. Everything outside the trainer (engines, checksums, Hugging
Face exports) sees the *merged* weights under the base model's names:
``W + alpha / rank * B @ A``. A checkpoint holds the adapters only; its
adapters can be exported as a PEFT adapter folder.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trinity.common.config.plan.trainer import LoraPlan
from trinity.common.models.adapter_files import WEIGHTS_FILE, write_adapter_files

#: The adapter's name inside the model (PEFT's default); PEFT's files leave it out of their keys.
ADAPTER_NAME = "default"
#: The prefix PEFT's adapter files give every key (the ``PeftModel`` wrapper's attribute path).
FILE_PREFIX = "base_model.model."

_BASE_LAYER = ".base_layer."


class LoraError(ValueError):
    """The adapter cannot be put into (or read for) this model; the message says what and how to fix it."""


def is_adapter(name: str) -> bool:
    """Whether the state-dict entry ``name`` is an adapter matrix (not a base weight)."""
    return ".lora_A." in name or ".lora_B." in name


def peft_config(plan: LoraPlan) -> Any:
    """Return PEFT's ``LoraConfig`` of ``plan`` (a saved adapter folder's own config when it starts from one)."""
    from peft import LoraConfig

    if plan.adapter_path is not None:
        config = LoraConfig.from_pretrained(plan.adapter_path)
        config.inference_mode = False
        return config
    targets = plan.target_modules if isinstance(plan.target_modules, str) else list(plan.target_modules)
    excluded: str | list[str] | None = None
    if plan.exclude_modules is not None:
        excluded = plan.exclude_modules if isinstance(plan.exclude_modules, str) else list(plan.exclude_modules)
    alpha: Any = plan.alpha  # PEFT types it int; the scaling it computes (alpha / r) takes a float alike
    return LoraConfig(r=plan.rank, lora_alpha=alpha, target_modules=targets, exclude_modules=excluded,
                      lora_dropout=0.0, bias="none")


def inject(model: nn.Module, plan: LoraPlan) -> int:
    """Put ``plan``'s adapter into ``model`` in place, freeze everything else; return the trainable parameters.

    A fresh adapter starts at ``B = 0`` (the model's outputs are unchanged);
    one with ``adapter_path`` starts from that folder's weights.
    """
    from peft import inject_adapter_in_model
    from peft.tuners.lora import LoraLayer

    try:
        inject_adapter_in_model(peft_config(plan), model, adapter_name=ADAPTER_NAME)
    except ValueError as exc:  # PEFT's "Target modules ... not found in the base model"
        raise LoraError(f"model.lora_configs[0].target_modules: {exc}") from None
    layers = [(name, module) for name, module in model.named_modules() if isinstance(module, LoraLayer)]
    for name, module in layers:
        base = module.get_base_layer()
        if type(base) is not nn.Linear:
            raise LoraError(f"model.lora_configs[0].target_modules: {name} is a {type(base).__name__}; adapters "
                            "are supported on linear layers only (exclude it, or use all-linear)")
    model.requires_grad_(False)
    trainable = 0
    for name, parameter in model.named_parameters():
        if is_adapter(name):
            parameter.requires_grad_(True)
            trainable += parameter.numel()
    if plan.adapter_path is not None:
        load_adapter_folder(model, plan.adapter_path)
    return trainable


@contextmanager
def adapters_off(model: nn.Module) -> Iterator[None]:
    """Run ``model`` as its base (every adapter skipped) inside the block: the reference model of a LoRA run.

    Only the forward's switch is flipped, not ``requires_grad`` (PEFT's
    ``enable_adapters`` flips both), so FSDP2's view of the parameters stays as it was.
    """
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [module for module in model.modules() if isinstance(module, BaseTunerLayer)]
    if layers and not all(hasattr(layer, "_disable_adapters") for layer in layers):
        raise LoraError("this PEFT version's adapter layers have no _disable_adapters switch; "
                        "install a peft release this trainer supports (pip install 'trinity-rft[lora]')")
    for layer in layers:
        layer._disable_adapters = True
    try:
        yield
    finally:
        for layer in layers:
            layer._disable_adapters = False


@dataclass(frozen=True)
class ExportEntry:
    """One tensor of the merged (base-named) weights, and the state-dict entries it is made of."""

    #: The base model's name of the tensor.
    name: str
    #: The state-dict entry holding its base value.
    source: str
    #: The adapter's ``A`` and ``B`` entries, for a weight with an adapter.
    lora_a: str | None = None
    lora_b: str | None = None

    @property
    def sources(self) -> tuple[str, ...]:
        """Every state-dict entry this tensor is made of, base first."""
        return (self.source,) if self.lora_a is None or self.lora_b is None else (self.source, self.lora_a,
                                                                                  self.lora_b)


def export_entries(names: Iterable[str]) -> list[ExportEntry]:
    """Map the state-dict names of a model with adapters onto the base model's names, in order."""
    names = list(names)
    present = set(names)
    entries = []
    for name in names:
        if is_adapter(name):
            continue
        if _BASE_LAYER not in name:
            entries.append(ExportEntry(name, name))
            continue
        module, _, leaf = name.rpartition(_BASE_LAYER)
        if leaf != "weight":
            entries.append(ExportEntry(f"{module}.{leaf}", name))
            continue
        lora_a, lora_b = (f"{module}.lora_{part}.{ADAPTER_NAME}.weight" for part in "AB")
        if lora_a not in present or lora_b not in present:
            raise LoraError(f"{name} has no adapter matrices {lora_a} / {lora_b} beside it")
        entries.append(ExportEntry(f"{module}.weight", name, lora_a, lora_b))
    return entries


def merge(base: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor, scaling: float) -> torch.Tensor:
    """Return ``base + scaling * lora_b @ lora_a`` in ``base``'s dtype (computed in float32)."""
    delta = (lora_b.float() @ lora_a.float()) * scaling
    return (base.float() + delta).to(base.dtype)


def merge_entry(entry: ExportEntry, tensors: Mapping[str, torch.Tensor], scaling: float) -> torch.Tensor:
    """Return the merged tensor of ``entry`` from the full tensors of its sources."""
    if entry.lora_a is None or entry.lora_b is None:
        return tensors[entry.source]
    return merge(tensors[entry.source], tensors[entry.lora_a], tensors[entry.lora_b], scaling)


def merged_state(state: Mapping[str, torch.Tensor], scaling: float) -> dict[str, torch.Tensor]:
    """Return the merged weights of a full state dict with adapters, under the base model's names."""
    return {entry.name: merge_entry(entry, state, scaling) for entry in export_entries(state)}


def adapter_state(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Return the adapter matrices of a full state dict, under the names PEFT's adapter files use."""
    marker = f".{ADAPTER_NAME}."
    return {FILE_PREFIX + name.replace(marker, "."): value for name, value in state.items() if is_adapter(name)}


def _file_key_to_model(key: str) -> str:
    name = key[len(FILE_PREFIX):] if key.startswith(FILE_PREFIX) else key
    for part in ("lora_A", "lora_B"):
        name = name.replace(f".{part}.", f".{part}.{ADAPTER_NAME}.")
    return name


def read_adapter_weights(folder: str | Path) -> dict[str, torch.Tensor]:
    """Return a PEFT adapter folder's matrices under the names of a model they were injected into."""
    folder = Path(folder)
    weights = folder / WEIGHTS_FILE
    if weights.is_file():
        from safetensors.torch import load_file

        saved = load_file(str(weights))
    elif (folder / "adapter_model.bin").is_file():
        saved = torch.load(folder / "adapter_model.bin", map_location="cpu", weights_only=True)
    else:
        raise LoraError(f"{folder} holds no {WEIGHTS_FILE} (or adapter_model.bin)")
    return {_file_key_to_model(key): value for key, value in saved.items() if is_adapter(key)}


def load_adapter_folder(model: nn.Module, folder: str | Path) -> None:
    """Copy a PEFT adapter folder's matrices into the adapters injected into ``model``; LoraError on a mismatch."""
    saved = read_adapter_weights(folder)
    own = {name: parameter for name, parameter in model.named_parameters() if is_adapter(name)}
    missing = sorted(set(own) - set(saved))
    unexpected = sorted(set(saved) - set(own))
    if missing or unexpected:
        raise LoraError(f"the adapter in {folder} does not fit this model: missing {missing[:3]}, "
                        f"unexpected {unexpected[:3]} (was it trained on another base model?)")
    with torch.no_grad():
        for name, parameter in own.items():
            value = saved[name]
            if tuple(value.shape) != tuple(parameter.shape):
                raise LoraError(f"the adapter in {folder}: {name} has shape {tuple(value.shape)}, the model's "
                                f"adapter {tuple(parameter.shape)}")
            parameter.copy_(value)


def adapter_config(plan: LoraPlan, base_model: str, tensors: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """PEFT's ``adapter_config.json`` of an adapter whose matrices are ``tensors`` (PEFT's file names).

    ``target_modules`` lists the module names that hold an adapter (not
    ``all-linear``), so any loader (PEFT, vLLM's LoRA slots) finds them.
    """
    config = peft_config(plan)
    config.base_model_name_or_path = base_model
    config.task_type = "CAUSAL_LM"
    config.inference_mode = True
    record = dict(config.to_dict())
    targets = sorted({key.split(".lora_")[0].rsplit(".", 1)[-1] for key in tensors if ".lora_" in key})
    record["target_modules"] = targets
    record["exclude_modules"] = None
    plain: dict[str, Any] = json.loads(
        json.dumps(record, default=lambda value: sorted(value) if isinstance(value, set) else str(value)))
    return plain


def write_adapter_folder(folder: str | Path, state: Mapping[str, torch.Tensor], plan: LoraPlan,
                         base_model: str) -> Path:
    """Write the adapters of ``state`` (a full state dict with adapters) as a PEFT adapter folder; return it.

    The folder loads with ``peft.PeftModel.from_pretrained(base, folder)``.
    """
    tensors = adapter_state(state)
    return write_adapter_files(folder, adapter_config(plan, base_model, tensors), tensors)


def plan_record(plan: LoraPlan) -> dict[str, Any]:
    """The adapter's settings as a checkpoint records them (JSON)."""
    record = json.loads(json.dumps({
        "rank": plan.rank, "alpha": plan.alpha, "target_modules": plan.target_modules,
        "exclude_modules": plan.exclude_modules, "adapter_path": plan.adapter_path, "name": plan.name,
    }))
    return dict(record)


def plan_from_record(record: Mapping[str, Any]) -> LoraPlan:
    """The :class:`LoraPlan` a checkpoint recorded with :func:`plan_record` (a fresh adapter of that shape:
    the checkpoint holds its weights, so the folder it once started from is not needed)."""

    def modules(value: Any) -> Any:
        return tuple(value) if isinstance(value, list) else value

    return LoraPlan(rank=int(record["rank"]), alpha=float(record["alpha"]),
                    target_modules=modules(record["target_modules"]),
                    exclude_modules=modules(record.get("exclude_modules")), name=str(record.get("name") or "lora"))
