"""The vendor example backend (examples/backends/trinity-backend-acme).

Two promises: the guide (docs/backends.md) shows the example's files verbatim,
so the documentation cannot drift from code that is tested; and the example's
wheel, installed next to trinity-rft's wheel in a clean environment without
torch, is discovered, listed and selected by the ``trinity`` command.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
import venv
import zipfile
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

Completed = subprocess.CompletedProcess[str]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "backends" / "trinity-backend-acme"
GUIDE = ROOT / "docs" / "backends.md"

#: Marks the code block after it as the full text of an example file (a repository path).
_MARKER = re.compile(r"<!-- example-file: (\S+) -->")
#: Files of the example the guide does not have to show.
_NOT_SHOWN = {"README.md"}
#: Folders under the example that hold build or tool output, not source.
_OUTPUT_DIRS = {"__pycache__", "build", "dist", ".pytest_cache", ".ruff_cache", ".mypy_cache"}


def guide_blocks() -> dict[str, str]:
    """Return the example files the guide shows, by repository path, with the text of their code blocks."""
    lines = GUIDE.read_text(encoding="utf-8").splitlines(keepends=True)
    shown: dict[str, str] = {}
    for index, line in enumerate(lines):
        match = _MARKER.fullmatch(line.strip())
        if match is None:
            continue
        path = match[1]
        assert index + 1 < len(lines) and lines[index + 1].startswith("```"), (
            f"docs/backends.md line {index + 1}: the marker for {path} must be followed by a code fence"
        )
        end = next((j for j in range(index + 2, len(lines)) if lines[j].rstrip("\n") == "```"), None)
        assert end is not None, f"docs/backends.md: the code block of {path} is not closed"
        assert path not in shown, f"docs/backends.md shows {path} twice"
        shown[path] = "".join(lines[index + 2 : end])
    return shown


def example_files() -> set[str]:
    """Return the repository paths of the example's source files (build output left out)."""
    found = set()
    for path in EXAMPLE.rglob("*"):
        parts = path.relative_to(EXAMPLE).parts
        if not path.is_file() or _OUTPUT_DIRS.intersection(parts) or any(p.endswith(".egg-info") for p in parts):
            continue
        if path.suffix == ".pyc" or path.name in _NOT_SHOWN:
            continue
        found.add(path.relative_to(ROOT).as_posix())
    return found


def test_guide_shows_every_file_of_the_example() -> None:
    shown = set(guide_blocks())
    files = example_files()
    assert shown - files == set(), "docs/backends.md shows files the example does not have"
    assert files - shown == set(), "the example has files docs/backends.md does not show; add them to the guide"


def test_guide_code_equals_the_example_files() -> None:
    for path, block in guide_blocks().items():
        actual = (ROOT / path).read_text(encoding="utf-8")
        if block != actual:
            diff = "".join(
                difflib.unified_diff(
                    block.splitlines(keepends=True), actual.splitlines(keepends=True), "docs/backends.md", path
                )
            )
            pytest.fail(f"docs/backends.md and {path} differ; copy the file into the guide:\n{diff}")


# --- the wheel in a clean environment ----------------------------------------------------


def _run(command: list[str], env: dict[str, str] | None = None, timeout: float = 180) -> Completed:
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, check=False)


def _ok(done: Completed) -> Completed:
    command = " ".join(map(str, done.args))
    assert done.returncode == 0, f"{command} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def _runtime_requirements(wheel: Path) -> list[str]:
    """Return the wheel's unconditional requirements (extras left out), from its METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(name).decode("utf-8")
    return [
        line.split(":", 1)[1].strip()
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _example_version() -> str:
    text = (EXAMPLE / "src" / "trinity_backend_acme" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE)
    assert match is not None
    return match[1]


class CleanVenv:
    """A fresh venv holding trinity-rft's wheel, its light dependencies (no torch) and the acme wheel."""

    def __init__(self, root: Path) -> None:
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
        wheels = root / "wheels"
        # The hatchling of this environment builds both wheels without a temporary build environment.
        isolation = ["--no-build-isolation"] if find_spec("hatchling") is not None else []
        _ok(_run([*pip, "wheel", "-q", "--no-deps", *isolation, "-w", str(wheels), str(ROOT), str(EXAMPLE)]))
        (core,) = wheels.glob("trinity_rft-*.whl")
        (acme,) = wheels.glob("trinity_backend_acme-*.whl")
        self.acme_wheel = acme
        self.pip = pip
        light = [r for r in _runtime_requirements(core) if _requirement_name(r) != "torch"]
        env_dir = root / "venv"
        venv.EnvBuilder(with_pip=False).create(env_dir)
        self.python = env_dir / "bin" / "python"
        _ok(_run([*pip, "--python", str(self.python), "install", "-q", *light]))
        _ok(_run([*pip, "--python", str(self.python), "install", "-q", "--no-deps", str(core), str(acme)]))
        self.trinity = str(env_dir / "bin" / "trinity")
        ours = ("TRINITY_", "ACME_", "PYTHON", "VIRTUAL_ENV")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
        self.no_devices = root / "no-devices"
        self.no_devices.mkdir()
        self.devices = root / "devices"
        self.devices.mkdir()
        for index in (0, 1):
            (self.devices / f"acme{index}").touch()

    def backends_list(self, **env: str) -> tuple[Completed, dict[str, Any]]:
        """Run ``trinity backends list --json`` with ``env`` added; return the process and the parsed JSON."""
        done = _run([self.trinity, "backends", "list", "--json"], env={**self.env, **env}, timeout=60)
        assert "Traceback" not in done.stdout + done.stderr, done.stderr
        return done, (json.loads(done.stdout) if done.stdout.strip() else {})


