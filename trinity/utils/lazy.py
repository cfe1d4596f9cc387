"""Package namespaces whose public names are imported on first use.

A package ``__init__`` that re-exports heavy modules (torch, transformers)
would make every import of a light submodule heavy too, because Python runs
the package's ``__init__`` first. :func:`lazy_exports` keeps the names and
defers the imports.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return ``(__getattr__, __dir__)`` for ``package`` exporting ``{name: "submodule"}`` lazily.

    ``__getattr__`` imports ``package.submodule`` and returns its ``name``; an
    unknown name raises AttributeError as a module would.
    """

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def dir_() -> list[str]:
        return sorted(exports)

    return getattr_, dir_
