"""``LoRARequest``: which adapter a request is served with (vLLM's fields, subset)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LoRARequest:
    """A LoRA adapter folder (PEFT's layout) under a name and a positive integer id."""

    lora_name: str
    lora_int_id: int
    lora_path: str = ""

    def __post_init__(self) -> None:
        """vLLM's checks: the id must be positive and a path given."""
        if self.lora_int_id < 1:
            raise ValueError(f"id must be > 0, got {self.lora_int_id}")
        if not self.lora_path:
            raise ValueError("lora_path must be set")

    @property
    def adapter_id(self) -> int:
        """The adapter's id (vLLM's alias of ``lora_int_id``)."""
        return self.lora_int_id
