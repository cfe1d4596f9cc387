"""``trinity backends list/show --address``: the cluster's offer beside the local probe, and ``trinity run``'s pick.

A real multi-node Ray cluster runs on this machine (``ray.cluster_utils.Cluster``):
a CPU-only head, like a driver on a login node, two nodes advertising
``{"NPU": 8}`` and one advertising a vendor's own key ``{"ZETA": 4}``. No node
has an Ascend device, so the installed trinity-backend-npu probes unavailable
locally and only the cluster can make it the choice. The cluster is started
without writing Ray's current-cluster record, so no other process on the
machine joins it by accident.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray._private.utils
from ray.cluster_utils import Cluster

from tests.cli._runner import Runner
from tests.fakedist import add_backend, environ_with
from trinity.common.ray_connect import current_cluster_file


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """CPU-only head (1 CPU), two ``{"NPU": 8}`` nodes, one ``{"ZETA": 4}`` node; torn down after the module."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_AUTH_MODE", "disabled")
        patch.setattr(ray._private.utils, "write_ray_address", lambda *args, **kwargs: None)
        started = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        try:
            for resources in ({"NPU": 8}, {"NPU": 8}, {"ZETA": 4}):
                started.add_node(num_cpus=1, resources=resources)
            started.wait_for_nodes()
            yield started
        finally:
            started.shutdown()


@pytest.fixture
def zeta_site(site: Path) -> Path:
    """``site`` plus ``zeta``, a vendor backend scheduled by the custom key ``ZETA``, absent on this node."""
    add_backend(site, "zeta", priority=50, available=False, device_count=0, ray_resource_key="ZETA",
                reason="no /dev/zeta<N> device files; install the Zeta driver")
    return site


def _record() -> str | None:
    try:
        return current_cluster_file().read_text(encoding="utf-8").strip()
    except OSError:
        return None


def test_list_shows_the_offer_and_the_cluster_choice(trinity: Runner, zeta_site: Path, cluster: Cluster) -> None:
    result = trinity("backends", "list", "--address", cluster.address, "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    document = result.json()
    view = document["cluster"]
    assert view["origin"] == "--address" and view["address"] == cluster.address and view["nodes"] == 4
    assert view["offer"]["NPU"] == [{"count": 8.0, "nodes": 2}]
    assert view["offer"]["ZETA"] == [{"count": 4.0, "nodes": 1}]
    assert view["offer"]["CPU"] == [{"count": 1.0, "nodes": 4}]
    assert document["selected"]["name"] == "npu" and document["selected"]["source"] == "cluster"
    assert "NPU: 16" in document["selected"]["reason"]
    rows = result.rows()
    assert rows["npu"]["available"] is False, "the local probe is shown as it is, beside the offer"
    assert rows["npu"]["cluster_offer"] == [{"count": 8.0, "nodes": 2}] and rows["npu"]["selected"]
    assert rows["zeta"]["cluster_offer"] == [{"count": 4.0, "nodes": 1}]
    assert rows["cuda"]["cluster_offer"] == [] and rows["cpu"]["cluster_offer"] is None


def test_ray_address_is_honoured_and_the_table_says_it(trinity: Runner, zeta_site: Path, cluster: Cluster) -> None:
    result = trinity("backends", "list", RAY_ADDRESS=cluster.address, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"Ray cluster at {cluster.address} (from RAY_ADDRESS): 4 nodes" in result.stdout
    assert "NPU: 8 on 2 nodes" in result.stdout and "ZETA: 4 on 1 node" in result.stdout
    assert "cluster offers" in result.stdout
    assert "selected: npu (cluster)" in result.stdout


def test_forced_custom_key_backend_is_accepted_when_the_cluster_offers_it(
    trinity: Runner, zeta_site: Path, cluster: Cluster
) -> None:
    plain = trinity("backends", "list", "--json", TRINITY_DEVICE="zeta")
    assert plain.returncode == 1, "without the cluster, a forced backend absent here is an error"
    result = trinity("backends", "list", "--json", "--address", cluster.address, TRINITY_DEVICE="zeta", timeout=120)
    assert result.returncode == 0, result.stderr
    selected = result.json()["selected"]
    assert selected["name"] == "zeta" and "the Ray cluster offers ZETA: 4" in selected["reason"]


def test_show_gives_the_backend_offer_and_the_pick(trinity: Runner, zeta_site: Path, cluster: Cluster) -> None:
    result = trinity("backends", "show", "npu", "--address", cluster.address, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "cluster offers:" in result.stdout and "NPU: 8 on 2 nodes" in result.stdout
    assert "selected: npu (cluster)" in result.stdout
    shown = trinity("backends", "show", "zeta", "--json", "--address", cluster.address, timeout=120).json()
    assert shown["cluster_offer"] == [{"count": 4.0, "nodes": 1}] and shown["selection"]["name"] == "npu"
    assert shown["cluster"]["offer"]["NPU"] == [{"count": 8.0, "nodes": 2}]


def test_reading_the_cluster_leaves_no_current_cluster_record(
    trinity: Runner, site: Path, cluster: Cluster
) -> None:
    before = _record()
    result = trinity("backends", "list", "--json", "--address", cluster.address, timeout=120)
    assert result.returncode == 0, result.stderr
    assert _record() == before and _record() != cluster.address


def test_unreachable_address_is_one_line_exit_2_and_fast(trinity: Runner) -> None:
    started = time.monotonic()
    result = trinity("backends", "list", "--address", "127.0.0.1:1")
    elapsed = time.monotonic() - started
    assert result.returncode == 2
    line = result.error_line()
    assert "no Ray cluster answers at '127.0.0.1:1' (from --address)" in line
    assert result.stdout == ""
    assert elapsed < 10, f"took {elapsed:.1f} s"
    from_env = trinity("backends", "show", "cpu", RAY_ADDRESS="127.0.0.1:1")
    assert from_env.returncode == 2 and "(from RAY_ADDRESS)" in from_env.error_line()


def test_local_starts_nothing_and_says_the_local_probe_decides(trinity: Runner) -> None:
    result = trinity("backends", "list", "--json", RAY_ADDRESS="local")
    assert result.returncode == 0, result.stderr
    view = result.json()["cluster"]
    assert view["address"] is None and view["nodes"] == 0
    assert "starts a fresh Ray instance" in view["note"] and "local probe decides" in view["note"]
    assert result.json()["selected"]["source"] == "auto"


_NO_RAY = """
import json, sys
from trinity.cli.main import main
code = main(["backends", "list", "--json"])
print(json.dumps([code, "ray" in sys.modules]))
"""


def test_without_an_address_ray_is_not_imported(site: Path) -> None:
    env = environ_with(site)
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-c", _NO_RAY], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout[: done.stdout.rindex("\n", 0, len(done.stdout) - 1) + 1])
    code, imported_ray = json.loads(done.stdout.strip().splitlines()[-1])
    assert code == 0 and imported_ray is False
    assert document["cluster"] is None and all(row["cluster_offer"] is None for row in document["backends"])
