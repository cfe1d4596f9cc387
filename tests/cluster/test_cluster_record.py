"""A simulated cluster never becomes the machine's "current cluster": a bare ``ray.init()`` elsewhere cannot join it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ray.cluster_utils import Cluster

from tests.ray_hygiene import shared_record
from trinity.common.ray_connect import current_cluster_file, running_local_cluster


def _machine_record() -> Path:
    """Ray's record as a process without the fixture's environment finds it."""
    base = os.environ.get("TMPDIR") if sys.platform.startswith("linux") else None
    return Path(base or "/tmp") / "ray" / "ray_current_cluster"


def test_the_cluster_is_recorded_only_in_its_private_temp_dir(npu_cluster: Cluster) -> None:
    address = npu_cluster.address
    private = shared_record()
    assert private != _machine_record() and private == current_cluster_file()
    assert private.read_text(encoding="utf-8").strip() == address  # Ray wrote it, inside the private dir
    machine = _machine_record()
    assert not machine.is_file() or machine.read_text(encoding="utf-8").strip() != address
    assert running_local_cluster() == address  # trinity inside the fixture's environment finds it where Ray wrote it
