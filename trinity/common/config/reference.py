"""The reference of every config key, generated from the schema: what it means and how it relates to upstream.

``docs/config_reference.md`` is written from :func:`render_reference` (see
``scripts/write_config_reference.py``) and a test keeps it in step with the
schema, so the page always says what the code does: each key's meaning (its
``#:`` comment), default, and status — supported, inert (accepted, no effect
here), refused (with what to do), a trinity-rft extension — and every veRL
key of ``trainer.trainer_config`` with its handling.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import typing
from collections.abc import Iterator
from typing import Any

from trinity.common.config.schema import Config
from trinity.common.config.schema.fields import INERT, INTERNAL, REFUSED, REFUSED_VALUES
from trinity.common.config.verl_keys import VERL_KEYS


@dataclasses.dataclass(frozen=True)
class KeyRow:
    """One key of the schema."""

    #: Dotted path (``[]`` for list items, ``{name}`` for mapping values).
    path: str
    #: Default, as YAML would show it.
    default: str
    #: ``supported``, ``trinity-rft``, ``inert`` or ``refused`` (or ``supported; refused: <values>``).
    status: str
    #: Its meaning, and for inert or refused keys why.
    meaning: str


def _comments(cls: type) -> dict[str, str]:
    """Return each field's ``#:`` comment of dataclass ``cls`` (joined lines)."""
    source = inspect.getsource(cls)
    tree = ast.parse(source)
    lines = source.splitlines()
    found: dict[str, str] = {}
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    for node in body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            comment: list[str] = []
            row = node.lineno - 2
            while row >= 0 and lines[row].strip().startswith("#:"):
                comment.insert(0, lines[row].strip()[2:].strip())
                row -= 1
            found[node.target.id] = " ".join(comment)
    return found


def _default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return ""
    if dataclasses.is_dataclass(value):
        return ""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"`{value}`" if value else '""'
    return f"`{value!r}`" if not isinstance(value, (list, dict)) or value else ("`[]`" if isinstance(value, list)
                                                                              else "`{}`")


def _nested(hint: Any) -> tuple[type | None, str]:
    """Return ``(dataclass, suffix)`` when ``hint`` holds a section: itself, a list of them, a mapping of them."""
    origin = typing.get_origin(hint)
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if dataclasses.is_dataclass(hint):
        return hint, ""  # type: ignore[return-value]
    if origin is list and args and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
        return args[0], "[]"
    if origin is dict and len(args) == 2 and isinstance(args[1], type) and dataclasses.is_dataclass(args[1]):
        return args[1], ".{name}"
    if args and len(args) == 1:
        return _nested(args[0])
    return None, ""


def schema_rows(cls: type = Config, prefix: str = "") -> Iterator[KeyRow]:
    """Yield a :class:`KeyRow` per key of ``cls`` and its sections, depth first, in declaration order."""
    hints = typing.get_type_hints(cls)
    comments = _comments(cls)
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.metadata.get(INTERNAL):
            continue
        path = f"{prefix}.{field.name}" if prefix else field.name
        meaning = comments.get(field.name, "")
        status = "supported"
        if meaning.startswith("(trinity-rft)"):
            status, meaning = "trinity-rft", meaning.removeprefix("(trinity-rft)").strip()
        if field.metadata.get(INERT):
            status, meaning = "inert", f"{meaning} Accepted, no effect here: {field.metadata[INERT]}."
        if field.metadata.get(REFUSED):
            status, meaning = "refused", f"{meaning} Refused unless left at its default: {field.metadata[REFUSED]}."
        refused_values = field.metadata.get(REFUSED_VALUES) or {}
        if refused_values:
            status = f"{status}; refused: {', '.join(sorted(refused_values))}"
        section, suffix = _nested(hints[field.name])
        yield KeyRow(path, _default(field), status, meaning)
        if section is not None and section is not cls:
            yield from schema_rows(section, path + suffix)


def verl_rows() -> Iterator[tuple[str, str, str]]:
    """Yield ``(key under trainer.trainer_config, handling, what it maps to or why)`` for every veRL key."""
    for path, entry in sorted(VERL_KEYS.items()):
        handling = {"map": "mapped", "inert": "inert", "refuse": "refused"}[entry.handling]
        if entry.handling == "refuse" and entry.when is not None:
            handling = "refused when set"
        yield path, handling, entry.target


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_reference() -> str:
    """Return the markdown of ``docs/config_reference.md``."""
    lines = [
        "# Config reference",
        "",
        "Generated from the schema (`trinity/common/config/schema/`) by `scripts/write_config_reference.py`;",
        "a test keeps it in step with the code. Status: **supported** (upstream Trinity-RFT's key, same meaning),",
        "**trinity-rft** (this framework's own key), **inert** (upstream's key, accepted, no effect here: a",
        "config that sets it gets a note in the plan), **refused** (upstream's key; a value other than the",
        "default stops the run with one line saying what to do); `refused: a, b` lists refused values.",
        "See [compatibility.md](compatibility.md) for how an upstream config is read.",
        "",
        "| key | default | status | meaning |",
        "|---|---|---|---|",
    ]
    for row in schema_rows():
        lines.append(f"| `{row.path}` | {row.default} | {_cell(row.status)} | {_cell(row.meaning)} |")
    lines += [
        "",
        "## `trainer.trainer_config`: veRL keys",
        "",
        "Upstream passes these to veRL. Here each is **mapped** onto the FSDP2 trainer (to the setting named),",
        "**inert** (a veRL speed or bookkeeping switch; results are the same), or **refused** (with what to use",
        "instead). Any other key is an error naming the closest known one.",
        "",
        "| key | handling | maps to, or why |",
        "|---|---|---|",
    ]
    for path, handling, target in verl_rows():
        lines.append(f"| `{path}` | {handling} | {_cell(target)} |")
    return "\n".join(lines) + "\n"
