"""The part of the ``vllm`` engine that runs inside vLLM's workers: loading weights and the weight-sync group.

vLLM mixes :class:`WeightSyncExtension` into every worker of an engine
(``worker_extension_cls``), one worker per tensor-parallel rank, in vLLM's
own processes; the engine reaches these methods only through
``AsyncLLM.collective_rpc``. Arguments and results cross a process boundary,
so they are plain data (dicts, lists, strings, tensors), never our classes.

Inside a method ``self`` is the vLLM worker: ``self.model_runner.model`` is
the model, whose ``load_weights`` takes Hugging Face names and shards or fuses
them for this rank; ``self.device`` and ``self.rank`` are the worker's.
Every rank joins the trainer's weight-sync group and receives the full
broadcast (rank ``first_rank + self.rank``) bucket by bucket, handing each
tensor to ``load_weights`` as it completes
(:meth:`~trinity.weight_transport.group.WeightSyncGroup.receive_stream`): no
rank holds a second copy of the whole model; each loads what its shard needs.
The group is built on the device backend's collective by
:class:`~trinity.weight_transport.group.WeightSyncGroup`, never a
hard-coded one.

The methods carry a ``trinity_`` prefix: vLLM refuses an extension that
redefines an attribute its worker already has. Those that load weights or
join the group answer with their error instead of raising (:func:`replies`).
"""

from __future__ import annotations

import functools
import inspect
import io
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch

from trinity.weight_transport.protocol import TensorMeta, WeightSyncGroupInfo

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

#: Prefixes that wrappers add to parameter names (DDP/FSDP1, torch.compile); removed before loading.
_WRAPPER_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.")


def clean_name(name: str) -> str:
    """Return ``name`` without wrapper prefixes (``module.``, ``_orig_mod.``) anywhere in it."""
    for prefix in _WRAPPER_PREFIXES:
        while name.startswith(prefix):
            name = name[len(prefix) :]
        name = name.replace(f".{prefix}", ".")
    return name


def metas_to_rows(metas: Sequence[TensorMeta]) -> list[list[Any]]:
    """Return ``metas`` as plain lists ``[name, dtype, [shape...]]`` (what collective_rpc may carry)."""
    return [[m.name, m.dtype, [int(s) for s in m.shape]] for m in metas]


def rows_to_metas(rows: Sequence[Sequence[Any]]) -> list[TensorMeta]:
    """Return the :class:`TensorMeta` list :func:`metas_to_rows` flattened."""
    return [TensorMeta(str(name), str(dtype), tuple(int(s) for s in shape)) for name, dtype, shape in rows]


def pack_state_dict(state_dict: Mapping[str, torch.Tensor]) -> bytes:
    """Return ``state_dict`` as bytes for ``collective_rpc`` (vLLM's serialiser does not carry a dict of tensors).

    ``torch.save``'s format keeps dtypes (bfloat16 included) and tensors that
    share storage (tied weights).
    """
    buffer = io.BytesIO()
    torch.save({str(k): v.detach().cpu() for k, v in state_dict.items()}, buffer)
    return buffer.getvalue()


def unpack_state_dict(packed: bytes) -> dict[str, torch.Tensor]:
    """Return the state dict :func:`pack_state_dict` packed (tensors only: loaded with ``weights_only``)."""
    loaded = torch.load(io.BytesIO(packed), map_location="cpu", weights_only=True)
    return {str(k): v for k, v in loaded.items()}


