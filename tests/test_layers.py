"""The import layers: the ground floor (``common``, ``utils``) never reaches up to the parts built on it.

Everything a run reads (the config schema, the plan's types, experiences,
engines, workflows, rewards, the registry) lives low; what needs the algorithm,
buffer and trainer catalogs to resolve a config lives in ``trinity.planner``,
above them. Lazy imports inside functions count: they tie the layers as much
as a top-level one does.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TRINITY = Path(__file__).resolve().parents[1] / "trinity"

#: What each low package may import from ``trinity`` (itself included).
ALLOWED = {
    "common": {"common", "utils", "errors", "device", "weight_transport"},
    "utils": {"utils", "errors", "device"},
    "weight_transport": {"weight_transport", "utils", "errors", "device"},
    "device": {"device", "utils", "errors"},
}


def trinity_imports(path: Path) -> list[tuple[int, str]]:
    """Return ``(line, package)`` for every ``trinity.<package>`` that ``path`` imports, lazily or not."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "trinity" and len(parts) > 1:
                found.append((node.lineno, parts[1]))
    return found


def low_files() -> list[Path]:
    return sorted(p for package in ALLOWED for p in (TRINITY / package).rglob("*.py"))


def test_the_scan_reads_lazy_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\n\ndef f():\n"
                      "    from trinity.buffer.catalog import X\n"
                      "    import trinity.trainer.plan\n")
    assert trinity_imports(module) == [(4, "buffer"), (5, "trainer")]


def test_the_plan_types_stay_low_and_their_resolution_sits_above_the_catalogs() -> None:
    assert (TRINITY / "common" / "config" / "plan" / "run.py").exists()
    planner_needs = {package for _, package in trinity_imports(TRINITY / "planner" / "run.py")}
    assert {"trainer", "algorithm", "buffer"} <= planner_needs


@pytest.mark.parametrize("path", low_files(), ids=lambda p: str(p.relative_to(TRINITY)))
def test_a_low_package_imports_nothing_above_it(path: Path) -> None:
    allowed = ALLOWED[path.relative_to(TRINITY).parts[0]]
    above = [f"{path.relative_to(TRINITY.parent)}:{line}: trinity.{package}"
             for line, package in trinity_imports(path) if package not in allowed]
    assert not above, ("these imports reach a higher layer; move the code that needs it up (config resolution "
                       "belongs in trinity.planner), or pass what it needs in:\n" + "\n".join(above))
