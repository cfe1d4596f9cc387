"""Run the real ``trinity`` console script in a subprocess and read what it printed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fakedist import environ_with

_SCRIPT = Path(sys.executable).with_name("trinity")
#: The console script when installed next to this interpreter, else the module it runs.
TRINITY = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "trinity.cli.main"]

#: Every field of a backend in ``trinity backends list --json``.
ROW_FIELDS = frozenset({
    "name", "distribution", "version", "target", "status", "error", "priority", "device_type", "description",
    "spec_version", "available", "device_count", "reason", "probe_cut_off", "ray_resource_key", "collective_backend",
    "visible_devices_env", "compile_supported", "compile_reason", "selected", "cluster_offer",
})


@dataclass(frozen=True)
class Result:
    """What one ``trinity`` run printed and returned."""

    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        """Return stdout parsed as JSON."""
        return json.loads(self.stdout)

    def rows(self) -> dict[str, dict[str, Any]]:
        """Return the ``backends`` of a ``list --json`` output by name."""
        return {row["name"]: row for row in self.json()["backends"]}

    def error_line(self) -> str:
        """Return the single ``trinity: error:`` line on stderr, asserting it is alone and no traceback shows."""
        assert "Traceback" not in self.stderr + self.stdout, self.stderr
        errors = [line for line in self.stderr.splitlines() if line.startswith("trinity: error: ")]
        assert len(errors) == 1, f"expected one error line, got stderr:\n{self.stderr}"
        assert all(line.startswith("trinity: ") for line in self.stderr.splitlines()), self.stderr
        return errors[0]


#: ``run(*args, timeout=30, **env)``: run the console script with extra environment variables.
Runner = Callable[..., Result]


def run_trinity(site: Path, *args: str, timeout: float = 30, **env: str) -> Result:
    """Run ``trinity *args`` with ``site`` first on ``PYTHONPATH`` and ``env`` set; return what it printed."""
    done = subprocess.run(
        [*TRINITY, *args], env=environ_with(site, env), capture_output=True, text=True, timeout=timeout, check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def assert_usable(rows: dict[str, dict[str, Any]], *names: str) -> None:
    """Assert that the backends ``names`` loaded and probe as available."""
    for name in names:
        row = rows[name]
        assert (row["status"], row["available"]) == ("ok", True), row
