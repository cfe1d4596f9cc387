"""Keep Ray's "current cluster" record away from the clusters the tests start, and check it at the end.

Ray's ``ray.cluster_utils.Cluster`` writes the head's address into
``<Ray temp dir>/ray_current_cluster`` (``/tmp/ray/ray_current_cluster`` by
default); while that cluster lives, a bare ``ray.init()`` (and so a
``trinity run`` without an address) joins it. :func:`private_ray_record`
moves Ray's temp dir (``RAY_TMPDIR``) to a private folder while a simulated
cluster runs, so the shared record is never touched.

Through its hooks (imported by ``tests/conftest.py``) this module
notes every address Ray writes into a record during the session and fails the
session when one is still in the shared record at its end (removing it, so
the next command does not join a dead or leftover cluster).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

#: ``(record file, address)`` of every record Ray wrote in this process during the session.
WRITTEN: list[tuple[Path, str]] = []
#: Name of Ray's record in its temp dir.
RECORD_NAME = "ray_current_cluster"


def shared_record() -> Path:
    """Return the record a bare ``ray.init()`` reads now (Ray's temp dir: ``$RAY_TMPDIR/ray`` or ``/tmp/ray``)."""
    from ray._common.utils import get_ray_address_file

    return Path(get_ray_address_file(None))


@contextmanager
def private_ray_record() -> Iterator[Path]:
    """Point Ray's temp dir at a fresh private folder for the block; yield the record path inside it.

    The folder is short (Unix socket paths under it must stay below ~107
    characters) and removed afterwards with everything Ray wrote into it.
    """
    folder = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_TMPDIR", str(folder))
        try:
            yield folder / "ray" / RECORD_NAME
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _watch_writes() -> None:
    """Wrap Ray's record writer (once Ray is imported) so every address it records is noted in WRITTEN."""
    utils = sys.modules.get("ray._private.utils")
    if utils is None or getattr(utils.write_ray_address, "_noted", False):
        return
    from ray._common.utils import get_ray_address_file

    original = utils.write_ray_address

    def write_ray_address(ray_address: str, temp_dir: str | None = None) -> None:
        WRITTEN.append((Path(get_ray_address_file(temp_dir)), ray_address))
        original(ray_address, temp_dir)

    write_ray_address._noted = True  # type: ignore[attr-defined]
    utils.write_ray_address = write_ray_address


def left_records() -> list[tuple[Path, str]]:
    """Return the ``(record, address)`` pairs written this session that a record file still holds."""
    left = []
    for path, address in WRITTEN:
        try:
            if path.read_text(encoding="utf-8").strip() == address:
                left.append((path, address))
        except OSError:
            continue
    return left


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Start watching once the test modules (and Ray, when they use it) are imported."""
    _watch_writes()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Watch from the first test whose fixtures may start a cluster, if Ray was imported late."""
    _watch_writes()


def pytest_sessionfinish(session: pytest.Session, exitstatus: Any) -> None:
    """Fail the session when a record still points at a cluster the tests started; remove that record."""
    left = left_records()
    if not left:
        return
    for path, _ in left:
        path.unlink(missing_ok=True)
    names = "; ".join(f"{path} -> {address}" for path, address in left)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    line = (f"Ray's current-cluster record was left pointing at a cluster the tests started ({names}); it is "
            "removed now: start simulated clusters inside tests.ray_hygiene.private_ray_record()")
    if reporter is not None:
        reporter.write_line(line, red=True)
    else:
        print(line, file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
