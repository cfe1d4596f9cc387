"""Bucket plans: how a state dict is cut into flat, single-dtype buffers for a broadcast.

Sender and receivers derive the same plan from the same :class:`TensorMeta`
list and bucket size (:func:`plan_buckets`): tensors of one dtype are laid end
to end and cut into flat buckets of at most ``bucket_bytes``; a tensor larger
than a bucket spans several. :func:`plan_header` is broadcast first so a
receiver can refuse a plan that differs from the sender's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch

from trinity.weight_transport.protocol import TensorMeta, WeightSyncError

#: Default bucket size of a broadcast: 64 MiB (``synchronizer.bucket_size_mb``).
DEFAULT_BUCKET_BYTES = 64 << 20
#: Elements of :func:`plan_header`.
HEADER_LEN = 4


def dtype_name(dtype: torch.dtype) -> str:
    """Return the name ``TensorMeta.dtype`` uses for ``dtype`` (``"float32"``, ``"bfloat16"``)."""
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    """Return the torch dtype named ``name`` (``"float32"`` or ``"torch.float32"``); raises WeightSyncError."""
    value = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise WeightSyncError(f"unknown tensor dtype {name!r} in a weight-sync meta")
    return value


def state_dict_metas(state_dict: Mapping[str, torch.Tensor]) -> list[TensorMeta]:
    """Return the :class:`TensorMeta` of every tensor of ``state_dict``, in its order."""
    return [TensorMeta(name, dtype_name(t.dtype), tuple(int(s) for s in t.shape)) for name, t in state_dict.items()]


def numel_of(shape: Sequence[int]) -> int:
    """Return the number of elements of a tensor of ``shape``."""
    count = 1
    for size in shape:
        count *= int(size)
    return count


@dataclass(frozen=True)
class BucketSlice:
    """Elements ``[start, stop)`` of the flattened tensor ``metas[index]``, at ``offset`` in the bucket."""

    index: int
    start: int
    stop: int
    offset: int


@dataclass(frozen=True)
class Bucket:
    """One flat buffer of a single dtype, broadcast in one collective."""

    dtype: str
    numel: int
    slices: tuple[BucketSlice, ...]

    @property
    def nbytes(self) -> int:
        return self.numel * dtype_from_name(self.dtype).itemsize


def plan_buckets(metas: Sequence[TensorMeta], bucket_bytes: int) -> list[Bucket]:
    """Return the buckets carrying ``metas``: per dtype (first-seen order), tensors end to end, cut at ``bucket_bytes``.

    Each bucket holds at most ``max(1, bucket_bytes // itemsize)`` elements, so a
    tensor larger than a bucket is split across consecutive buckets. Sender and
    receivers call this with the same arguments and get the same plan.
    Raises ValueError for a non-positive ``bucket_bytes``.
    """
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    by_dtype: dict[str, list[int]] = {}
    for index, meta in enumerate(metas):
        by_dtype.setdefault(meta.dtype, []).append(index)
    buckets: list[Bucket] = []
    for dtype, indices in by_dtype.items():
        capacity = max(1, bucket_bytes // dtype_from_name(dtype).itemsize)
        slices: list[BucketSlice] = []
        filled = 0
        for index in indices:
            total = numel_of(metas[index].shape)
            start = 0
            while start < total:
                take = min(total - start, capacity - filled)
                slices.append(BucketSlice(index, start, start + take, filled))
                filled += take
                start += take
                if filled == capacity:
                    buckets.append(Bucket(dtype, filled, tuple(slices)))
                    slices, filled = [], 0
        if filled:
            buckets.append(Bucket(dtype, filled, tuple(slices)))
    return buckets


def _plan_fingerprint(metas: Sequence[TensorMeta], buckets: Sequence[Bucket]) -> int:
    text = "|".join(f"{m.name}:{m.dtype}:{tuple(m.shape)}" for m in metas) + f"#{len(buckets)}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:7], "little")


def plan_header(metas: Sequence[TensorMeta], buckets: Sequence[Bucket]) -> torch.Tensor:
    """Return the int64 header broadcast ahead of the buckets: counts, total elements and a plan fingerprint."""
    total = sum(b.numel for b in buckets)
    return torch.tensor([len(metas), len(buckets), total, _plan_fingerprint(metas, buckets)], dtype=torch.int64)


def iter_state_dict_bytes(state_dict: Mapping[str, torch.Tensor]) -> Iterator[int]:
    """Yield the byte size of each tensor of ``state_dict``."""
    for tensor in state_dict.values():
        yield tensor.numel() * tensor.element_size()


def state_dict_bytes(state_dict: Mapping[str, torch.Tensor]) -> int:
    """Return the total byte size of ``state_dict``."""
    return sum(iter_state_dict_bytes(state_dict))


def metas_bytes(metas: Sequence[TensorMeta]) -> int:
    """Return the total byte size of the tensors ``metas`` describe."""
    return sum(numel_of(m.shape) * dtype_from_name(m.dtype).itemsize for m in metas)
