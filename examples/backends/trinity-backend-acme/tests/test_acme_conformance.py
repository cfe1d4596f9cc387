"""trinity-rft's conformance kit, run against the installed Acme backend.

CI machines have no Acme card, so the ``device_runtime`` fixture stands in for
the driver: it creates device nodes in a temporary folder and points the
probe at it. On a machine with real devices, drop the override.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from trinity.device.testing import BackendConformance


def make_device_nodes(folder: Path, count: int) -> Path:
    """Create ``acme0`` .. ``acme<count-1>`` in ``folder`` (plain files do for the probe)."""
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        (folder / f"acme{index}").touch()
    return folder


class TestAcmeConformance(BackendConformance):
    backend_name = "acme"

    # autouse, so that the kit's fresh-interpreter check of the probe (which
    # inherits this environment) also probes with devices present.
    @pytest.fixture(autouse=True)
    def device_runtime(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        monkeypatch.setenv("ACME_DEVICE_DIR", str(make_device_nodes(tmp_path / "dev", 2)))
        monkeypatch.delenv("ACME_VISIBLE_DEVICES", raising=False)
        yield