@pytest.fixture(scope="module")
def clean_venv(tmp_path_factory: pytest.TempPathFactory) -> CleanVenv:
    return CleanVenv(tmp_path_factory.mktemp("acme-wheel"))


@pytest.mark.slow
def test_clean_venv_has_no_torch(clean_venv: CleanVenv) -> None:
    code = "import importlib.util as u; print(u.find_spec('torch'))"
    assert _ok(_run([str(clean_venv.python), "-c", code])).stdout.strip() == "None"


@pytest.mark.slow
def test_listed_with_its_distribution_when_no_device_is_present(clean_venv: CleanVenv) -> None:
    done, listing = clean_venv.backends_list(ACME_DEVICE_DIR=str(clean_venv.no_devices))
    _ok(done)
    found = {b["name"]: b for b in listing["backends"]}
    assert set(found) == {"cpu", "acme"}
    assert (found["cpu"]["distribution"], found["cpu"]["status"]) == ("trinity-rft", "ok")
    entry = found["acme"]
    assert entry["status"] == "ok", entry["error"]
    assert (entry["distribution"], entry["version"]) == ("trinity-backend-acme", _example_version())
    assert (entry["device_type"], entry["priority"], entry["ray_resource_key"]) == ("cpu", 50, "ACME")
    assert entry["available"] is False and "no Acme device found" in entry["reason"]
    assert (listing["selected"]["name"], listing["selected"]["source"]) == ("cpu", "auto")


@pytest.mark.slow
def test_selected_by_name_with_devices_present(clean_venv: CleanVenv) -> None:
    done, listing = clean_venv.backends_list(
        ACME_DEVICE_DIR=str(clean_venv.devices), ACME_VISIBLE_DEVICES="1", TRINITY_DEVICE="acme"
    )
    _ok(done)
    assert (listing["selected"]["name"], listing["selected"]["source"]) == ("acme", "environment")
    entry = next(b for b in listing["backends"] if b["name"] == "acme")
    assert (entry["available"], entry["device_count"], entry["selected"]) == (True, 1, True)


@pytest.mark.slow
def test_selected_by_priority_with_devices_present(clean_venv: CleanVenv) -> None:
    done, listing = clean_venv.backends_list(ACME_DEVICE_DIR=str(clean_venv.devices))
    _ok(done)
    assert (listing["selected"]["name"], listing["selected"]["source"]) == ("acme", "auto")


@pytest.mark.slow
def test_asked_for_without_devices_fails_with_the_probe_reason(clean_venv: CleanVenv) -> None:
    _, listing = clean_venv.backends_list(ACME_DEVICE_DIR=str(clean_venv.no_devices))
    reason = next(b for b in listing["backends"] if b["name"] == "acme")["reason"]
    done, listing = clean_venv.backends_list(ACME_DEVICE_DIR=str(clean_venv.no_devices), TRINITY_DEVICE="acme")
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("trinity: error: ") and reason in lines[0], lines[0]
    if listing:
        assert listing["selected"] is None and reason in listing["selection_error"]


def _metadata_only_wheel(folder: Path, name: str, version: str) -> Path:
    """Write a wheel of distribution ``name`` that holds nothing but its metadata (an older release's stand-in)."""
    stem = f"{name.replace('-', '_')}-{version}"
    wheel = folder / f"{stem}-py3-none-any.whl"
    info = f"{stem}.dist-info"
    files = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
        archive.writestr(f"{info}/RECORD", "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"]))
    return wheel


@pytest.mark.slow
def test_a_spec_3_backend_is_refused_at_install_by_an_older_core(clean_venv: CleanVenv, tmp_path: Path) -> None:
    """pip, not the loader, keeps the example (spec 3) off trinity-rft 0.2, which speaks specs 1 and 2 only."""
    older_core = _metadata_only_wheel(tmp_path, "trinity-rft", "0.2.0")
    env_dir = tmp_path / "old-core"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = str(env_dir / "bin" / "python")
    _ok(_run([*clean_venv.pip, "--python", python, "install", "-q", "--no-index", str(older_core)]))
    done = _run([*clean_venv.pip, "--python", python, "install", "--no-index", str(clean_venv.acme_wheel)])
    assert done.returncode != 0, done.stdout
    assert "trinity-rft<0.4,>=0.3" in done.stdout + done.stderr, done.stderr
    listed = _run([*clean_venv.pip, "--python", python, "list", "--format=freeze"])
    assert "trinity-backend-acme" not in listed.stdout
