"""Acme's own behaviour beyond the kit: the probe's answers, masking, set_device, doctor, selection."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from trinity import device
from trinity.device.backend import Backend
from trinity.device.loader import discover, load_plugin
from trinity.device.selection import select


@pytest.fixture
def dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty device-node folder the probe looks in; tests add nodes to it."""
    folder = tmp_path / "dev"
    folder.mkdir()
    monkeypatch.setenv("ACME_DEVICE_DIR", str(folder))
    for var in ("ACME_VISIBLE_DEVICES", "TRINITY_DEVICE", "TRINITY_DEVICE_RESOLVED"):
        monkeypatch.delenv(var, raising=False)
    return folder


@pytest.fixture(autouse=True)
def _fresh_selection() -> Iterator[None]:
    device.reset()
    yield
    device.reset()


def add_nodes(folder: Path, *ids: int) -> None:
    for index in ids:
        (folder / f"acme{index}").touch()


def acme() -> Backend:
    """The installed backend, loaded anew so that its probe runs again."""
    (ep,) = [ep for ep in entry_points(group="trinity.backends") if ep.name == "acme"]
    return load_plugin(ep.load(), expected_name="acme")


def test_no_device_node_says_what_to_install(dev: Path) -> None:
    probe = acme().probe()
    assert not probe.available and probe.device_count == 0
    assert str(dev / "acme<N>") in probe.reason
    assert "install the Acme driver" in probe.reason


def test_mask_selects_devices(dev: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    add_nodes(dev, 0, 1, 2, 3)
    assert acme().probe().device_count == 4
    monkeypatch.setenv("ACME_VISIBLE_DEVICES", "3,1")
    assert acme().probe().device_count == 2


@pytest.mark.parametrize(
    ("mask", "expected"),
    [
        ("", "hides acme0, acme1"),
        ("7", "names acme7, but this machine has acme0, acme1"),
        ("0,x", "is not a comma-separated list"),
        ("1,1", "lists a device twice"),
    ],
)
def test_bad_mask_is_explained(dev: Path, monkeypatch: pytest.MonkeyPatch, mask: str, expected: str) -> None:
    add_nodes(dev, 0, 1)
    monkeypatch.setenv("ACME_VISIBLE_DEVICES", mask)
    probe = acme().probe()
    assert not probe.available
    assert expected in probe.reason and "ACME_VISIBLE_DEVICES" in probe.reason


def test_set_device_tracks_the_current_device(dev: Path) -> None:
    add_nodes(dev, 0, 1)
    backend = acme()
    backend.set_device(1)
    assert backend.current_device_index() == 1
    with pytest.raises(device.InvalidDeviceRequestError, match="index 2 is out of range"):
        backend.set_device(2)


def test_doctor_fails_with_a_fix_without_devices(dev: Path) -> None:
    checks = {check.name: check for check in acme().doctor()}
    assert checks["Acme device nodes"].status == "fail"
    assert "install the Acme driver" in checks["Acme device nodes"].fix
    assert "torch" in checks  # the core's own check runs beside ours


def test_workers_inherit_acme_settings_but_not_the_mask(dev: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACME_VISIBLE_DEVICES", "0")
    env = acme().worker_env(False)
    assert env["ACME_DEVICE_DIR"] == str(dev)
    assert "ACME_VISIBLE_DEVICES" not in env


def test_auto_prefers_acme_over_the_cpu(dev: Path) -> None:
    add_nodes(dev, 0)
    records = {name: record for name, record in discover().items() if name in ("cpu", "acme")}
    chosen = select(records, environ={})
    assert (chosen.name, chosen.source) == ("acme", "auto")


def test_explicit_choice_without_device_fails_with_the_probe_reason(dev: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRINITY_DEVICE", "acme")
    with pytest.raises(device.BackendUnavailableError, match="no Acme device found"):
        device.select_backend()


def test_spec_3_answers_dtypes_attention_and_offload(dev: Path) -> None:
    backend = acme()
    assert backend.info.spec_version == 3
    offload = backend.offload_support()
    assert not offload.supported and "Acme SDK 2" in offload.reason
    assert backend.implements("trinity_offload_support")
    support = backend.supported_dtypes()
    assert support.preferred == "float32" and "bfloat16" in support.supported
    assert "use bfloat16" in support.reason("float16")
    assert backend.attention_implementation("bfloat16").implementation == "sdpa"
    assert backend.implements("trinity_supported_dtypes") and backend.implements("trinity_attention_implementation")
