"""The online weight-sync group: trainer rank 0 broadcasts weights to the rollout engines.

The group is a process group of its own, built on its own ``TCPStore``; it
never needs (nor touches) the default process group, so the trainer's FSDP
group and each engine's tensor-parallel group live beside it undisturbed.

* Trainer rank 0 calls :meth:`WeightSyncGroup.create` (it hosts the store and
  is rank 0); engine ``i`` calls :meth:`WeightSyncGroup.join` with rank
  ``info.rank_offset + i``. Every member must construct concurrently: the
  constructor is a rendezvous.
* Per sync, rank 0 calls :meth:`~WeightSyncGroup.broadcast_state_dict` and the
  engines :meth:`~WeightSyncGroup.receive_state_dict` with the
  :class:`~trinity.common.models.engine.TensorMeta` list rank 0 returns (or
  :func:`state_dict_metas` computed ahead of the broadcast) and the same
  ``bucket_bytes``. Both sides derive the same bucket plan from the metas
  (:func:`plan_buckets`): tensors of one dtype are laid end to end and cut
  into flat buckets of at most ``bucket_bytes``; a tensor larger than a
  bucket spans several. A small header broadcast first lets receivers refuse
  a plan that differs from the sender's with a clear error instead of
  silently loading garbage.

Which process group is built (:func:`new_collective_group`):

* ``gloo``: ``ProcessGroupGloo`` on a ``PrefixStore`` of the group's store;
  buffers live on the CPU.
* any other collective name (the selected device backend's own collective,
  or a vendor's registered c10d plugin): the generic route — torch's own group factory
  (``torch.distributed.distributed_c10d._new_process_group_helper``) called
  as it is for a *default* group (no global ranks, so it never consults a
  default group), with our store, then registered so collectives can map its
  ranks. Buffers live on the selected device (``trinity.device.torch_device()``).
  Without an accelerator the route can only be exercised with ``gloo`` as
  the backend name. It depends on a private torch function whose signature has
  changed across releases (``pg_options`` became ``backend_options``); both
  spellings are handled.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import socket
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import torch

import trinity.device
from trinity.common.models.engine import TensorMeta, WeightSyncGroupInfo

logger = logging.getLogger(__name__)

#: Default bucket size of a broadcast: 64 MiB (``synchronizer.bucket_size_mb``).
DEFAULT_BUCKET_BYTES = 64 << 20

_HEADER_LEN = 4
#: Buckets in flight at once on each side of a broadcast (double buffering).
IN_FLIGHT = 2


class WeightSyncError(RuntimeError):
    """The weight-sync group could not be built, or a broadcast did not match what the receiver expected."""


# --- addresses -------------------------------------------------------------------------


def find_free_port(host: str = "") -> int:
    """Return a TCP port that is free on this machine right now (bind to port 0, read it back)."""
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def node_ip_address() -> str:
    """Return an address of this machine the other group members can reach (Ray's node address when connected)."""
    try:
        import ray

        if ray.is_initialized():
            return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
    except Exception:  # noqa: BLE001 - fall back to the socket route below
        pass
    try:
        with closing(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)) as sock:
            sock.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outgoing interface
            return str(sock.getsockname()[0])
    except OSError:
        return "127.0.0.1"


# --- metas and bucket plans ------------------------------------------------------------


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


def _numel(shape: Sequence[int]) -> int:
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
            total = _numel(metas[index].shape)
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


def _header(metas: Sequence[TensorMeta], buckets: Sequence[Bucket]) -> torch.Tensor:
    total = sum(b.numel for b in buckets)
    return torch.tensor([len(metas), len(buckets), total, _plan_fingerprint(metas, buckets)], dtype=torch.int64)


# --- process groups --------------------------------------------------------------------


def new_collective_group(
    backend: str, store: Any, rank: int, world_size: int, *, timeout: datetime.timedelta, group_name: str
) -> tuple[Any, torch.device]:
    """Return ``(process group, device its buffers live on)`` for ``backend``, without a default process group.

    ``gloo`` is built directly (``ProcessGroupGloo``); every other name goes the
    generic route (see the module docstring). Raises :class:`WeightSyncError`
    with the backend's own error when the group cannot be built.
    """
    if backend == "gloo":
        from torch.distributed.distributed_c10d import PrefixStore, ProcessGroupGloo

        pg = ProcessGroupGloo(PrefixStore(f"{group_name}/gloo", store), rank, world_size, timeout)
        return pg, torch.device("cpu")
    return generic_collective_group(backend, store, rank, world_size, timeout=timeout, group_name=group_name)


