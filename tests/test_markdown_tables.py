"""The Markdown tables of the README and the docs are well formed: no paragraph glued into a table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
_CODE = re.compile(r"`[^`]*`")


def _cells(line: str) -> int:
    """Count the cells of a table row: pipes outside code spans, not escaped, minus the outer two."""
    text = _CODE.sub("", line).replace("\\|", "")
    return text.strip().strip("|").count("|") + 1


def _tables(text: str) -> list[tuple[int, list[tuple[int, str]]]]:
    """Return each table as (line number of its header, [(line number, row)...]), fenced code skipped."""
    tables: list[tuple[int, list[tuple[int, str]]]] = []
    fenced = False
    current: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("|"):
            current.append((number, line))
            continue
        if current:
            tables.append((current[0][0], current))
            current = []
    if current:
        tables.append((current[0][0], current))
    return tables


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_every_row_has_as_many_cells_as_its_header(document: Path) -> None:
    for header_line, rows in _tables(document.read_text(encoding="utf-8")):
        width = _cells(rows[0][1])
        for number, row in rows[1:]:
            assert _cells(row) == width, (
                f"{document.name}:{number}: row has {_cells(row)} cells, its table (line {header_line}) has "
                f"{width}; a paragraph glued onto a row? {row[-80:]!r}"
            )
