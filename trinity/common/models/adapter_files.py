"""PEFT adapter folders on disk: ``adapter_config.json`` and ``adapter_model.safetensors``.

Written by the trainer (``trinity convert --adapter``) and by a ``vllm``
engine that serves the policy's LoRA adapter from a slot; read by PEFT and vLLM.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

#: File names of a PEFT adapter folder.
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"


def write_adapter_files(folder: str | Path, config: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]) -> Path:
    """Write ``config`` and the adapter's ``tensors`` (PEFT's file names) into ``folder``; return it."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(json.dumps(dict(config), indent=2), encoding="utf-8")
    save_file({name: value.detach().contiguous().cpu() for name, value in tensors.items()},
              str(folder / WEIGHTS_FILE), metadata={"format": "pt"})
    return folder


def read_adapter_tensors(folder: str | Path) -> dict[str, torch.Tensor]:
    """The adapter's tensors in ``folder``, under PEFT's file names."""
    from safetensors.torch import load_file

    return dict(load_file(str(Path(folder) / WEIGHTS_FILE)))
