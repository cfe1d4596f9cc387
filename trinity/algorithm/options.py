"""Calling a registered function with options from a config, with one-line errors for typos.

Registered algorithm functions take their data positionally and their options
as keyword-only parameters. :func:`call_registered` looks the function up,
checks the option names against its signature and calls it, so a misspelt
option in a YAML file is reported as such rather than as a bare TypeError.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from trinity.utils.registry import Registry

R = TypeVar("R")


class UnknownOptionError(ValueError):
    """An option was passed that the registered function does not take."""


def option_names(fn: Callable[..., Any]) -> list[str]:
    """Return the names of ``fn``'s keyword-only parameters (its options), sorted."""
    params = inspect.signature(fn).parameters.values()
    return sorted(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)


def check_options(kind: str, name: str, fn: Callable[..., Any], options: Mapping[str, Any]) -> None:
    """Raise :class:`UnknownOptionError` (one line, with a suggestion) if ``options`` has a name ``fn`` lacks.

    A class (upstream's shape) is checked against its constructor instead.
    """
    if isinstance(fn, type):
        from trinity.algorithm.class_adapters import check_class_options

        check_class_options(kind, name, fn, options)
        return
    check_option_names(kind, name, option_names(fn), options)


def check_option_names(kind: str, name: str, known: Iterable[str], options: Mapping[str, Any]) -> None:
    """Raise :class:`UnknownOptionError` (one line, with a suggestion) if ``options`` has a name not in ``known``.

    This is the light variant of :func:`check_options`, for names known without importing the function.
    """
    names = sorted(known)
    for key in options:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            listing = ", ".join(names) if names else "none"
            raise UnknownOptionError(f"{kind} {name!r} has no option {key!r}{hint} (options: {listing})")


def call_registered(registry: Registry[Callable[..., R]], name: str, *args: Any, **options: Any) -> R:
    """Call the function registered under ``name`` with ``args`` and keyword ``options`` and return its result.

    Raises :class:`~trinity.utils.registry.UnknownNameError` for an unknown name and
    :class:`UnknownOptionError` for an option the function does not take.
    """
    fn = registry.get(name)
    check_options(registry.kind, name, fn, options)
    return fn(*args, **options)
