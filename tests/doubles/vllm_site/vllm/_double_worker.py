"""Workers of the double: one object per tensor-parallel rank, each with its own full copy of the model.

Tensor parallelism is modelled only as "every rank must hold the same
weights": each model wrapper keeps a digest of every tensor loaded through
``load_weights``, and the engine refuses to generate while the ranks' digests
differ (real sharded ranks with different weights would produce garbage).
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

#: Attributes every worker instance sets; an extension class may not define them either.
WORKER_INSTANCE_ATTRIBUTES = frozenset({"rank", "local_rank", "device", "model_runner", "spec", "asleep",
                                        "weights_backup"})
#: What sleep mode's allocator tags (``wake_up(tags=...)``).
SLEEP_TAGS = ("weights", "kv_cache")


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to load its model."""

    model: str
    dtype: torch.dtype
    trust_remote_code: bool
    world_size: int


def _tensor_digest(tensor: torch.Tensor) -> str:
    data = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
    return hashlib.blake2b(data.numpy().tobytes(), digest_size=16).hexdigest()


class DoubleModel(nn.Module):
    """What ``worker.model_runner.model`` is: the Hugging Face model, with vLLM's ``load_weights``.

    The Hugging Face model's children are registered on this module under
    their own names, so ``named_parameters()`` yields Hugging Face names.
    Attributes this module lacks (``config``, ``generation_config``, ...) come
    from the Hugging Face model; ``forward`` is the Hugging Face forward.
    """

    def __init__(self, hf_model: nn.Module) -> None:
        """Wrap ``hf_model`` (its parameters are shared, not copied)."""
        super().__init__()
        for name, child in hf_model.named_children():
            self.add_module(name, child)
        for name, param in hf_model.named_parameters(recurse=False):
            self.register_parameter(name, param)
        # Set last: until then, attribute look-ups must not fall back to the Hugging Face model.
        object.__setattr__(self, "_loaded_digests", {})
        object.__setattr__(self, "_hf_model", hf_model)

    @property
    def hf_model(self) -> nn.Module:
        """The wrapped Hugging Face model (double-only)."""
        return self.__dict__["_hf_model"]

    def __getattr__(self, name: str) -> Any:
        """Fall back to the Hugging Face model's attributes."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            hf_model = self.__dict__.get("_hf_model")
            if hf_model is None:
                raise
            return getattr(hf_model, name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the Hugging Face model."""
        return self.hf_model(*args, **kwargs)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Copy tensors into the parameters of the same (Hugging Face) name; return the names loaded.

        As vLLM's model loaders do: an unknown name raises ``KeyError``; the
        rotary ``inv_freq`` buffers and, when the embeddings are tied,
        ``lm_head.*`` are skipped (not loaded, not returned); a shape mismatch
        fails; the tensor is cast to the parameter's dtype.
        """
        if self.__dict__.get("_weights_asleep"):
            raise RuntimeError("the model's weights are released (sleep mode); wake_up(tags=['weights']) first")
        params = dict(self.named_parameters(remove_duplicate=False))
        tied = bool(getattr(self.config, "tie_word_embeddings", False))
        digests: dict[str, str] = self.__dict__["_loaded_digests"]
        loaded: set[str] = set()
        with torch.no_grad():
            for name, tensor in weights:
                if "rotary_emb.inv_freq" in name or (tied and name.startswith("lm_head.")):
                    continue
                param = params[name]  # KeyError for an unknown name, as vLLM's params_dict lookup
                if tuple(param.shape) != tuple(tensor.shape):
                    raise AssertionError(
                        f"Attempted to load weight {name} of shape {tuple(tensor.shape)} into parameter of shape "
                        f"{tuple(param.shape)}"
                    )
                param.data.copy_(tensor.to(device=param.device))
                digests[name] = _tensor_digest(param.data)
                loaded.add(name)
        return loaded

    def weights_fingerprint(self) -> str:
        """A digest of every tensor loaded through ``load_weights`` so far (double-only)."""
        digests: dict[str, str] = self.__dict__["_loaded_digests"]
        summary = hashlib.blake2b(digest_size=16)
        for name in sorted(digests):
            summary.update(f"{name}={digests[name]};".encode())
        return summary.hexdigest()


class ModelRunner:
    """Holds a worker's model (``model_runner.model``)."""

    def __init__(self, model: DoubleModel, device: torch.device) -> None:
        """Keep the model and its device."""
        self.model = model
        self.device = device


