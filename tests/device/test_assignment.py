"""The per-node device claims, in this process: lowest free index first, held until released, clear errors.

Real: the file locks (two open files of one lock conflict even in one
process, as two processes' do). The node's device count, which Ray answers
inside an actor, is given by the test.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from trinity.device import assignment
from trinity.device.assignment import DeviceAssignmentError


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A node offering four ``ZETA`` devices whose claims live under ``tmp_path``."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(assignment, "_node_device_count", lambda node_id, key: 4)
    yield tmp_path
    assignment.release_devices()


def test_claims_take_the_lowest_free_indices_and_hold_them(node: Path) -> None:
    assert assignment._claim("n1", "ZETA", 1) == (0,)
    assert assignment._claim("n1", "ZETA", 2) == (1, 2)
    assert assignment._claim("n2", "ZETA", 1) == (0,)  # another node's devices are its own
    with pytest.raises(DeviceAssignmentError, match=r"no 2 free ZETA device\(s\) on Ray node n1: 3 of 4 are held"):
        assignment._claim("n1", "ZETA", 2)
    assert assignment._claim("n1", "ZETA", 1) == (3,)  # the failed claim let go of what it had taken
    assert (node / "trinity-devices" / "n1" / "ZETA" / "3.lock").read_text().strip().isdigit()  # the holder's pid
    assignment.release_devices()
    assert assignment._claim("n1", "ZETA", 4) == (0, 1, 2, 3)


def test_more_devices_than_the_node_offers_is_one_clear_error(node: Path) -> None:
    with pytest.raises(DeviceAssignmentError, match=r"needs 5 ZETA device\(s\) but its Ray node n1 offers 4"):
        assignment._claim("n1", "ZETA", 5)


def test_an_unusable_claims_folder_is_one_clear_error(node: Path) -> None:
    (node / "trinity-devices").write_text("not a folder")
    with pytest.raises(DeviceAssignmentError, match=r"cannot claim a ZETA device: .*must be able to write to"):
        assignment._claim("n1", "ZETA", 1)
