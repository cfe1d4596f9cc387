"""Measure the bucketed weight broadcast against a raw broadcast of the same bytes between two Ray actors.

    python -m trinity.synchronizer.benchmark --mb 100 --bucket-mb 64 --rounds 5

Both actors join one :class:`~trinity.weight_transport.group.WeightSyncGroup`
on the selected backend's collective. Each round is timed on the receiver,
from a one-element synchronising broadcast to the last tensor in place, so the
time includes the sender's bucket packing and the receiver's unpacking. The
state dict mimics a model: tensors of several sizes, float32.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import torch

from trinity.weight_transport import (
    TensorMeta,
    WeightSyncGroup,
    WeightSyncGroupInfo,
    find_free_port,
    node_ip_address,
    state_dict_bytes,
    state_dict_metas,
)


def model_like_state_dict(total_bytes: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Return float32 tensors of mixed sizes (4 MiB, 1 MiB, 64 KiB blocks) adding up to about ``total_bytes``."""
    generator = torch.Generator().manual_seed(seed)
    sizes = [4 << 20, 1 << 20, 1 << 20, 64 << 10]
    state: dict[str, torch.Tensor] = {}
    used = 0
    index = 0
    while used < total_bytes:
        size = min(sizes[index % len(sizes)], total_bytes - used)
        numel = max(1, size // 4)
        state[f"layer{index}.weight"] = torch.randn(numel, generator=generator)
        used += numel * 4
        index += 1
    return state


class _Peer:
    def __init__(self) -> None:
        self.group: WeightSyncGroup | None = None
        self.state: dict[str, torch.Tensor] = {}

    def address(self) -> tuple[str, int]:
        return node_ip_address(), find_free_port()

    def join(self, info: WeightSyncGroupInfo, rank: int, total_bytes: int) -> int:
        self.group = WeightSyncGroup.create(info) if rank == 0 else WeightSyncGroup.join(info, rank)
        self.state = model_like_state_dict(total_bytes) if rank == 0 else {}
        return state_dict_bytes(self.state)

    def _sync_point(self) -> None:
        assert self.group is not None
        self.group.broadcast_tensor(torch.zeros(1))

    def raw(self, numel: int) -> float:
        """One flat float32 tensor of ``numel`` elements through ``pg.broadcast``; returns seconds."""
        assert self.group is not None
        flat = torch.empty(numel) if self.group.rank else torch.cat([t.reshape(-1) for t in self.state.values()])
        self._sync_point()
        started = time.perf_counter()
        self.group.broadcast_tensor(flat)
        return time.perf_counter() - started

    def bucketed(self, metas: list[TensorMeta], bucket_bytes: int) -> float:
        assert self.group is not None
        self._sync_point()
        started = time.perf_counter()
        if self.group.rank == 0:
            self.group.broadcast_state_dict(self.state, bucket_bytes)
        else:
            self.group.receive_state_dict(metas, bucket_bytes, "cpu")
        return time.perf_counter() - started

    def close(self) -> None:
        if self.group is not None:
            self.group.close()


def peer_pair(total_mb: int, backend: str, group_name: str) -> tuple[Any, Any, int, list[TensorMeta]]:
    """Start a sender and a receiver actor joined in one weight-sync group (Ray must be initialised).

    Returns ``(sender, receiver, total_bytes, metas)``: the sender holds a
    model-like state dict of ``total_mb`` MiB described by ``metas``.
    """
    import ray

    remote = ray.remote(_Peer)
    sender: Any = remote.options(num_cpus=0).remote()
    receiver: Any = remote.options(num_cpus=0).remote()
    host, port = ray.get(sender.address.remote())
    info = WeightSyncGroupInfo(host, port, 2, 1, group_name, backend, 120.0)
    total = ray.get([sender.join.remote(info, 0, total_mb << 20), receiver.join.remote(info, 1, 0)])[0]
    metas = state_dict_metas(model_like_state_dict(total_mb << 20))
    return sender, receiver, int(total), metas


def run(total_mb: int, bucket_mb: list[int], rounds: int, backend: str) -> dict[str, Any]:
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        sender, receiver, total, metas = peer_pair(total_mb, backend, "benchmark")
        numel = total // 4

        def measure(method: str, *args: Any) -> list[float]:
            times = []
            for _ in range(rounds + 1):  # the first round warms up
                sent, got = ray.get([getattr(sender, method).remote(*args), getattr(receiver, method).remote(*args)])
                times.append(max(sent, got))
            return times[1:]

        results: dict[str, Any] = {"backend": backend, "bytes": total, "tensors": len(metas), "rounds": rounds}
        raw = measure("raw", numel)
        results["raw_broadcast_s"] = statistics.median(raw)
        for mb in bucket_mb:
            bucketed = measure("bucketed", metas, mb << 20)
            results[f"bucketed_{mb}MiB_s"] = statistics.median(bucketed)
        for name in [k for k in results if k.endswith("_s")]:
            results[name.removesuffix("_s") + "_GBps"] = total / results[name] / 1e9
        ray.get([sender.close.remote(), receiver.close.remote()])
        return results
    finally:
        if started_here:
            ray.shutdown()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mb", type=int, default=100, help="MiB of weights")
    parser.add_argument("--bucket-mb", type=int, nargs="+", default=[64, 16, 4], help="bucket sizes to try (MiB)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", default=None, help="collective (default: the selected device backend's)")
    args = parser.parse_args(argv)
    if args.backend is None:
        import trinity.device

        args.backend = trinity.device.get_collective_backend()
    print(json.dumps(run(args.mb, args.bucket_mb, args.rounds, args.backend), indent=2))


if __name__ == "__main__":
    main()
