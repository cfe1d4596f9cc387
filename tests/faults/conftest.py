"""The fault suite's fixtures: its ledger (one per pytest session, reported at the end), the tiny model of each
module, private Ray temp folders, unwritable folders and small filesystems."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.faults.ledger import FaultLedger

_LEDGER = FaultLedger()


@pytest.fixture(scope="session")
def fault_ledger() -> FaultLedger:
    """The session's record of fault cases, kills and lost steps."""
    return _LEDGER


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model built for the module (a case may damage or move its copy; other modules keep theirs)."""
    from trinity.common.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny")


@pytest.fixture
def ray_tmp_factory() -> Iterator[Callable[[], Path]]:
    """Make private, short ``RAY_TMPDIR`` folders (Ray's socket paths must stay under 108 bytes); removed at the end."""
    made: list[Path] = []

    def make() -> Path:
        made.append(Path(tempfile.mkdtemp(prefix="trf-", dir="/tmp")))
        return made[-1]

    yield make
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def ray_tmp(ray_tmp_factory: Callable[[], Path]) -> Path:
    """A private, short ``RAY_TMPDIR`` for one case's runs."""
    return ray_tmp_factory()


@contextlib.contextmanager
def _read_only(path: Path) -> Iterator[int]:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:  # permissions bind this user: a folder without write permission
        path.chmod(0o555)
        try:
            yield errno.EACCES
        finally:
            path.chmod(0o755)
        return
    # root writes through permissions: bind the folder onto itself read-only (its files stay readable)
    for command in (["mount", "--bind", str(path), str(path)], ["mount", "-o", "remount,bind,ro", str(path)]):
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
            pytest.fail(
                f"as root a read-only folder needs a read-only mount, and `{' '.join(command)}` failed "
                f"({done.stderr.strip()}); run the fault suite as another user or where root may mount"
            )
    try:
        yield errno.EROFS
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture
def read_only() -> Iterator[Callable[[Path], int]]:
    """Make a folder truly unwritable (real EACCES by permissions, or real EROFS by a read-only mount as root).

    Calling the fixture's value with a folder returns the errno writes there will fail with.
    """
    with contextlib.ExitStack() as stack:
        yield lambda path: stack.enter_context(_read_only(path))


@pytest.fixture
def small_filesystem() -> Iterator[Callable[[Path, int], bool]]:
    """Mount a real tmpfs of a given size at a folder where this machine allows it (root); unmounted at the end.

    Calling the fixture's value with ``(folder, bytes)`` returns True when the
    filesystem was mounted, False when mounting is not allowed here.
    """
    mounted: list[Path] = []

    def mount(path: Path, size: int) -> bool:
        path.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            return False
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, check=False
        )
        if done.returncode == 0:
            mounted.append(path)
        return done.returncode == 0

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the ledger's totals (and write them to ``$TRINITY_FAULT_SUMMARY``) when any fault case ran."""
    if not _LEDGER.cases:
        return
    terminalreporter.write_line(_LEDGER.line())
    target = os.environ.get("TRINITY_FAULT_SUMMARY")
    if target:
        _LEDGER.write(Path(target))