def generic_collective_group(
    backend: str, store: Any, rank: int, world_size: int, *, timeout: datetime.timedelta, group_name: str
) -> tuple[Any, torch.device]:
    """Build a process group for any c10d backend name through torch's group factory (the generic route).

    The factory is called as for a default group (``global_ranks_in_group=[]``),
    so it needs no default group, and the result is registered with an identity
    rank map. If this process has a default group bound to a device (an
    engine's tensor-parallel group, say), its device binding is hidden during
    the call, so torch does not split the new communicator from it. Buffers go to the
    selected device, except for ``gloo`` (CPU). Only ``gloo`` can be tested on
    a machine without an accelerator.
    """
    import inspect

    from torch.distributed import distributed_c10d as c10d

    helper = getattr(c10d, "_new_process_group_helper", None)
    if helper is None:
        raise WeightSyncError(
            f"this torch ({torch.__version__}) has no process-group factory; "
            f"cannot build a {backend!r} weight-sync group"
        )
    kwargs: dict[str, Any] = {"group_name": group_name, "timeout": timeout}
    params = inspect.signature(helper).parameters
    for option_name in ("backend_options", "pg_options"):
        if option_name in params:
            kwargs[option_name] = None
            break
    # torch splits a new communicator from the default group's when that group is bound to a device; the
    # weight-sync group has other members (trainer rank 0 + engines), so it must get a communicator of its own.
    default = c10d._world.default_pg if c10d.is_initialized() else None
    bound = getattr(default, "bound_device_id", None)
    try:
        if bound is not None:
            default.bound_device_id = None  # type: ignore[union-attr]
        made = helper(world_size, rank, [], backend, store, **kwargs)
    except Exception as exc:
        raise WeightSyncError(
            f"cannot build a {backend!r} weight-sync group (rank {rank} of {world_size}): {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        if bound is not None:
            default.bound_device_id = bound  # type: ignore[union-attr]
    pg = made[0] if isinstance(made, tuple) else made
    c10d._world.pg_group_ranks[pg] = {i: i for i in range(world_size)}
    device = torch.device("cpu") if backend in ("gloo", "cpu:gloo") else trinity.device.torch_device()
    return pg, device


def _destroy_generic(pg: Any) -> None:
    from torch.distributed import distributed_c10d as c10d

    if c10d._world.pg_map.get(pg) is not None:
        c10d.destroy_process_group(pg)


# --- the group -------------------------------------------------------------------------


class WeightSyncGroup:
    """A process group of trainer rank 0 (rank 0) and the rollout engines (ranks 1..world-1)."""

    def __init__(
        self, pg: Any, store: Any, info: WeightSyncGroupInfo, rank: int, *, device: torch.device, generic: bool
    ) -> None:
        self._pg = pg
        self._store = store
        self.info = info
        self.rank = rank
        self.world_size = info.world_size
        self.device = device
        self._generic = generic
        self._closed = False
        #: Packing buffers of the sender, reused across syncs (at most IN_FLIGHT x the largest bucket).
        self._staging: list[torch.Tensor] = []

    @classmethod
    def create(cls, info: WeightSyncGroupInfo) -> WeightSyncGroup:
        """Host the group's store on ``info.master_addr:info.master_port`` and join as rank 0 (the trainer).

        Blocks until every engine has joined (or ``info.timeout_s`` passes).
        """
        return cls._build(info, 0)

    @classmethod
    def join(cls, info: WeightSyncGroupInfo, rank: int) -> WeightSyncGroup:
        """Join the group hosted by trainer rank 0 as ``rank`` (engine ranks start at ``info.rank_offset``)."""
        if not 0 < rank < info.world_size:
            raise WeightSyncError(f"an engine joins with a rank in 1..{info.world_size - 1}, got {rank}")
        return cls._build(info, rank)

    @classmethod
    def _build(cls, info: WeightSyncGroupInfo, rank: int, *, generic: bool | None = None) -> WeightSyncGroup:
        from torch.distributed import TCPStore  # type: ignore[attr-defined]

        timeout = datetime.timedelta(seconds=info.timeout_s)
        started = time.monotonic()
        try:
            store = TCPStore(
                info.master_addr, info.master_port, info.world_size, is_master=rank == 0, timeout=timeout,
                wait_for_workers=False,
            )
        except Exception as exc:
            where = "host" if rank == 0 else "reach"
            raise WeightSyncError(
                f"weight-sync group {info.group_name!r}: rank {rank} cannot {where} the store at "
                f"{info.master_addr}:{info.master_port}: {type(exc).__name__}: {exc}"
            ) from exc
        use_generic = info.backend != "gloo" if generic is None else generic
        try:
            if use_generic:
                pg, device = generic_collective_group(
                    info.backend, store, rank, info.world_size, timeout=timeout, group_name=info.group_name
                )
            else:
                pg, device = new_collective_group(
                    info.backend, store, rank, info.world_size, timeout=timeout, group_name=info.group_name
                )
        except WeightSyncError:
            raise
        except Exception as exc:
            raise WeightSyncError(
                f"weight-sync group {info.group_name!r} ({info.backend}): rank {rank} of {info.world_size} could not "
                f"rendezvous within {info.timeout_s:g} s: {type(exc).__name__}: {exc}"
            ) from exc
        logger.info("weight-sync group %s: rank %d/%d ready in %.2f s (%s on %s)", info.group_name, rank,
                    info.world_size, time.monotonic() - started, info.backend, device)
        return cls(pg, store, info, rank, device=device, generic=use_generic)

    # -- collectives ---------------------------------------------------------------------

    def _broadcast(self, tensor: torch.Tensor) -> None:
        self._pg.broadcast(tensor, 0).wait()

    def broadcast_state_dict(self, state_dict: Mapping[str, torch.Tensor], bucket_bytes: int) -> list[TensorMeta]:
        """Broadcast ``state_dict`` from rank 0 in buckets of at most ``bucket_bytes``; return its metas.

        Packing bucket ``i + 1`` overlaps the broadcast of bucket ``i``: at most
        :data:`IN_FLIGHT` packing buffers, reused once their broadcast is done
        and kept for the next sync (released by :meth:`close`). A bucket that
        is one piece of one tensor already on the group's device is sent
        without a copy.
        """
        self._check_open()
        if self.rank != 0:
            raise WeightSyncError(f"only rank 0 broadcasts weights; this member is rank {self.rank}")
        metas = state_dict_metas(state_dict)
        buckets = plan_buckets(metas, bucket_bytes)
        self._broadcast(_header(metas, buckets).to(self.device))
        flats = [t.detach().reshape(-1) for t in state_dict.values()]
        largest = max((b.nbytes for b in buckets), default=0)
        if self._staging and self._staging[0].numel() < largest:
            self._staging = []
        free: list[torch.Tensor] = list(self._staging)
        allocated = len(free)
        in_flight: deque[tuple[Any, torch.Tensor | None]] = deque()

        def retire() -> None:
            work, held = in_flight.popleft()
            work.wait()
            if held is not None:
                free.append(held)

        for bucket in buckets:
            while len(in_flight) >= IN_FLIGHT:
                retire()
            pieces = [flats[s.index][s.start : s.stop] for s in bucket.slices]
            held: torch.Tensor | None = None
            if len(pieces) == 1:
                buffer = pieces[0].to(self.device)
            else:
                if not free and allocated < IN_FLIGHT:
                    fresh = torch.empty(largest, dtype=torch.uint8, device=self.device)
                    self._staging.append(fresh)  # kept for the next sync: no new pages to fault in
                    free.append(fresh)
                    allocated += 1
                while not free:
                    retire()
                held = free.pop()
                buffer = held[: bucket.nbytes].view(dtype_from_name(bucket.dtype))
                if all(p.device == self.device for p in pieces):
                    torch.cat(pieces, out=buffer)
                else:
                    buffer.copy_(torch.cat(pieces))
            trinity.device.synchronize()
            in_flight.append((self._pg.broadcast(buffer, 0), held))
        while in_flight:
            retire()
        trinity.device.synchronize()
        return metas

    def receive_state_dict(
        self, metas: Sequence[TensorMeta], bucket_bytes: int, device: torch.device | str | None = None
    ) -> dict[str, torch.Tensor]:
        """Receive the broadcast of ``metas`` (sent with the same ``bucket_bytes``); tensors end up on ``device``.

        The tensors of one dtype are views of one flat buffer laid out as the
        bucket plan lays them, so each bucket is received straight into place:
        no unpacking copy. ``device`` defaults to the group's buffer device
        (tensors are moved there afterwards when it differs). Raises
        :class:`WeightSyncError` when the sender's plan differs from the one
        ``metas`` give (different names, shapes, dtypes or bucket size).
        """
        self._check_open()
        if self.rank == 0:
            raise WeightSyncError("rank 0 is the sender; it cannot receive weights")
        target = torch.device(device) if device is not None else self.device
        buckets = plan_buckets(metas, bucket_bytes)
        expected = _header(metas, buckets)
        header = torch.empty(_HEADER_LEN, dtype=torch.int64, device=self.device)
        self._broadcast(header)
        if not torch.equal(header.cpu(), expected):
            raise WeightSyncError(
                f"weight-sync rank {self.rank}: the sender broadcasts {int(header[0])} tensors in {int(header[1])} "
                f"buckets but the metas given here describe {len(metas)} tensors in {len(buckets)} buckets; "
                "sender and receivers must use the same metas and bucket_bytes"
            )
        # One flat buffer per dtype, in plan order: bucket k of a dtype is the next run of its buffer.
        sizes: dict[str, int] = {}
        offsets: list[int] = []
        for meta in metas:
            offsets.append(sizes.get(meta.dtype, 0))
            sizes[meta.dtype] = sizes.get(meta.dtype, 0) + _numel(meta.shape)
        storage = {dtype: torch.empty(total, dtype=dtype_from_name(dtype), device=self.device)
                   for dtype, total in sizes.items()}
        filled = dict.fromkeys(sizes, 0)
        in_flight: deque[Any] = deque()
        trinity.device.synchronize()
        for bucket in buckets:
            start = filled[bucket.dtype]
            filled[bucket.dtype] = start + bucket.numel
            if len(in_flight) >= IN_FLIGHT:
                in_flight.popleft().wait()
            in_flight.append(self._pg.broadcast(storage[bucket.dtype][start : start + bucket.numel], 0))
        while in_flight:
            in_flight.popleft().wait()
        trinity.device.synchronize()
        out: dict[str, torch.Tensor] = {}
        for meta, offset in zip(metas, offsets, strict=True):
            view = storage[meta.dtype][offset : offset + _numel(meta.shape)].view(meta.shape)
            out[meta.name] = view if target == self.device else view.to(target)
        return out

    def broadcast_tensor(self, tensor: torch.Tensor) -> None:
        """Broadcast one tensor in place from rank 0 (a raw collective, for benchmarks and small messages)."""
        self._check_open()
        self._broadcast(tensor)

    # -- lifetime ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise WeightSyncError(f"weight-sync group {self.info.group_name!r} is closed")

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Release the group and its store (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._staging = []
        try:
            if self._generic:
                _destroy_generic(self._pg)
            elif hasattr(self._pg, "shutdown"):
                self._pg.shutdown()
        except Exception as exc:  # noqa: BLE001 - closing must not fail a run that is ending
            logger.debug("closing weight-sync group %s: %s", self.info.group_name, exc)
        self._pg = None
        self._store = None

    def __enter__(self) -> WeightSyncGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_state_dict_bytes(state_dict: Mapping[str, torch.Tensor]) -> Iterator[int]:
    """Yield the byte size of each tensor of ``state_dict``."""
    for tensor in state_dict.values():
        yield tensor.numel() * tensor.element_size()


def state_dict_bytes(state_dict: Mapping[str, torch.Tensor]) -> int:
    """Return the total byte size of ``state_dict``."""
    return sum(iter_state_dict_bytes(state_dict))


def metas_bytes(metas: Sequence[TensorMeta]) -> int:
    """Return the total byte size of the tensors ``metas`` describe."""
    return sum(_numel(m.shape) * dtype_from_name(m.dtype).itemsize for m in metas)
