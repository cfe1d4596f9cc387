"""One registry pattern for everything pluggable by name (algorithms, workflows, rewards, buffers, engines).

This is upstream Trinity-RFT's import path (``from trinity.utils.registry import Registry``); its
``Registry("workflows", default_mapping=...)`` and ``@REG.register_module("name")`` work as upstream documents them.

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

import contextlib
import difflib
import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar, cast

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


def _describe(obj: object) -> str:
    """Return where ``obj`` is defined, for messages: ``module:Qualname``, or a declared entry's target."""
    if isinstance(obj, _Declared):
        return f"{obj.target} (built in)"
    module = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None) or type(obj).__name__
    return f"{module}:{name}" if module else str(name)


def _source_file(obj: object) -> str | None:
    """Return the file ``obj`` was defined in (a function's code, a class's module or methods), or None."""
    code = getattr(obj, "__code__", None)
    if code is not None:
        return str(code.co_filename)
    module = inspect.getmodule(obj)
    if module is not None and getattr(module, "__file__", None):
        return str(module.__file__)
    for member in vars(obj).values() if isinstance(obj, type) else ():
        code = getattr(member, "__code__", None)
        if code is not None:
            return str(code.co_filename)
    return None


def _same_definition(first: object, second: object) -> bool:
    """Whether two objects are one definition loaded twice: the same qualified name in the same source file."""
    if isinstance(first, _Declared) or isinstance(second, _Declared):
        return False
    if getattr(first, "__qualname__", None) != getattr(second, "__qualname__", object()):
        return False
    source = _source_file(first)
    return source is not None and source == _source_file(second)


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
    """Named objects of one kind; ``kind`` is used in error messages ("advantage function").

    Upstream Trinity-RFT's registry API works too: ``register_module(name)``
    (a decorator, or with ``module_cls``; ``force`` replaces an entry),
    ``default_mapping`` (names declared by dotted path), ``name`` and
    ``modules``.
    """

    def __init__(self, kind: str, *, allow_import_path: bool = True,
                 default_mapping: Mapping[str, str] | None = None) -> None:
        self.kind = kind
        #: Whether an unregistered dotted name (``pkg.module.Name``) is imported on demand.
        self.allow_import_path = allow_import_path
        self._items: dict[str, T | _Declared] = {}
        for name, target in (default_mapping or {}).items():
            self.declare(name, target)

    @property
    def name(self) -> str:
        """The registry's kind (upstream calls it the registry's name)."""
        return self.kind

    @property
    def modules(self) -> dict[str, T]:
        """Every entry imported so far, by name (upstream's view of a registry)."""
        return {k: v for k, v in self._items.items() if not isinstance(v, _Declared)}

    def register(self, name: str) -> Callable[[T], T]:
        """Return a decorator registering its argument under ``name``."""

        def decorate(obj: T) -> T:
            self.add(name, obj)
            return obj

        return decorate

    def register_module(self, module_name: str | None = None, module_cls: T | None = None, force: bool = False,
                        lazy: bool = False) -> Any:
        """Upstream's registration: a decorator, or register ``module_cls`` at once; the name defaults to the
        class's. ``force`` replaces what holds the name; ``lazy`` is accepted (entries import when used)."""
        if module_name is not None and not isinstance(module_name, str):
            raise TypeError(f"module_name must be a str or None, got {type(module_name).__name__}")

        def decorate(obj: T) -> T:
            name = module_name if module_name is not None else str(getattr(obj, "__name__", ""))
            if force:
                self._items[self._key(name)] = obj
            else:
                self.add(name, obj)
            with contextlib.suppress(AttributeError, TypeError):
                obj._name = name  # type: ignore[attr-defined]  # upstream sets it on registered classes
            return obj

        return decorate(module_cls) if module_cls is not None else decorate

    def add(self, name: str, obj: T) -> None:
        """Register ``obj`` under ``name``; raises :class:`DuplicateNameError` if another object holds it.

        The same class imported twice (a plugin file loaded as a plugin and
        again by its module path) is the same entry, not a duplicate.
        """
        key = self._key(name)
        current = self._items.get(key)
        if current is not None and current is not obj and not _same_definition(current, obj):
            raise DuplicateNameError(
                f"{self.kind} {key!r} is registered twice: it already names {_describe(current)}; register "
                f"{_describe(obj)} under another name (or with force=True to replace it)"
            )
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
