"""One side of the weight-sync round trip, in a process of its own; writes what it sent or received as JSON.

Started twice by ``test_weight_sync.py`` (ranks 0 and 1)::

    python sync_peer.py --rank 0 --port P --backend nccl --device-index 0 --mib 100 --result out.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from pathlib import Path
from typing import Any

#: Bucket size of the broadcast.
SYNC_BUCKET_BYTES = 32 << 20


def _sync_specs(mib: int) -> list[tuple[str, str, tuple[int, ...]]]:
    """Return (name, dtype, shape) of a model-like state dict of about ``mib`` MiB (float32 plus one bfloat16)."""
    specs: list[tuple[str, str, tuple[int, ...]]] = [("embed.bf16", "bfloat16", (512, 1024))]  # 1 MiB
    used = 1 << 20
    sizes = [(1024, 1024), (256, 1024), (4096, 256), (1000,)]  # 4 MiB, 1 MiB, 4 MiB, ~4 KiB in float32
    index = 0
    while used < mib << 20:
        shape = sizes[index % len(sizes)]
        numel = math.prod(shape)
        if used + numel * 4 > mib << 20:
            shape = (((mib << 20) - used) // 4,)
            numel = shape[0]
            if numel == 0:
                break
        specs.append((f"layer{index}.weight", "float32", shape))
        used += numel * 4
        index += 1
    return specs


def main(args: argparse.Namespace) -> int:
    """One side of the weight-sync round trip (a process of its own); writes its findings as JSON to ``--result``."""
    import torch

    import trinity.device
    from trinity.common.models.checksum import state_dict_checksum
    from trinity.weight_transport import TensorMeta, WeightSyncGroup, WeightSyncGroupInfo

    out: dict[str, Any] = {"rank": args.rank}
    try:
        if trinity.device.get_device_type() != "cpu":
            trinity.device.set_device(args.device_index)
        device = trinity.device.torch_device()
        info = WeightSyncGroupInfo("127.0.0.1", args.port, 2, 1, f"gpu-check-{args.backend}", args.backend, 120.0)
        started = time.monotonic()
        group = WeightSyncGroup.create(info) if args.rank == 0 else WeightSyncGroup.join(info, args.rank)
        out["join_s"] = time.monotonic() - started
        out["group_device"] = str(group.device)
        specs = _sync_specs(args.mib)
        metas = [TensorMeta(name, dtype, shape) for name, dtype, shape in specs]
        state: dict[str, torch.Tensor] = {}
        if args.rank == 0:
            generator = torch.Generator().manual_seed(0)
            state = {name: torch.randn(shape, generator=generator).to(getattr(torch, dtype)).to(device)
                     for name, dtype, shape in specs}
            trinity.device.synchronize()
        rounds = []
        for _ in range(2):  # the first round includes allocations and connection set-up
            group.broadcast_tensor(torch.zeros(1, device=group.device))  # both sides start together
            started = time.monotonic()
            if args.rank == 0:
                group.broadcast_state_dict(state, SYNC_BUCKET_BYTES)
            else:
                state = group.receive_state_dict(metas, SYNC_BUCKET_BYTES, device)
            trinity.device.synchronize()
            rounds.append(time.monotonic() - started)
        out["rounds_s"] = rounds
        out["bytes"] = sum(t.numel() * t.element_size() for t in state.values())
        out["tensors"] = len(state)
        out["devices"] = sorted({str(t.device) for t in state.values()})
        out["dtypes"] = sorted({str(t.dtype).removeprefix("torch.") for t in state.values()})
        out["checksum"] = state_dict_checksum(state)
        group.close()
        out["ok"] = True
    except Exception as exc:  # noqa: BLE001 - reported through the result file
        out["ok"] = False
        out["error"] = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        traceback.print_exc()
    Path(args.result).write_text(json.dumps(out), encoding="utf-8")
    return 0 if out["ok"] else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the peer's command line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("--device-index", type=int, default=0)
    parser.add_argument("--mib", type=int, default=100)
    parser.add_argument("--result", required=True)
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main(parse_args()))
