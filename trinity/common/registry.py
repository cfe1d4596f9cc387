"""One registry pattern for everything pluggable by name (algorithms, workflows, rewards, buffers, engines).

A registry maps a name used in configs to an object. Registering twice under
one name is an error (no silent override); asking for an unknown name raises
:class:`UnknownNameError` with the closest known names, so a config typo gets
a one-line answer.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class RegistryError(Exception):
    """Base of registry errors."""


class UnknownNameError(RegistryError, KeyError):
    """A name was looked up that nothing is registered under."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class DuplicateNameError(RegistryError):
    """Two objects were registered under one name."""


class Registry(Generic[T]):
    """Named objects of one kind; ``kind`` is used in error messages ("advantage function")."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Return a decorator registering its argument under ``name``."""

        def decorate(obj: T) -> T:
            self.add(name, obj)
            return obj

        return decorate

    def add(self, name: str, obj: T) -> None:
        """Register ``obj`` under ``name``; raises :class:`DuplicateNameError` if taken."""
        key = name.strip().lower()
        if key in self._items and self._items[key] is not obj:
            raise DuplicateNameError(f"{self.kind} {key!r} is registered twice")
        self._items[key] = obj

    def get(self, name: str) -> T:
        """Return the object registered under ``name``; raises :class:`UnknownNameError`."""
        key = name.strip().lower()
        try:
            return self._items[key]
        except KeyError:
            raise UnknownNameError(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        """Return the one-line message for an unknown ``name``, with suggestions."""
        close = difflib.get_close_matches(name.strip().lower(), self._items, n=3)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        return f"unknown {self.kind} {name!r}{hint} (known: {', '.join(sorted(self._items))})"

    def names(self) -> list[str]:
        """Return every registered name, sorted."""
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.strip().lower() in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)