def replies(method: F) -> F:
    """Make a worker method answer ``{"value": result}`` or ``{"error": "..."}`` instead of raising.

    A worker method that raises inside ``collective_rpc`` fails the call in
    vLLM's engine core; with several workers, vLLM has been seen to leave the
    other workers' replies queued, so the next call read a stale one. Every
    worker replies instead, and the engine raises (:func:`unwrap_replies`).
    """

    @functools.wraps(method)
    def answer(self: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return {"value": method(self, *args, **kwargs)}
        except Exception as exc:  # reported to the engine, which raises it
            logger.exception("vLLM worker rank %s: %s failed", getattr(self, "rank", "?"), method.__name__)
            return {"error": f"{type(exc).__name__}: {exc}", "rank": int(getattr(self, "rank", -1))}

    return answer  # type: ignore[return-value]


def unwrap_replies(answers: Sequence[Any]) -> list[Any]:
    """Return the values of the :func:`replies` answers of every worker; raise RuntimeError on the first error."""
    for answer in answers:
        if isinstance(answer, Mapping) and "error" in answer:
            raise RuntimeError(f"vLLM worker rank {answer.get('rank')}: {answer['error']}")
    return [answer["value"] if isinstance(answer, Mapping) and "value" in answer else answer for answer in answers]


class WeightSyncExtension:
    """Mixed into each vLLM worker: weight-sync group membership and weight loading (see the module docstring)."""

    # set by vLLM on the worker this class is mixed into
    model_runner: Any
    vllm_config: Any
    device: Any
    rank: int

    def _trinity_state(self) -> dict[str, Any]:
        state = self.__dict__.get("_trinity")
        if state is None:
            state = {"group": None, "checksum": None, "track": False}
            self.__dict__["_trinity"] = state
        return state

    def trinity_configure(self, track_checksum: bool) -> int:
        """Remember whether to checksum every full weight set loaded; return this worker's rank."""
        self._trinity_state()["track"] = bool(track_checksum)
        return int(self.rank)

    def trinity_device_report(self) -> dict[str, Any]:
        """Return this worker's ranks, torch device and the visible-devices mask its process runs under."""
        from trinity import device

        var = device.current_backend().info.visible_devices_env
        return {"rank": int(self.rank), "local_rank": int(getattr(self, "local_rank", self.rank)),
                "device": str(self.device), "visible_devices": os.environ.get(var) if var else None}

    @replies
    def trinity_init_weight_sync(self, info: Mapping[str, Any], first_rank: int) -> int:
        """Join the trainer's weight-sync group as rank ``first_rank + self.rank``; return that rank."""
        from trinity.weight_transport.group import WeightSyncGroup

        self.trinity_close_weight_sync()
        rank = int(first_rank) + int(self.rank)
        self._trinity_state()["group"] = WeightSyncGroup.join(WeightSyncGroupInfo(**dict(info)), rank=rank)
        return rank

    def trinity_close_weight_sync(self) -> None:
        """Leave the weight-sync group, if any."""
        state = self._trinity_state()
        group, state["group"] = state["group"], None
        if group is not None:
            group.close()

    @replies
    def trinity_receive_weights(self, meta_rows: Sequence[Sequence[Any]], bucket_bytes: int) -> int:
        """Receive rank 0's broadcast of the tensors ``meta_rows`` describe and load them; return the count."""
        group = self._trinity_state()["group"]
        if group is None:
            raise RuntimeError(f"vLLM worker rank {self.rank}: receive_weights before init_weight_sync")
        stream = group.receive_stream(rows_to_metas(meta_rows), int(bucket_bytes), self.device)
        try:
            return self._trinity_load_pairs(stream, complete=True)
        finally:
            for _ in stream:  # a loader that stopped early: the broadcast still has to be received whole
                pass

    @replies
    def trinity_load_state_dict(self, packed: bytes, complete: bool) -> int:
        """Load the state dict :func:`pack_state_dict` packed (Hugging Face names); return the number of tensors."""
        return self._trinity_load(unpack_state_dict(packed), complete=complete)

    @replies
    def trinity_load_checkpoint(self, files: Sequence[str]) -> int:
        """Load the safetensors ``files`` (one weight set, resolved by the engine); return the count."""
        from safetensors.torch import load_file

        merged: dict[str, torch.Tensor] = {}
        for file in files:
            merged.update(load_file(file, device="cpu"))
        return self._trinity_load(merged, complete=True)

    def _trinity_load_weights(self, weights: Iterator[tuple[str, torch.Tensor]]) -> None:
        """Load ``weights`` into the live model the way this vLLM reloads weights.

        vLLM releases that reload weights in place (``Worker.reload_weights``
        with ``weights_iterator``) get the weights through it: it puts each
        layer back in checkpoint layout, loads, and redoes the processing done
        after the first load (the CPU build repacks linear weights into its
        kernels' layout and leaves the checkpoint-shaped parameters empty, so
        a plain ``load_weights`` fails there). Older releases have no such
        method and load with ``model.load_weights``, as their RL users do.
        """
        runner_reload = getattr(self.model_runner, "reload_weights", None)
        if runner_reload is None or "weights_iterator" not in inspect.signature(runner_reload).parameters:
            self.model_runner.model.load_weights(weights=weights)
            return
        reload = getattr(self, "reload_weights", runner_reload)  # the worker's sets vLLM's current config
        try:
            reload(weights_iterator=weights, is_checkpoint_format=True)
        except BaseException:
            self._trinity_restore_layers()
            raise

    def _trinity_restore_layers(self) -> None:
        """After a failed in-place reload, put back the layers that received nothing (else they stay empty).

        vLLM's reload empties every layer first and refills each as its
        weights arrive; a load that stops early (an unknown name, a broken
        broadcast) would leave the rest empty and the next forward would
        read freed memory. vLLM's own finalisation restores a layer that got
        no weight to its previous tensors.
        """
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        config = self.vllm_config
        with set_current_vllm_config(config):
            finalize_layerwise_reload(self.model_runner.get_model(), config.model_config)

    def trinity_checksum(self) -> str | None:
        """Return the checksum of the last complete weight set loaded, or None when none is known."""
        checksum = self._trinity_state()["checksum"]
        return None if checksum is None else str(checksum)

    def _trinity_load(self, state_dict: Mapping[str, torch.Tensor], *, complete: bool) -> int:
        return self._trinity_load_pairs(iter(state_dict.items()), complete=complete)

    def _trinity_load_pairs(self, pairs: Iterator[tuple[str, torch.Tensor]], *, complete: bool) -> int:
        """Hand ``pairs`` to the model's ``load_weights`` one at a time (a bucket's tensors as they arrive)."""
        state = self._trinity_state()
        checksum = state["track"] and complete and int(self.rank) == 0
        kept: dict[str, torch.Tensor] = {}  # only to checksum the set (track_checksum: tests and verification)
        count = 0

        def items() -> Iterator[tuple[str, torch.Tensor]]:
            nonlocal count
            for given, tensor in pairs:
                name = clean_name(given)
                count += 1
                if checksum:
                    kept[name] = tensor
                yield name, tensor

        try:
            with torch.no_grad():
                self._trinity_load_weights(items())
        except BaseException:
            state["checksum"] = None  # some layers may hold the new weights, others the old
            raise
        if checksum:
            from trinity.common.models.checksum import state_dict_checksum, tied_alias_sources

            tied = tied_alias_sources(self.model_runner.model)  # sent once; the trainer's checksum lists them
            extra = {alias: kept[src] for alias, src in tied.items() if alias not in kept and src in kept}
            state["checksum"] = state_dict_checksum({**kept, **extra})
        elif not complete:
            state["checksum"] = None  # a partial load: the full set is no longer known
        return count


def safetensors_files(folder: str | Path) -> list[str]:
    """Return the ``*.safetensors`` files of ``folder`` (a link resolved once, so one weight set), sorted."""
    return [str(p) for p in sorted(Path(folder).resolve().glob("*.safetensors"))]
