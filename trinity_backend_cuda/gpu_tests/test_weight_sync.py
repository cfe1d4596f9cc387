"""A WeightSyncGroup round trip of 100 MiB between two processes: checksums equal, MB/s (NCCL needs two GPUs)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
from gpu_support import EXPECTED_DEVICE

PEER = Path(__file__).with_name("sync_peer.py")
#: Size of the round trip.
SYNC_MIB = 100


def _free_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_weight_sync(backend: str, workdir: Path, detail: Callable[[str], None]) -> None:
    """Rank 0 broadcasts a model-like state dict; rank 1 receives it on its device.

    Each side's group is built by the selected backend's
    ``trinity_stateless_process_group`` (the CUDA backend's for nccl).
    """
    if backend == "nccl":
        if EXPECTED_DEVICE == "cpu":
            pytest.skip("not a CUDA run (CPU smoke run)")
        import torch

        if torch.cuda.device_count() < 2:
            pytest.skip("one GPU: NCCL needs one device per rank")
    devices = (0, 0) if backend == "gloo" else (0, 1)
    port = _free_port()
    results = [workdir / f"sync-{backend}-{rank}.json" for rank in (0, 1)]
    processes = []
    for rank in (0, 1):
        results[rank].unlink(missing_ok=True)
        command = [sys.executable, str(PEER), "--rank", str(rank), "--port", str(port), "--backend", backend,
                   "--device-index", str(devices[rank]), "--mib", str(SYNC_MIB),
                   "--result", str(results[rank])]
        processes.append(subprocess.Popen(command))
    deadline = time.monotonic() + 150
    for process in processes:
        try:
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    found = [json.loads(p.read_text()) if p.is_file() else None for p in results]
    missing = [rank for rank in (0, 1) if found[rank] is None]
    codes = ", ".join(f"rank {r} exit {processes[r].returncode}" for r in (0, 1))
    assert not missing, f"peer(s) {missing} wrote no result (killed, crashed or hung: {codes})"
    sent, received = found
    assert sent is not None and received is not None
    errors = [f"rank {r['rank']}: {r['error']}" for r in (sent, received) if not r.get("ok")]
    assert not errors, "; ".join(errors)
    warm = max(received["rounds_s"][1], 1e-9)
    text = (f"{received['bytes'] / 2**20:.0f} MiB, {received['tensors']} tensors ({'+'.join(received['dtypes'])}), "
            f"{','.join(sent['devices'])} -> {backend} (buffers on {sent['group_device']}) -> "
            f"{','.join(received['devices'])}, checksums "
            f"{'equal' if sent['checksum'] == received['checksum'] else 'DIFFER'}: "
            f"{received['bytes'] / 1e6 / warm:.0f} MB/s ({warm:.3f} s warm; first round "
            f"{received['rounds_s'][0]:.3f} s, join {received['join_s']:.2f} s)")
    detail(text)
    assert sent["checksum"] == received["checksum"], text
    assert sent["bytes"] == received["bytes"], f"{received['bytes']} bytes received of {sent['bytes']}"
    for side, peer in (("sent", sent), ("received", received)):
        assert all(d.startswith(EXPECTED_DEVICE) for d in peer["devices"]), (
            f"{side} tensors on {peer['devices']}, expected {EXPECTED_DEVICE}")
