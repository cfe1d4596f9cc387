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
  :class:`~trinity.weight_transport.protocol.TensorMeta` list rank 0 returns
  (or :func:`~trinity.weight_transport.buckets.state_dict_metas` computed ahead
  of the broadcast) and the same ``bucket_bytes``. Both sides derive the same
  bucket plan from the metas (:mod:`trinity.weight_transport.buckets`). A small
  header broadcast first lets receivers refuse a plan that differs from the
  sender's with a clear error instead of silently loading garbage.

The process group itself comes from the selected device backend
(``trinity.device.stateless_process_group``): ``gloo`` with CPU buffers, or
the backend's own collective with buffers on the current device. Only the
group's own ``broadcast(tensor, root)`` is used, so the group needs no
registration in torch's default world.
"""

from __future__ import annotations

import datetime
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch

import trinity.device
from trinity.weight_transport.buckets import (
    HEADER_LEN,
    Bucket,
    dtype_from_name,
    numel_of,
    plan_buckets,
    plan_header,
    state_dict_metas,
)
from trinity.weight_transport.protocol import TensorMeta, WeightSyncError, WeightSyncGroupInfo

logger = logging.getLogger(__name__)

#: Buckets in flight at once on each side of a broadcast (double buffering).
IN_FLIGHT = 2
#: Seconds a member waits in a collective between two looks at whether the sync was given up (:func:`give_up`).
WAIT_SLICE_S = 0.5
#: Staging buffers of a receiver loading in place (:meth:`WeightSyncGroup.receive_into`): one bucket at most.
RECEIVE_STAGING = 1


class _TensorStream:
    """Tensors of a :meth:`WeightSyncGroup.broadcast_stream`, taken from an iterator as buckets need them."""

    def __init__(self, tensors: Iterator[torch.Tensor], metas: Sequence[TensorMeta], buckets: Sequence[Bucket]) -> None:
        self.tensors = tensors
        self.metas = metas
        self.taken = 0
        self.held: dict[int, torch.Tensor] = {}
        #: Per bucket number, the tensors it is the last bucket of.
        self.last_of: dict[int, list[int]] = {}
        last: dict[int, int] = {}
        for number, bucket in enumerate(buckets):
            for piece in bucket.slices:
                last[piece.index] = number
        for index, number in last.items():
            self.last_of.setdefault(number, []).append(index)

    def flat(self, index: int) -> torch.Tensor:
        """Return tensor ``index`` flattened, taking tensors from the iterator up to it."""
        while index not in self.held:
            if self.taken >= len(self.metas):
                raise WeightSyncError(f"tensor {index} was asked for, but the stream has {len(self.metas)}")
            tensor = next(self.tensors, None)
            if tensor is None:
                raise WeightSyncError(
                    f"the weight stream ended after {self.taken} tensors; its metas list {len(self.metas)}"
                )
            meta = self.metas[self.taken]
            expected = math.prod(meta.shape)
            if tensor.numel() != expected:
                raise WeightSyncError(
                    f"streamed tensor {self.taken} ({meta.name!r}) has {tensor.numel()} elements, but its meta "
                    f"says shape {tuple(meta.shape)} ({expected}); the metas and the tensors were taken from "
                    "different models or in a different order"
                )
            self.held[self.taken] = tensor.detach().reshape(-1)
            self.taken += 1
        return self.held[index]

    def release_after(self, bucket: int) -> None:
        """Let go of the tensors whose last bucket is ``bucket``."""
        for index in self.last_of.get(bucket, ()):
            self.held.pop(index, None)

    def drain(self) -> None:
        """Run the iterator to its end (its items may be collectives other processes wait in)."""
        self.held.clear()
        for _ in self.tensors:
            pass


def _first_difference(expected: Sequence[TensorMeta], held: Sequence[TensorMeta]) -> str:
    """Say where two weight plans part: the first tensor that differs, or their lengths."""
    for index, (was, now) in enumerate(zip(expected, held, strict=False)):
        if was != now:
            return (f"tensor {index}: {was.name} {was.dtype}{list(was.shape)} is now "
                    f"{now.name} {now.dtype}{list(now.shape)}")
    return f"{len(expected)} tensors then, {len(held)} now"


def _give_up_key(group_name: str) -> str:
    """Return the store key that says the current sync of group ``group_name`` was given up."""
    return f"{group_name}/given-up"


def give_up(info: WeightSyncGroupInfo, timeout_s: float = 5.0) -> bool:
    """Tell every member of the group ``info`` describes to leave the collective it waits in; return whether told.

    The synchronizer calls it when a sync fails: a member still waiting for a
    bucket from a sender that stopped (or a sender waiting for a receiver that
    left) raises WeightSyncError within :data:`WAIT_SLICE_S` instead of at
    the group's timeout. The group is not usable afterwards: the next sync
    builds a new one. False when rank 0's store cannot be reached (its members
    notice that by themselves).
    """
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    try:
        store = TCPStore(info.master_addr, info.master_port, None, is_master=False,
                         timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False)
        store.set(_give_up_key(info.group_name), "1")
    except Exception as exc:  # noqa: BLE001 - rank 0 gone: there is nobody to tell, and its members see it
        logger.debug("weight-sync group %s: could not tell its members to give up: %s", info.group_name, exc)
        return False
    return True


def _release(pg: Any, store: Any) -> None:
    """Drop an abandoned process group (its destructor waits for the collective left in flight)."""
    del pg, store


def _direct_view(bucket: Bucket, targets: Sequence[torch.Tensor], device: torch.device) -> torch.Tensor | None:
    """Return the part of a target that ``bucket`` fills when it can be received there without staging, else None."""
    if len(bucket.slices) != 1:
        return None
    piece = bucket.slices[0]
    target = targets[piece.index]
    if target.device != device or target.dtype != dtype_from_name(bucket.dtype) or not target.is_contiguous():
        return None
    return target.view(-1)[piece.start : piece.stop]


def _buffer_device(device_type: str) -> torch.device:
    """Return the device a group's buffers live on: the CPU, or the current device of the selected backend."""
    if device_type == "cpu":
        return torch.device("cpu")
    device: torch.device = trinity.device.torch_device()
    if device.type != device_type:
        raise WeightSyncError(
            f"the weight-sync group moves {device_type!r} tensors but the selected device backend is "
            f"{trinity.device.get_device_type()!r}; the backend's trinity_stateless_process_group returned a "
            "group for another device"
        )
    return device


