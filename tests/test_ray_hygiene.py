"""The session-end check of Ray's current-cluster record, and the private record simulated clusters use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.fakedist import environ_with
from tests.ray_hygiene import private_ray_record, shared_record
from trinity.common.ray_connect import current_cluster_file

ROOT = Path(__file__).resolve().parents[1]

LEAKY_TEST = '''
import ray._private.utils

def test_leaves_a_record():
    ray._private.utils.write_ray_address("192.0.2.1:6379")  # as ray.cluster_utils.Cluster does

def test_cleans_up():
    pass
'''

TIDY_TEST = '''
import ray._private.utils
from ray._common.utils import reset_ray_address

def test_writes_then_removes_its_record():
    ray._private.utils.write_ray_address("192.0.2.1:6379")
    reset_ray_address()
'''


def _session(tmp_path: Path, body: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run a pytest session of ``body`` under this repository's conftest, with its own Ray temp dir."""
    test_dir = tmp_path / "tests" / "inner"
    test_dir.mkdir(parents=True)
    (test_dir / "test_inner.py").write_text(body, encoding="utf-8")
    ray_tmp = tmp_path / "raytmp"
    (ray_tmp / "ray").mkdir(parents=True)
    conftest = (ROOT / "tests" / "conftest.py").read_text(encoding="utf-8")
    (tmp_path / "tests" / "conftest.py").write_text(conftest, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
         "-o", "addopts=", "-o", "testpaths=tests", str(test_dir)],
        env=environ_with(ROOT, {"RAY_TMPDIR": str(ray_tmp)}), cwd=tmp_path,
        capture_output=True, text=True, timeout=120, check=False,
    )
    return done, ray_tmp / "ray" / "ray_current_cluster"


def test_a_record_left_at_a_test_cluster_fails_the_session_and_is_removed(tmp_path: Path) -> None:
    done, record = _session(tmp_path, LEAKY_TEST)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 passed" in done.stdout
    assert "current-cluster record was left pointing at a cluster the tests started" in done.stdout
    assert "192.0.2.1:6379" in done.stdout
    assert not record.exists()


def test_a_record_removed_by_its_test_passes(tmp_path: Path) -> None:
    done, record = _session(tmp_path, TIDY_TEST)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not record.exists()


def test_the_private_record_is_where_ray_and_trinity_look_inside_it() -> None:
    outside = shared_record()
    with private_ray_record() as record:
        assert shared_record() == record == current_cluster_file()
        assert record != outside
    assert shared_record() == outside and not record.parent.parent.exists()
