"""The inference-engine contract shared by the ``hf`` and ``vllm`` engines.

Workflows and the synchronizer only ever use these methods, so they cannot
tell the engines apart. Engines run as Ray actors; every method is also
callable in-process (tests, single-process debugging).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from trinity.common.array_state import arrays_to_tensors, tensors_to_arrays
from trinity.weight_transport.protocol import TensorMeta, WeightSyncGroupInfo


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one request."""

    #: 0 means greedy.
    temperature: float = 1.0
    top_p: float = 1.0
    #: 0 disables top-k.
    top_k: int = 0
    #: New tokens at most.
    max_tokens: int = 64
    #: Completions per prompt.
    n: int = 1
    #: Extra stop strings (the tokenizer's EOS always stops).
    stop: tuple[str, ...] = ()
    #: Seed for reproducible sampling; None: engine's generator.
    seed: int | None = None


@dataclass
class Completion:
    """One sampled continuation of one prompt."""

    #: Prompt token ids (after the chat template and left truncation).
    prompt_tokens: torch.Tensor
    #: Generated token ids (EOS included when generated, no padding).
    response_tokens: torch.Tensor
    #: Log-prob of each generated token under the sampling policy (temperature-scaled logits).
    logprobs: torch.Tensor
    #: Decoded response text (special tokens skipped).
    text: str
    #: ``stop`` (EOS/stop string) or ``length``.
    finish_reason: str
    #: Weights version that produced it.
    model_version: int
    info: dict[str, Any] = field(default_factory=dict)
    #: The prompt's images as the model took them (``pixel_values``, ``image_grid_thw``); None without images.
    multi_modal_inputs: dict[str, torch.Tensor] | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickle state: tensors as numpy arrays, cheaper across Ray (see ``trinity.common.array_state``)."""
        return tensors_to_arrays(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`__getstate__`."""
        self.__dict__.update(arrays_to_tensors(state))


@runtime_checkable
class InferenceEngine(Protocol):
    """What every rollout engine offers.

    An engine that can serve the policy's LoRA adapter beside the base
    weights also offers ``takes_adapters() -> bool`` and
    ``load_adapter(payload, version)``; the synchronizer then sends the
    adapter alone (see :mod:`trinity.synchronizer.synchronizer`).
    """

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Completion]]:
        """Sample ``params.n`` completions for each raw prompt string (no chat template)."""
        ...

    def generate_tokens(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Completion]]:
        """Sample like :meth:`generate` from prompts given as token ids (multi-turn rollouts)."""
        ...

    def chat(
        self, conversations: Sequence[Sequence[Mapping[str, str]]], params: SamplingParams
    ) -> list[list[Completion]]:
        """Apply the chat template with a generation prompt, then sample like :meth:`generate`."""
        ...

    def model_version(self) -> int:
        """Return the version of the weights currently loaded."""
        ...

    def weight_sync_ranks(self) -> int:
        """Return how many ranks this engine adds to the weight-sync group (its tensor-parallel workers)."""
        ...

    def init_weight_sync(self, info: WeightSyncGroupInfo, first_rank: int) -> None:
        """Join the trainer's weight-sync group as ranks ``first_rank .. first_rank + weight_sync_ranks() - 1``."""
        ...

    def receive_weights(self, metas: Sequence[TensorMeta], version: int, bucket_bytes: int) -> None:
        """Receive a broadcast of tensors ``metas`` from rank 0, load them, set the version."""
        ...

    def load_checkpoint_weights(self, folder: str, version: int) -> None:
        """Load safetensors weights written by the checkpoint sync method."""
        ...

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Load weights handed over through the Ray object store (memory sync method)."""
        ...

    def state_dict_checksum(self) -> str:
        """Return a checksum of the current weights (tests compare it with the trainer's)."""
        ...

    def shutdown(self) -> None:
        """Leave the weight-sync group and release devices and child processes; the engine is unusable after."""
        ...
