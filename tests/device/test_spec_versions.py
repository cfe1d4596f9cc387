"""The core's version moves with the DeviceBackend spec, so a backend can require the spec it needs through pip."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

import trinity
from trinity.device.spec import (
    FIRST_CORE_BY_SPEC,
    HOOKS_ADDED_IN,
    MIN_SPEC_VERSION,
    SINGLE_ANSWER_HOOKS,
    SPEC_VERSION,
    core_requirement,
)
from trinity.device.testing.conformance import core_requirement_problem

ROOT = Path(__file__).resolve().parents[2]
BACKEND_PROJECTS = ("trinity_backend_cuda", "trinity_backend_npu", "examples/backends/trinity-backend-acme")


def _project(folder: str) -> dict:
    return tomllib.loads((ROOT / folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_the_core_version_is_the_first_release_of_its_spec() -> None:
    assert sorted(FIRST_CORE_BY_SPEC) == list(range(1, SPEC_VERSION + 1))
    assert trinity.__version__.startswith(FIRST_CORE_BY_SPEC[SPEC_VERSION] + ".")
    assert _project(".")["version"] == trinity.__version__
    assert core_requirement(SPEC_VERSION) == f"trinity-rft>={FIRST_CORE_BY_SPEC[SPEC_VERSION]},<0.{SPEC_VERSION + 1}"


def test_hooks_added_after_the_first_spec_are_known_hooks_of_a_supported_spec() -> None:
    assert set(HOOKS_ADDED_IN) <= set(SINGLE_ANSWER_HOOKS)
    assert all(MIN_SPEC_VERSION < since <= SPEC_VERSION for since in HOOKS_ADDED_IN.values())


@pytest.mark.parametrize("folder", BACKEND_PROJECTS)
def test_each_backend_package_of_this_repository_requires_the_core_of_its_spec(folder: str) -> None:
    assert core_requirement_problem(_project(folder)["dependencies"], SPEC_VERSION) is None


@pytest.mark.parametrize(("requires", "spec", "expected"), [
    (["trinity-rft>=0.3,<0.4"], 3, None),
    (["trinity-rft>=0.1,<0.4"], 1, None),
    (["trinity-rft>=0.2,<0.4"], 2, None),
    (["trinity-rft>=0.2,<0.4"], 3, "admits trinity-rft 0.2.0, which does not speak spec 3"),
    (["trinity-rft>=0.1,<0.2"], 2, "admits trinity-rft 0.1.0, which does not speak spec 2"),
    (["trinity-rft>=0.2,<0.3"], 2, f"excludes the trinity-rft {trinity.__version__} it is being tested with"),
    (["trinity-rft"], 2, "admits trinity-rft 0.1.0"),
    (["torch>=2"], 2, "does not depend on trinity-rft"),
    (None, 1, "does not depend on trinity-rft"),
    (["trinity-rft>=9"], 2, f"excludes the trinity-rft {trinity.__version__} it is being tested with"),
])
def test_the_kit_names_a_requirement_that_admits_a_core_too_old(
    requires: list[str] | None, spec: int, expected: str | None
) -> None:
    problem = core_requirement_problem(requires, spec)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem
