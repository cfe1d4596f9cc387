"""The bucketed weight-sync group, for real over gloo between two Ray actors."""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from trinity.common.models.checksum import state_dict_checksum
from trinity.weight_transport import (
    TensorMeta,
    WeightSyncError,
    WeightSyncGroup,
    WeightSyncGroupInfo,
    find_free_port,
    metas_bytes,
    plan_buckets,
    state_dict_metas,
)
from trinity.weight_transport.buckets import dtype_from_name
from trinity.weight_transport.group import WAIT_SLICE_S, give_up

BUCKET = 64 << 10


def mixed_state_dict() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return {
        "big.float32": torch.randn(300, 257, generator=g),  # ~300 KiB: spans five 64 KiB buckets
        "small.bfloat16": torch.randn(17, 5, generator=g).to(torch.bfloat16),
        "steps.int64": torch.arange(1000, dtype=torch.int64) * 3,
        "half.float16": torch.randn(33, generator=g).to(torch.float16),
        "empty.float32": torch.zeros(0, 4),
        "scalar.float32": torch.tensor(2.5),
        "transposed.float32": torch.randn(40, 30, generator=g).t(),  # not contiguous
        "tail.bfloat16": torch.randn(70000, generator=g).to(torch.bfloat16),  # ~137 KiB
    }


def info(world: int, name: str, timeout: float = 30.0) -> WeightSyncGroupInfo:
    return WeightSyncGroupInfo("127.0.0.1", find_free_port(), world, 1, name, "gloo", timeout)