class Worker:
    """One tensor-parallel rank. ``worker_extension_cls`` methods run on it with ``self`` = the worker."""

    def __init__(self, spec: WorkerSpec, rank: int, local_rank: int) -> None:
        """Record the rank; the model is loaded by ``load_model``."""
        self.spec = spec
        self.rank = rank
        self.local_rank = local_rank
        self.device = torch.device("cpu")
        self.model_runner: ModelRunner | None = None
        #: Sleep mode's released tags (``weights``, ``kv_cache``).
        self.asleep: set[str] = set()
        #: Level 1 sleep's copy of the weights ("offloaded to CPU memory"); None after level 2.
        self.weights_backup: dict[str, torch.Tensor] | None = None

    def sleep(self, level: int = 1) -> None:
        """Release the weights and the KV cache: level 1 keeps a copy of the weights, level 2 forgets them.

        Released weights read NaN (their device memory is gone) until woken.
        """
        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 or 2, got {level}")
        model = self.get_model()
        params = dict(model.named_parameters())
        self.weights_backup = {n: p.detach().clone() for n, p in params.items()} if level == 1 else None
        with torch.no_grad():
            for param in params.values():
                param.fill_(float("nan"))
        object.__setattr__(model, "_weights_asleep", True)
        self.asleep = set(SLEEP_TAGS)

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Take the memory of ``tags`` (default: all) back; level 1's weights come back with their values."""
        wanted = list(SLEEP_TAGS) if tags is None else list(tags)
        for tag in wanted:
            if tag not in SLEEP_TAGS:
                raise ValueError(f"unknown sleep-mode tag {tag!r}; expected one of {list(SLEEP_TAGS)}")
        model = self.get_model()
        if "weights" in wanted and "weights" in self.asleep:
            if self.weights_backup is not None:
                params = dict(model.named_parameters())
                with torch.no_grad():
                    for name, value in self.weights_backup.items():
                        params[name].copy_(value)
            self.weights_backup = None
            object.__setattr__(model, "_weights_asleep", False)
        self.asleep -= set(wanted)

    def init_device(self) -> None:
        """Nothing to set up on the CPU."""
        self.device = torch.device("cpu")

    def load_model(self) -> None:
        """Load this rank's own full copy of the model."""
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

        config = AutoConfig.from_pretrained(self.spec.model, trust_remote_code=self.spec.trust_remote_code)
        vision = getattr(config, "vision_config", None) is not None
        auto = AutoModelForImageTextToText if vision else AutoModelForCausalLM
        hf_model = auto.from_pretrained(
            self.spec.model, dtype=self.spec.dtype, trust_remote_code=self.spec.trust_remote_code
        )
        hf_model.to(self.device).eval()
        self.model_runner = ModelRunner(DoubleModel(hf_model), self.device)

    def get_model(self) -> nn.Module:
        """The model (as ``model_runner.model``)."""
        if self.model_runner is None:
            raise RuntimeError("the model is not loaded")
        return self.model_runner.model

    def check_health(self) -> None:
        """A live worker is healthy."""

    def shutdown(self) -> None:
        """Drop the model."""
        self.model_runner = None


def resolve_qualname(qualname: str) -> type:
    """Import ``"pkg.module.Class"``; ``ValueError`` for a malformed name, ``ImportError`` if it cannot be imported."""
    if not isinstance(qualname, str) or "." not in qualname.strip("."):
        raise ValueError(f"worker_extension_cls must be a fully qualified name 'pkg.module.Class', got {qualname!r}")
    module_name, _, attr = qualname.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"worker_extension_cls {qualname!r}: cannot import module {module_name!r}: {exc}") from exc
    try:
        obj = getattr(module, attr)
    except AttributeError as exc:
        raise ImportError(f"worker_extension_cls {qualname!r}: module {module_name!r} has no {attr!r}") from exc
    if not isinstance(obj, type):
        raise ValueError(f"worker_extension_cls {qualname!r} is not a class (got {type(obj).__qualname__})")
    return obj


def build_worker_class(worker_extension_cls: str) -> type[Worker]:
    """The worker class, with the extension class as an extra base when one is named.

    Like vLLM, refuses an extension that defines (non-dunder) attributes the
    worker already has; the double also counts the worker's instance attributes.
    """
    if not worker_extension_cls:
        return Worker
    extension = resolve_qualname(worker_extension_cls)
    for attr in dir(extension):
        if attr.startswith("__"):
            continue
        if hasattr(Worker, attr) or attr in WORKER_INSTANCE_ATTRIBUTES:
            raise ValueError(
                f"Worker class {Worker.__qualname__} already has an attribute {attr}, which conflicts with the worker "
                f"extension class {extension.__module__}.{extension.__qualname__}."
            )
    return type(f"Worker[{extension.__qualname__}]", (Worker, extension), {})
