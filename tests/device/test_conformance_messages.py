"""The conformance kit's failures name the hook to implement and link the vendor guide's section."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import ClassVar

import pytest

from tests.device import plugins
from trinity.device.loader import load_plugin
from trinity.device.testing import BackendConformance, conformance

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "backends.md"


def _anchors() -> set[str]:
    """GitHub's anchors for the guide's headings: lower case, punctuation dropped, spaces as '-'."""
    headings = re.findall(r"^#{1,6} (.+)$", GUIDE.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


class CpuBackedTwoDevices(plugins.FakeAccel):
    """Two devices computed through torch's 'cpu' device type, without trinity_set_device/current_device_index."""

    trinity_set_device = None  # type: ignore[assignment]
    trinity_current_device_index = None  # type: ignore[assignment]


class OwnDeviceTypeWithoutModule:
    """A device type torch does not know ('zeta'), and no trinity_device_module to import its extension."""

    @plugins.hookimpl
    def trinity_backend_info(self) -> plugins.BackendInfo:
        import dataclasses

        return dataclasses.replace(plugins.info("zeta"), device_type="zeta")

    @plugins.hookimpl
    def trinity_probe(self) -> plugins.ProbeResult:
        return plugins.ProbeResult(available=True, device_count=2)


class _Kit(BackendConformance):
    backend_name: ClassVar[str] = "accel"


def test_set_device_failure_names_the_hooks_for_a_cpu_backed_device() -> None:
    backend = load_plugin(CpuBackedTwoDevices(), expected_name="accel")
    assert not backend.implements("trinity_set_device")
    with pytest.raises(AssertionError) as caught:
        _Kit().test_set_device_makes_it_current(backend)
    message = str(caught.value)
    assert "after set_device(1), current_device_index() is 0" in message
    assert "implement trinity_set_device and trinity_current_device_index" in message
    assert "docs/backends.md#the-hooks-your-device-needs" in message


def test_unknown_device_type_failure_names_trinity_device_module() -> None:
    backend = load_plugin(OwnDeviceTypeWithoutModule(), expected_name="zeta")
    with pytest.raises(pytest.fail.Exception) as caught:
        _Kit().test_device_module(backend)
    message = str(caught.value)
    assert "implement or fix trinity_device_module" in message
    assert "docs/backends.md#your-own-torch-device-type" in message


def test_every_guide_link_of_the_kit_names_an_existing_section() -> None:
    sections = {value for name, value in vars(conformance).items() if name.startswith("_") and isinstance(value, str)
                and re.fullmatch(r"[a-z0-9_-]+", value)}
    assert "the-hooks-your-device-needs" in sections
    missing = sections - _anchors()
    assert not missing, f"the kit links sections docs/backends.md does not have: {sorted(missing)}"


def test_every_assertion_of_the_kit_has_a_message_linking_the_guide() -> None:
    tree = ast.parse(inspect.getsource(conformance))
    bare = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            message = ast.unparse(node.msg) if node.msg is not None else ""
            if "fix(" not in message and not isinstance(node.msg, ast.Name) and not message.startswith("bad("):
                bare.append(f"line {node.lineno}: assert {ast.unparse(node.test)}")
    assert not bare, "kit assertions without a message naming the hook and the guide section:\n" + "\n".join(bare)
