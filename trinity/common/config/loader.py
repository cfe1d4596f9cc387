"""YAML → typed :class:`~trinity.common.config.schema.Config`, with one-line errors naming the dotted path.

* ``${oc.env:VAR}`` / ``${oc.env:VAR,default}`` (also ``${env:...}``) in a
  string is replaced by the environment variable; a missing variable without
  a default is an error.
* An unknown key is an error with the closest known key suggested.
* Each value must match its field's type (int, float, bool, str, a choice
  of a ``Literal``, a list, a nested section); ints are accepted for floats.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar, Union

import yaml

from trinity.common.config.rules import check_rules
from trinity.common.config.schema import Config

T = TypeVar("T")

_ENV = re.compile(r"\$\{(?:oc\.env|env):([A-Za-z_][A-Za-z0-9_]*)(?:,([^}]*))?\}")


class ConfigError(ValueError):
    """A configuration is invalid; the message names the file and dotted path and says what to do."""


def load_config(path: str | Path, overrides: Mapping[str, Any] | None = None) -> Config:
    """Read, interpolate, type-check and validate the YAML config at ``path``.

    ``overrides`` maps dotted paths to values applied after reading
    (``{"trainer.save_interval": 2}``). Raises :class:`ConfigError`.
    """
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config file {str(file)!r} does not exist; pass an existing YAML file to --config")
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{file}: not valid YAML{where}: {problem}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: the top level must be a mapping of sections, got {type(raw).__name__}")
    for dotted, value in (overrides or {}).items():
        _set_dotted(raw, dotted, value)
    try:
        return parse_config(raw)
    except ConfigError as exc:
        raise ConfigError(f"{file}: {exc}") from None


def parse_config(raw: Mapping[str, Any]) -> Config:
    """Build a validated :class:`Config` from a plain mapping. Raises :class:`ConfigError`."""
    config = build(Config, _interpolate(raw, ""), "")
    check_rules(config)
    return config


def _set_dotted(raw: dict[str, Any], dotted: str, value: Any) -> None:
    node = raw
    parts = dotted.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {dotted}: {part} is not a section")
        node = child
    node[parts[-1]] = value


def _interpolate(value: Any, path: str) -> Any:
    if isinstance(value, str):
        def replace(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is None:
                raise ConfigError(
                    f"{path or 'config'}: environment variable {name} is not set and has no default; "
                    f"set it or write ${{oc.env:{name},<default>}}"
                )
            return default

        whole = _ENV.fullmatch(value.strip())
        replaced = _ENV.sub(replace, value)
        if whole is not None:  # a value that is only an interpolation may become a number or a bool
            loaded = yaml.safe_load(replaced) if replaced else replaced
            return loaded if isinstance(loaded, (int, float, bool)) else replaced
        return replaced
    if isinstance(value, dict):
        return {k: _interpolate(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def build(cls: type[T], raw: Any, path: str) -> T:
    """Build dataclass ``cls`` from ``raw`` (a mapping), checking keys and types under ``path``."""
    where = path or "config"
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a section (mapping), got {_describe(raw)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    for key, value in raw.items():
        dotted = f"{path}.{key}" if path else str(key)
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=2, cutoff=0.6)
            options = " or ".join(repr(c) for c in close)
            hint = f"; did you mean {options}?" if close else f"; known keys: {', '.join(fields)}"
            raise ConfigError(f"{dotted}: unknown key{hint}")
        values[key] = _convert(hints[key], value, dotted)
    return cls(**values)


def _convert(hint: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        errors = []
        for option in options:
            try:
                return _convert(option, value, path)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{path}: expected {_name(hint)}, got {_describe(value)}")
    if origin is typing.Literal:
        if value not in args:
            choices = ", ".join(repr(a) for a in args)
            close = difflib.get_close_matches(str(value), [str(a) for a in args], n=1)
            hint_text = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{path}: {value!r} is not one of {choices}{hint_text}")
        return value
    if dataclasses.is_dataclass(hint):
        return build(hint, value, path)  # type: ignore[arg-type]
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected a list, got {_describe(value)}")
        return [_convert(args[0], item, f"{path}[{i}]") for i, item in enumerate(value)] if args else value
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {_describe(value)}")
        return dict(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {_describe(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer, got {_describe(value)}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: expected a number, got {_describe(value)}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {_describe(value)}")
        return value
    if hint is Any:
        return value
    raise ConfigError(f"{path}: unsupported field type {hint!r}")  # a schema bug, not user input


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _name(hint: Any) -> str:
    return getattr(hint, "__name__", str(hint).replace("typing.", ""))
