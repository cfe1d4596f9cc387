"""One registry pattern for everything pluggable by name (algorithms, workflows, rewards, buffers, engines).

A registry maps a name used in configs to an object. Registering twice under
one name is an error (no silent override); asking for an unknown name raises
:class:`UnknownNameError` with the closest known names, so a config typo gets
a one-line answer.

Built-in entries are usually *declared* rather than added:
``REG.declare("grpo", "trinity.algorithm.advantage:grpo_advantages")`` makes
the name known at once (so a config can be checked without importing torch)
and imports the object on the first :meth:`Registry.get`. A name that is not
registered but looks like a Python path (``my_pkg.workflows.MyWorkflow``) is
imported on demand, as upstream Trinity-RFT configs expect.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, cast

from trinity.errors import EXIT_USAGE, TrinityError

T = TypeVar("T")


class RegistryError(TrinityError):
    """Base of registry errors: a name nothing is registered under, or registered twice (exit status 2)."""

    exit_code = EXIT_USAGE


class UnknownNameError(RegistryError, KeyError):
    """A name was looked up that nothing is registered under."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class DuplicateNameError(RegistryError):
    """Two objects were registered under one name."""


class _Declared:
    """A built-in entry not imported yet: ``module:attribute``."""

    __slots__ = ("target",)

    def __init__(self, target: str) -> None:
        self.target = target


def import_object(target: str) -> object:
    """Return the object named by ``module:attr`` or ``module.attr``; raises ImportError/AttributeError."""
    module_name, sep, attr = target.partition(":")
    if not sep:
        module_name, _, attr = target.rpartition(".")
    if not module_name or not attr:
        raise ImportError(f"{target!r} is not a Python path (module.attribute)")
    obj: object = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class Registry(Generic[T]):
    """Named objects of one kind; ``kind`` is used in error messages ("advantage function")."""

    def __init__(self, kind: str, *, allow_import_path: bool = True) -> None:
        self.kind = kind
        #: Whether an unregistered dotted name (``pkg.module.Name``) is imported on demand.
        self.allow_import_path = allow_import_path
        self._items: dict[str, T | _Declared] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Return a decorator registering its argument under ``name``."""

        def decorate(obj: T) -> T:
            self.add(name, obj)
            return obj

        return decorate

    def add(self, name: str, obj: T) -> None:
        """Register ``obj`` under ``name``; raises :class:`DuplicateNameError` if taken."""
        key = self._key(name)
        current = self._items.get(key)
        if current is not None and current is not obj:
            raise DuplicateNameError(f"{self.kind} {key!r} is registered twice")
        self._items[key] = obj

    def declare(self, name: str, target: str) -> None:
        """Make ``name`` known now and import ``target`` (``module:attr``) on its first :meth:`get`.

        Raises :class:`DuplicateNameError` if ``name`` is taken by another target.
        """
        key = self._key(name)
        current = self._items.get(key)
        if current is not None and not (isinstance(current, _Declared) and current.target == target):
            raise DuplicateNameError(f"{self.kind} {key!r} is registered twice")
        self._items[key] = _Declared(target)

    def get(self, name: str) -> T:
        """Return the object registered under ``name`` (importing a declared one); raises UnknownNameError.

        An unregistered name containing a dot is imported as a Python path when
        the registry allows it; failing that, UnknownNameError says why.
        """
        key = self._key(name)
        entry = self._items.get(key)
        if entry is None:
            if self.allow_import_path and "." in name.strip():
                return self._import_path(name.strip())
            raise UnknownNameError(self.unknown_message(name))
        if isinstance(entry, _Declared):
            try:
                resolved = cast(T, import_object(entry.target))
            except (ImportError, AttributeError) as exc:
                raise UnknownNameError(
                    f"{self.kind} {key!r} is declared as {entry.target} but cannot be loaded: {exc}"
                ) from exc
            self._items[key] = resolved
            return resolved
        return entry

    def _import_path(self, path: str) -> T:
        try:
            return cast(T, import_object(path))
        except (ImportError, AttributeError) as exc:
            close = difflib.get_close_matches(path.lower(), self._items, n=2)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise UnknownNameError(
                f"unknown {self.kind} {path!r}: not a registered name, and importing it as a Python path failed "
                f"({type(exc).__name__}: {exc}){hint}"
            ) from None

    def resolves(self, name: str) -> bool:
        """Return whether :meth:`get` would find ``name`` (registered, or an importable Python path)."""
        try:
            self.get(name) if "." in name else self._items[self._key(name)]
        except (UnknownNameError, KeyError):
            return False
        return True

    def unknown_message(self, name: str) -> str:
        """Return the one-line message for an unknown ``name``, with suggestions."""
        close = difflib.get_close_matches(name.strip().lower(), self._items, n=3)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        return f"unknown {self.kind} {name!r}{hint} (known: {', '.join(sorted(self._items))})"

    def names(self) -> list[str]:
        """Return every registered name, sorted."""
        return sorted(self._items)

    def declared_targets(self) -> dict[str, str]:
        """Return ``{name: module:attr}`` of the entries declared and not imported yet."""
        return {k: v.target for k, v in self._items.items() if isinstance(v, _Declared)}

    @staticmethod
    def _key(name: str) -> str:
        return name.strip().lower()

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._key(name) in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)
