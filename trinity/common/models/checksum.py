"""One checksum of model weights that the trainer and every engine compute the same way.

``sha256`` over the tensors in name order: for each name, the UTF-8 name, the
shape, then the values converted to float32 (C order, little-endian as
stored in memory). Converting to float32 first makes a bfloat16 engine and a
float32 trainer agree whenever the values are equal after rounding, and makes
the checksum independent of the device a tensor lives on.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import torch


def state_dict_checksum(state_dict: Mapping[str, torch.Tensor]) -> str:
    """Return the hex sha256 of ``state_dict`` (names sorted, each tensor as float32 bytes)."""
    digest = hashlib.sha256()
    for name in sorted(state_dict):
        tensor = state_dict[name]
        values = tensor.detach().to(device="cpu", dtype=torch.float32).contiguous()
        digest.update(name.encode("utf-8"))
        digest.update(repr(tuple(values.shape)).encode("ascii"))
        digest.update(values.numpy().tobytes())
    return digest.hexdigest()


def tied_alias_sources(module: torch.nn.Module) -> dict[str, str]:
    """Map each second name of a tied parameter to its first name (``{"lm_head.weight": "model.embed_tokens.weight"}``).

    A weight sync sends a tied parameter once, under its first name; a
    receiver that checksums what it was sent adds the aliases back with this.
    """
    first: dict[int, str] = {}
    aliases: dict[str, str] = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        source = first.setdefault(id(param), name)
        if source != name:
            aliases[name] = source
    return aliases