def start_members(world: int, name: str) -> dict[int, WeightSyncGroup]:
    """Build a weight-sync group of ``world`` members in threads of this process (the constructor is a rendezvous)."""
    import threading

    group = info(world, name)
    members: dict[int, WeightSyncGroup] = {}

    def build(rank: int) -> None:
        members[rank] = WeightSyncGroup.create(group) if rank == 0 else WeightSyncGroup.join(group, rank)

    threads = [threading.Thread(target=build, args=(rank,)) for rank in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(members) == list(range(world)), "the group did not form"
    return members


def test_bucket_plan_groups_dtypes_and_splits_large_tensors() -> None:
    metas = state_dict_metas(mixed_state_dict())
    buckets = plan_buckets(metas, BUCKET)
    assert [b.dtype for b in buckets][:5] == ["float32"] * 5  # float32 first (first seen): 313 KB in 5 buckets
    assert all(b.nbytes <= BUCKET for b in buckets)
    assert {b.dtype for b in buckets} == {"float32", "bfloat16", "int64", "float16"}
    for dtype in ("float32", "bfloat16"):
        assert len([b for b in buckets if b.dtype == dtype]) >= 2
    covered: dict[int, int] = {}
    for bucket in buckets:
        assert sum(s.stop - s.start for s in bucket.slices) == bucket.numel
        for s in bucket.slices:
            assert covered.get(s.index, 0) == s.start  # contiguous, in order
            covered[s.index] = s.stop
    for index, meta in enumerate(metas):
        assert covered.get(index, 0) == torch.Size(meta.shape).numel()
    assert sum(b.nbytes for b in buckets) == metas_bytes(metas)
    with pytest.raises(ValueError, match="bucket_bytes"):
        plan_buckets(metas, 0)
    with pytest.raises(WeightSyncError, match="unknown tensor dtype"):
        dtype_from_name("float33")


def test_round_trip_between_two_actors(peers: list[Any], ray_local: Any) -> None:
    sender, receiver = peers
    state = mixed_state_dict()
    group = info(2, "roundtrip")
    ray_local.get([sender.create.remote(group), receiver.join.remote(group, 1)])
    metas = state_dict_metas(state)
    received = receiver.receive.remote(metas, BUCKET)
    sent = sender.broadcast.remote(state, BUCKET)
    sent_metas, summary = ray_local.get([sent, received])
    assert sent_metas == metas
    checksum, dtypes = summary.split("|", 1)
    assert checksum == state_dict_checksum(state)
    assert dtypes == repr(sorted((name, str(t.dtype)) for name, t in state.items()))
    ray_local.get([sender.close_group.remote(), receiver.close_group.remote()])


def test_a_receiver_with_other_metas_refuses_clearly(peers: list[Any], ray_local: Any) -> None:
    sender, receiver = peers
    state = {"w": torch.ones(8), "b": torch.zeros(3)}
    group = info(2, "mismatch", timeout=1.5)
    ray_local.get([sender.create.remote(group), receiver.join.remote(group, 1)])
    wrong = [TensorMeta("w", "float32", (8,))]  # one tensor fewer than the sender sends
    received = receiver.receive.remote(wrong, BUCKET)
    sent = sender.broadcast.remote(state, BUCKET)
    with pytest.raises(ray_local.exceptions.RayTaskError, match="same metas and bucket_bytes"):
        ray_local.get(received)
    with pytest.raises(ray_local.exceptions.RayTaskError):  # nobody receives the buckets: the sender times out
        ray_local.get(sent)
    ray_local.get([sender.close_group.remote(), receiver.close_group.remote()])


def test_a_given_up_sync_frees_a_receiver_left_waiting_and_a_new_group_forms(peers: list[Any], ray_local: Any) -> None:
    """The sender stops after the header, as a sender whose sync failed does: the receiver would wait for the
    buckets until the group's timeout (60 s). Told to give up, it leaves within a second and closes at once."""
    sender, receiver = peers
    state = mixed_state_dict()
    group = info(2, "given-up", timeout=60.0)
    ray_local.get([sender.create.remote(group), receiver.join.remote(group, 1)])
    received = receiver.receive.remote(state_dict_metas(state), BUCKET)
    ray_local.get(sender.broadcast_header.remote(state, BUCKET))
    ready, _ = ray_local.wait([received], timeout=1.5)
    assert not ready, "the receiver waits for buckets that do not come"
    told = time.monotonic()
    assert give_up(group)
    with pytest.raises(ray_local.exceptions.RayTaskError, match="given up while rank 1 waited"):
        ray_local.get(received, timeout=10)
    assert time.monotonic() - told < 3 * WAIT_SLICE_S + 1
    closing = time.monotonic()
    ray_local.get([sender.close_group.remote(), receiver.close_group.remote()], timeout=10)
    assert time.monotonic() - closing < 2, "the collective left in flight is released in the background"
    fresh = info(2, "after-given-up")
    ray_local.get([sender.create.remote(fresh), receiver.join.remote(fresh, 1)], timeout=30)
    received = receiver.receive.remote(state_dict_metas(state), BUCKET)
    sent = sender.broadcast.remote(state, BUCKET)
    assert ray_local.get([sent, received], timeout=30)[1].split("|")[0] == state_dict_checksum(state)
    ray_local.get([sender.close_group.remote(), receiver.close_group.remote()])


def test_giving_up_a_group_whose_store_is_gone_says_so() -> None:
    assert give_up(info(2, "nobody-home"), timeout_s=1.0) is False


def random_state_dict(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    dtypes = [torch.float32, torch.bfloat16, torch.int32]
    state = {}
    for i in range(60):
        numel = int(torch.randint(0, 3000, (1,), generator=g)) if i % 5 else 1024 * (1 + i % 3)
        dtype = dtypes[int(torch.randint(0, 3, (1,), generator=g))]
        values = torch.randn(numel, generator=g) * 100
        state[f"t{i}"] = values.to(dtype)
    return state


@pytest.mark.parametrize("bucket", [8192, 1 << 20])
def test_random_layouts_round_trip_in_one_process(bucket: int) -> None:
    """Many tensors, three dtypes, buckets that mix whole tensors, pieces and packed runs (threads, no Ray)."""
    import threading

    state = random_state_dict(bucket)
    members = start_members(3, f"threads-{bucket}")
    metas = state_dict_metas(state)
    results: dict[int, dict[str, torch.Tensor]] = {}

    def receive(rank: int) -> None:
        results[rank] = members[rank].receive_state_dict(metas, bucket)

    receivers = [threading.Thread(target=receive, args=(rank,)) for rank in (1, 2)]
    for thread in receivers:
        thread.start()
    members[0].broadcast_state_dict(state, bucket)
    for thread in receivers:
        thread.join(30)
    for rank in (1, 2):
        assert results[rank].keys() == state.keys()
        for name, tensor in state.items():
            assert results[rank][name].dtype == tensor.dtype and torch.equal(results[rank][name], tensor), name
    for member in members.values():
        member.close()


@pytest.mark.parametrize("bucket", [8192, 1 << 20])
def test_receive_into_fills_the_targets_in_place(bucket: int) -> None:
    """Buckets land in the receiver's own tensors: same dtype ones directly, others (float64 here) through staging."""
    import threading

    state = random_state_dict(bucket)
    members = start_members(2, f"into-{bucket}")
    metas = state_dict_metas(state)
    names = list(state)
    # every third target in float64 (a bf16/int sender value is exact in float64), the rest as sent
    targets = [torch.full_like(state[n], 7, dtype=torch.float64) if i % 3 == 0 else torch.full_like(state[n], 7)
               for i, n in enumerate(names)]
    pointers = [t.data_ptr() for t in targets]
    errors: list[BaseException] = []

    def receive() -> None:
        try:
            members[1].receive_into(metas, bucket, targets)
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            errors.append(exc)

    receiver = threading.Thread(target=receive)
    receiver.start()
    members[0].broadcast_state_dict(state, bucket)
    receiver.join(30)
    assert not errors
    assert [t.data_ptr() for t in targets] == pointers
    for name, target in zip(names, targets, strict=True):
        assert torch.equal(target, state[name].to(target.dtype)), name
    with pytest.raises(WeightSyncError, match=r"weight 't0': the target holds 1 elements"):
        members[1].receive_into(metas, bucket, [torch.zeros(1), *targets[1:]])  # refused before any byte
    for member in members.values():
        member.close()


def test_ranks_are_checked_and_a_closed_group_refuses() -> None:
    group = info(2, "ranks")
    with pytest.raises(WeightSyncError, match=r"rank in 1\.\.1"):
        WeightSyncGroup.join(group, 0)
    with pytest.raises(WeightSyncError, match=r"rank in 1\.\.1"):
        WeightSyncGroup.join(group, 2)
    solo = WeightSyncGroupInfo("127.0.0.1", find_free_port(), 1, 1, "solo", "gloo", 10.0)
    alone = WeightSyncGroup.create(solo)
    assert alone.broadcast_state_dict({"x": torch.ones(2)}, BUCKET) == [TensorMeta("x", "float32", (2,))]
    with pytest.raises(WeightSyncError, match="rank 0 is the sender"):
        alone.receive_state_dict([], BUCKET)
    alone.close()
    alone.close()
    with pytest.raises(WeightSyncError, match="closed"):
        alone.broadcast_state_dict({"x": torch.ones(2)}, BUCKET)


def test_a_streamed_broadcast_takes_tensors_only_as_buckets_need_them() -> None:
    """``broadcast_stream`` sends what ``broadcast_state_dict`` sends, from a generator it pulls lazily (mixed
    dtypes: the buckets visit tensors out of order), holds no more tensors than the buckets being packed need,
    runs the generator to its end, and refuses a stream shorter than its metas."""
    import threading

    state = mixed_state_dict()
    names = list(state)
    members = start_members(2, "stream")
    metas = state_dict_metas(state)
    pulled: list[str] = []
    alive: list[int] = []
    live = 0

    def produce(extra: int = 0) -> Iterator[torch.Tensor]:
        """Yield the tensors, counting those still referenced (a finaliser runs when the sender lets go)."""
        nonlocal live
        for name in [*names, *["after"] * extra]:
            pulled.append(name)
            tensor = state[name].clone() if name in state else torch.zeros(1)
            live += 1
            alive.append(live)

            def gone() -> None:
                nonlocal live
                live -= 1

            weakref.finalize(tensor, gone)
            yield tensor

    received: dict[str, torch.Tensor] = {}
    receiver = threading.Thread(target=lambda: received.update(members[1].receive_state_dict(metas, BUCKET)))
    receiver.start()
    members[0].broadcast_stream(metas, produce(extra=2), BUCKET)
    receiver.join(30)
    assert pulled == [*names, "after", "after"]  # every item taken, the ones past the metas too
    assert max(alive) < len(names)  # never the whole state dict at once
    for name, tensor in state.items():
        assert torch.equal(received[name], tensor), name
    for member in members.values():
        member.close()
    alone = WeightSyncGroup.create(WeightSyncGroupInfo("127.0.0.1", find_free_port(), 1, 1, "short", "gloo", 10.0))
    with pytest.raises(WeightSyncError, match="the weight stream ended after 2 tensors; its metas list 8"):
        alone.broadcast_stream(metas, (state[n] for n in names[:2]), BUCKET)
    swapped = [state[names[1]], state[names[0]], *(state[n] for n in names[2:])]
    with pytest.raises(WeightSyncError, match=f"streamed tensor 0 \\({names[0]!r}\\) has 85 elements"):
        alone.broadcast_stream(metas, iter(swapped), BUCKET)  # tensors out of the metas' order
    alone.close()


def test_a_receiver_can_take_the_broadcast_one_tensor_at_a_time() -> None:
    """``receive_stream`` yields every tensor once it is whole (split ones assembled across buckets, empty ones
    too), as tensors of their own that stay valid after later buckets reuse the staging buffer."""
    import threading

    state = mixed_state_dict()
    members = start_members(2, "receive-stream")
    metas = state_dict_metas(state)
    got: list[tuple[str, torch.Tensor]] = []
    receiver = threading.Thread(target=lambda: got.extend(members[1].receive_stream(metas, BUCKET, "cpu")))
    receiver.start()
    members[0].broadcast_state_dict(state, BUCKET)
    receiver.join(30)
    assert sorted(name for name, _ in got) == sorted(state)  # each once
    for name, tensor in got:
        assert tensor.dtype == state[name].dtype and torch.equal(tensor, state[name]), name
    for member in members.values():
        member.close()