class WeightSyncGroup:
    """A process group of trainer rank 0 (rank 0) and the rollout engines (ranks 1..world-1)."""

    def __init__(self, pg: Any, store: Any, info: WeightSyncGroupInfo, rank: int, *, device: torch.device) -> None:
        self._pg = pg
        self._store = store
        self.info = info
        self.rank = rank
        self.world_size = info.world_size
        self.device = device
        self._closed = False
        #: Whether a collective failed or was left unfinished (the sync was given up): closing must not wait for it.
        self._abandoned = False
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
    def _build(cls, info: WeightSyncGroupInfo, rank: int) -> WeightSyncGroup:
        from torch.distributed import PrefixStore, TCPStore  # type: ignore[attr-defined]

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
        try:
            group = trinity.device.stateless_process_group(
                info.backend, PrefixStore(f"{info.group_name}/{info.backend}", store), rank=rank,
                world_size=info.world_size, timeout=timeout, group_name=info.group_name,
            )
        except trinity.device.DeviceError as exc:  # no route, or the backend's runtime is missing: its own words
            raise WeightSyncError(f"weight-sync group {info.group_name!r}: {exc}") from exc
        except Exception as exc:
            raise WeightSyncError(
                f"weight-sync group {info.group_name!r} ({info.backend}): rank {rank} of {info.world_size} could not "
                f"rendezvous within {info.timeout_s:g} s: {type(exc).__name__}: {exc}"
            ) from exc
        device = _buffer_device(group.device_type)
        logger.info("weight-sync group %s: rank %d/%d ready in %.2f s (%s on %s)", info.group_name, rank,
                    info.world_size, time.monotonic() - started, group.collective, device)
        return cls(group.process_group, store, info, rank, device=device)

    # -- collectives ---------------------------------------------------------------------

    def _wait(self, work: Any) -> None:
        """Wait for one collective, looking every :data:`WAIT_SLICE_S` whether the sync was given up.

        A sync the synchronizer gave up (:func:`give_up`: a participant died,
        or another failed) leaves the living members waiting for data that will
        never come; each of them leaves the collective within a slice and
        raises WeightSyncError, so its process is free for the next sync. So
        does a member whose group store (hosted by rank 0) is gone. A
        collective that fails by itself (a peer closed its connection) raises
        its own error at once.

        Only the CPU's ``gloo`` group waits in slices (its work objects time out
        a wait and can be waited on again). A device collective is waited on
        as its backend waits (NCCL's and HCCL's watchdogs end a hung one at
        the group's timeout): a timed wait there can abort the communicator.
        """
        try:
            if self.device.type != "cpu":
                work.wait()
                return
            slice_ = datetime.timedelta(seconds=WAIT_SLICE_S)
            while True:
                try:
                    work.wait(slice_)
                    return
                except RuntimeError:
                    if work.is_completed():  # it failed, rather than not finishing within the slice
                        raise
                self._check_not_given_up()
        except BaseException:
            self._abandoned = True  # collectives issued after this one may still be in flight
            raise

    def _check_not_given_up(self) -> None:
        name = self.info.group_name
        try:
            given_up = bool(self._store.check([_give_up_key(name)]))
        except Exception as exc:  # noqa: BLE001 - any failure to reach the store means rank 0 is gone
            raise WeightSyncError(
                f"weight-sync group {name!r}: rank {self.rank} lost the group's store on rank 0 "
                f"({type(exc).__name__}: {exc}); the sync is given up"
            ) from None
        if given_up:
            raise WeightSyncError(
                f"weight-sync group {name!r}: the sync was given up while rank {self.rank} waited in it "
                "(another participant failed or died)"
            )

    def _broadcast(self, tensor: torch.Tensor) -> None:
        self._wait(self._pg.broadcast(tensor, 0))

    def broadcast_state_dict(self, state_dict: Mapping[str, torch.Tensor], bucket_bytes: int) -> list[TensorMeta]:
        """Broadcast ``state_dict`` from rank 0 in buckets of at most ``bucket_bytes``; return its metas.

        Packing bucket ``i + 1`` overlaps the broadcast of bucket ``i``: at most
        :data:`IN_FLIGHT` packing buffers, reused once their broadcast is done
        and kept for the next sync (released by :meth:`close`). A bucket that
        is one piece of one tensor already on the group's device is sent
        without a copy.
        """
        metas = state_dict_metas(state_dict)
        flats = [t.detach().reshape(-1) for t in state_dict.values()]
        self._send(metas, bucket_bytes, flats.__getitem__, lambda _bucket: None)
        return metas

    def broadcast_stream(self, metas: Sequence[TensorMeta], tensors: Iterable[torch.Tensor], bucket_bytes: int) -> None:
        """Broadcast the tensors ``tensors`` yields (one per meta, in order) as :meth:`broadcast_state_dict` would.

        A tensor is taken from ``tensors`` only when a bucket needs it and let
        go once its last bucket is packed, so the sender never holds the whole
        state dict: ``tensors`` can gather each one from shards as it is asked
        for. ``tensors`` is run to its end even past the last bucket (each
        item may be a collective the caller's peers take part in). Raises
        WeightSyncError when it yields fewer tensors than ``metas``.
        """
        stream = _TensorStream(iter(tensors), metas, plan_buckets(metas, bucket_bytes))
        try:
            self._send(metas, bucket_bytes, stream.flat, stream.release_after)
        finally:
            stream.drain()

    def require_plan(self, expected: Sequence[TensorMeta], held: Sequence[TensorMeta], bucket_bytes: int) -> None:
        """Rank 0, before a send to receivers waiting with ``expected`` (a plan kept from an earlier sync).

        When the weights ``held`` no longer match it, only their header is
        broadcast (each receiver sees a header that is not theirs and raises at
        once, rather than waiting for buckets that never come) and
        WeightSyncError names the first tensor that differs.
        """
        if list(held) == list(expected):
            return
        self._send_header(held, bucket_bytes)
        raise WeightSyncError(
            f"the trainer's weights no longer match the plan of the first sync ({_first_difference(expected, held)}); "
            "a run's weights cannot change names, shapes or dtypes"
        )

    def _send_header(self, metas: Sequence[TensorMeta], bucket_bytes: int) -> list[Bucket]:
        """Rank 0: broadcast the header of ``metas`` in buckets of ``bucket_bytes``; return the buckets."""
        self._check_open()
        if self.rank != 0:
            raise WeightSyncError(f"only rank 0 broadcasts weights; this member is rank {self.rank}")
        buckets = plan_buckets(metas, bucket_bytes)
        self._broadcast(plan_header(metas, buckets).to(self.device))
        return buckets

    def _send(self, metas: Sequence[TensorMeta], bucket_bytes: int, flat: Callable[[int], torch.Tensor],
              packed: Callable[[int], None]) -> None:
        """Rank 0: broadcast the header and the buckets of ``metas``; ``flat(i)`` gives tensor ``i`` flattened,
        ``packed(b)`` is called once bucket ``b`` no longer needs its tensors."""
        buckets = self._send_header(metas, bucket_bytes)
        largest = max((b.nbytes for b in buckets), default=0)
        if self._staging and self._staging[0].numel() < largest:
            self._staging = []
        free: list[torch.Tensor] = list(self._staging)
        allocated = len(free)
        # (work, staging buffer to reuse or None, the tensor sent: kept alive until its broadcast is done)
        in_flight: deque[tuple[Any, torch.Tensor | None, torch.Tensor]] = deque()

        def retire() -> None:
            work, held, _sent = in_flight.popleft()
            self._wait(work)
            if held is not None:
                free.append(held)

        for number, bucket in enumerate(buckets):
            while len(in_flight) >= IN_FLIGHT:
                retire()
            pieces = [flat(s.index)[s.start : s.stop] for s in bucket.slices]
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
            del pieces
            packed(number)
            trinity.device.synchronize()
            in_flight.append((self._pg.broadcast(buffer, 0), held, buffer))
        while in_flight:
            retire()
        trinity.device.synchronize()

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
        buckets = self._receive_plan(metas, bucket_bytes)
        # One flat buffer per dtype, in plan order: bucket k of a dtype is the next run of its buffer.
        sizes: dict[str, int] = {}
        offsets: list[int] = []
        for meta in metas:
            offsets.append(sizes.get(meta.dtype, 0))
            sizes[meta.dtype] = sizes.get(meta.dtype, 0) + numel_of(meta.shape)
        storage = {dtype: torch.empty(total, dtype=dtype_from_name(dtype), device=self.device)
                   for dtype, total in sizes.items()}
        filled = dict.fromkeys(sizes, 0)
        in_flight: deque[Any] = deque()
        trinity.device.synchronize()
        for bucket in buckets:
            start = filled[bucket.dtype]
            filled[bucket.dtype] = start + bucket.numel
            if len(in_flight) >= IN_FLIGHT:
                self._wait(in_flight.popleft())
            in_flight.append(self._pg.broadcast(storage[bucket.dtype][start : start + bucket.numel], 0))
        while in_flight:
            self._wait(in_flight.popleft())
        trinity.device.synchronize()
        out: dict[str, torch.Tensor] = {}
        for meta, offset in zip(metas, offsets, strict=True):
            view = storage[meta.dtype][offset : offset + numel_of(meta.shape)].view(meta.shape)
            out[meta.name] = view if target == self.device else view.to(target)
        return out

    def receive_into(self, metas: Sequence[TensorMeta], bucket_bytes: int, targets: Sequence[torch.Tensor]) -> None:
        """Receive the broadcast of ``metas`` straight into ``targets`` (one per meta, in order), bucket by bucket.

        Unlike :meth:`receive_state_dict` no buffer of the whole state dict is
        allocated: a bucket that is one piece of a target already on the
        group's device, in its dtype and contiguous, is received in place;
        any other bucket lands in a staging buffer (:data:`RECEIVE_STAGING`,
        the size of the largest bucket: the memory a sync adds stays within
        one bucket) and is copied into its targets,
        converting dtype and device. A target needs only the meta's number of
        elements. If the broadcast fails midway, the targets hold a mix of old
        and new values: the caller must treat them as unknown. Raises
        :class:`WeightSyncError` like :meth:`receive_state_dict`, and before
        any byte is received when a target's size differs from its meta.
        """
        self._check_open()
        if self.rank == 0:
            raise WeightSyncError("rank 0 is the sender; it cannot receive weights")
        if len(targets) != len(metas):
            raise WeightSyncError(f"receive_into got {len(targets)} targets for {len(metas)} tensors")
        for meta, target in zip(metas, targets, strict=True):
            if target.numel() != numel_of(meta.shape):
                raise WeightSyncError(
                    f"weight {meta.name!r}: the target holds {target.numel()} elements, the sender sends "
                    f"{numel_of(meta.shape)} (shape {tuple(meta.shape)})"
                )
        buckets = self._receive_plan(metas, bucket_bytes)
        largest = max((b.nbytes for b in buckets), default=0)
        free: list[torch.Tensor] = []
        allocated = 0
        in_flight: deque[tuple[Any, Bucket, torch.Tensor | None]] = deque()

        def land() -> None:
            work, bucket, held = in_flight.popleft()
            self._wait(work)
            if held is None:
                return
            trinity.device.synchronize()
            flat = held[: bucket.nbytes].view(dtype_from_name(bucket.dtype))
            for piece in bucket.slices:
                length = piece.stop - piece.start
                destination = targets[piece.index].view(-1)[piece.start : piece.stop]
                destination.copy_(flat[piece.offset : piece.offset + length])
            free.append(held)

        trinity.device.synchronize()
        for bucket in buckets:
            while len(in_flight) >= IN_FLIGHT:
                land()
            direct = _direct_view(bucket, targets, self.device)
            if direct is not None:
                in_flight.append((self._pg.broadcast(direct, 0), bucket, None))
                continue
            if not free and allocated < RECEIVE_STAGING:
                free.append(torch.empty(largest, dtype=torch.uint8, device=self.device))
                allocated += 1
            while not free:
                land()
            held = free.pop()
            buffer = held[: bucket.nbytes].view(dtype_from_name(bucket.dtype))
            in_flight.append((self._pg.broadcast(buffer, 0), bucket, held))
        while in_flight:
            land()
        trinity.device.synchronize()

    def receive_stream(
        self, metas: Sequence[TensorMeta], bucket_bytes: int, device: torch.device | str | None = None
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """Receive the broadcast of ``metas`` bucket by bucket, yielding ``(name, tensor)`` as each tensor completes.

        For loaders that take weights one at a time (vLLM's ``load_weights``):
        no buffer of the whole state dict is made. A bucket lands in one
        staging buffer (the largest bucket's size); a tensor that lies whole in
        it is yielded as a copy on ``device`` (default: the group's device), a
        tensor split across buckets is assembled in a buffer of its own and
        yielded when its last piece arrives. So the memory a sync adds stays
        within one bucket plus the largest tensor, and the caller may keep
        what it is given. Tensors come in bucket order (per dtype), not in
        ``metas`` order. The generator must be run to its end: the broadcast
        is a collective. Raises :class:`WeightSyncError` like :meth:`receive_state_dict`.
        """
        self._check_open()
        if self.rank == 0:
            raise WeightSyncError("rank 0 is the sender; it cannot receive weights")
        target = torch.device(device) if device is not None else self.device
        buckets = self._receive_plan(metas, bucket_bytes)
        staging = torch.empty(max((b.nbytes for b in buckets), default=0), dtype=torch.uint8, device=self.device)
        partial: dict[int, torch.Tensor] = {}
        trinity.device.synchronize()
        for bucket in buckets:
            flat = staging[: bucket.nbytes].view(dtype_from_name(bucket.dtype))
            self._wait(self._pg.broadcast(flat, 0))
            trinity.device.synchronize()
            for piece in bucket.slices:
                meta = metas[piece.index]
                total = numel_of(meta.shape)
                received = flat[piece.offset : piece.offset + piece.stop - piece.start]
                if piece.start == 0 and piece.stop == total:
                    yield meta.name, received.to(target, copy=True).view(meta.shape)
                    continue
                whole = partial.get(piece.index)
                if whole is None:
                    whole = partial[piece.index] = torch.empty(total, dtype=flat.dtype, device=target)
                whole[piece.start : piece.stop].copy_(received)
                if piece.stop == total:
                    del partial[piece.index]
                    yield meta.name, whole.view(meta.shape)
        for meta in metas:  # zero-size tensors are in no bucket
            if numel_of(meta.shape) == 0:
                yield meta.name, torch.empty(meta.shape, dtype=dtype_from_name(meta.dtype), device=target)

    def _receive_plan(self, metas: Sequence[TensorMeta], bucket_bytes: int) -> list[Bucket]:
        """Return the bucket plan of ``metas`` once the sender's header confirms it is the plan being sent."""
        buckets = plan_buckets(metas, bucket_bytes)
        expected = plan_header(metas, buckets)
        header = torch.empty(HEADER_LEN, dtype=torch.int64, device=self.device)
        self._broadcast(header)
        if not torch.equal(header.cpu(), expected):
            raise WeightSyncError(
                f"weight-sync rank {self.rank}: the sender broadcasts {int(header[0])} tensors in {int(header[1])} "
                f"buckets but the metas given here describe {len(metas)} tensors in {len(buckets)} buckets; "
                "sender and receivers must use the same metas and bucket_bytes"
            )
        return buckets

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
        """Release the group and its store (idempotent).

        A group whose sync was given up still has a collective in flight that
        ends only at the group's timeout, and releasing the process group
        waits for it: that release happens in a background thread.
        """
        if self._closed:
            return
        self._closed = True
        self._staging = []
        pg, store, self._pg, self._store = self._pg, self._store, None, None
        if self._abandoned:
            threading.Thread(target=_release, args=(pg, store), name="trinity-weight-sync-release", daemon=True).start()
            return
        try:
            if hasattr(pg, "shutdown"):
                pg.shutdown()
        except Exception as exc:  # noqa: BLE001 - closing must not fail a run that is ending
            logger.debug("closing weight-sync group %s: %s", self.info.group_name, exc)

    def __enter__(self) -> WeightSyncGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
