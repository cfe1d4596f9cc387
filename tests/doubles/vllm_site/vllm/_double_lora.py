"""LoRA adapters in the double: PEFT adapter folders loaded and applied to the model's linear layers.

As vLLM does for a LoRA request: the adapter's matrices ``A`` (``r x in``)
and ``B`` (``out x r``) of each targeted linear layer add
``lora_alpha / r * B @ A @ x`` to the layer's output; the base weights are
untouched. vLLM checks on loading that the rank fits ``max_lora_rank`` and
that the targeted modules exist; so does the double. DoRA and rank-stabilised
adapters are refused (vLLM does not serve DoRA). Not modelled: the slots'
GPU and CPU caches and their eviction, punica kernels, adapters with an
embedding or LM-head part.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

_PREFIX = "base_model.model."


@dataclass(frozen=True)
class LoadedAdapter:
    """One adapter's matrices by the module they apply to, and its scaling."""

    path: str
    #: module name -> (A [r, in], B [out, r])
    layers: dict[str, tuple[torch.Tensor, torch.Tensor]]
    scaling: float
    rank: int


def load_adapter(path: str, model: nn.Module, max_lora_rank: int) -> LoadedAdapter:
    """Read the PEFT adapter folder ``path`` for ``model``; ValueError as vLLM's loader raises."""
    from safetensors.torch import load_file

    config_file = os.path.join(path, "adapter_config.json")
    weights_file = os.path.join(path, "adapter_model.safetensors")
    if not os.path.isfile(config_file) or not os.path.isfile(weights_file):
        raise ValueError(f"Loading lora {path} failed: No adapter found for {path}")
    with open(config_file, encoding="utf-8") as handle:
        config = json.load(handle)
    rank = int(config["r"])
    if rank > max_lora_rank:
        raise ValueError(f"LoRA rank {rank} is greater than max_lora_rank {max_lora_rank}.")
    if config.get("use_dora") or config.get("use_rslora"):
        raise ValueError(f"{path}: DoRA and rank-stabilised LoRA adapters are not supported")
    tensors = load_file(weights_file)
    modules = dict(model.named_modules())
    parts: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        name = key[len(_PREFIX):] if key.startswith(_PREFIX) else key
        for side in ("lora_A", "lora_B"):
            marker = f".{side}."
            if marker in name:
                parts.setdefault(name.split(marker)[0], {})[side] = value
    unexpected = sorted(name for name in parts if not isinstance(modules.get(name), nn.Linear))
    if unexpected:
        raise ValueError(f"While loading {path}, expected target modules of the model but received {unexpected[:3]}")
    dtype = next(model.parameters()).dtype
    layers = {}
    for name, pair in parts.items():
        if set(pair) != {"lora_A", "lora_B"}:
            raise ValueError(f"{path}: module {name} has {sorted(pair)} but needs both lora_A and lora_B")
        layers[name] = (pair["lora_A"].to(dtype), pair["lora_B"].to(dtype))
    return LoadedAdapter(path, layers, float(config.get("lora_alpha", rank)) / rank, rank)


@contextlib.contextmanager
def applied(model: nn.Module, adapter: LoadedAdapter | None) -> Iterator[None]:
    """Inside the block, ``model``'s targeted linear layers add the adapter's update to their outputs."""
    if adapter is None:
        yield
        return
    modules = dict(model.named_modules())
    handles = []
    for name, (a, b) in adapter.layers.items():

        def hook(_module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor,
                 a: torch.Tensor = a, b: torch.Tensor = b) -> torch.Tensor:
            return output + adapter.scaling * (inputs[0] @ a.T @ b.T)

        handles.append(modules[name].register_forward_hook(hook))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
