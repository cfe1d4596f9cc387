"""YAML → typed :class:`~trinity.common.config.schema.Config`, read as upstream Trinity-RFT reads it.

* The file is read by OmegaConf, as upstream does: ``1e-6`` is a float,
  ``${oc.env:VAR,default}`` reads the environment and ``${a.b}`` refers to
  another key. ``--set`` overrides are applied before interpolation.
* An unknown key is an error with the closest known key; a key of the old
  trinity-rft schema or a value upstream derives itself says what to write
  instead (:mod:`trinity.common.config.compat`).
* Each value must fit its field as OmegaConf would coerce it: a number
  written as a string is read as that number; text where a number must be
  is refused.
* A setting this framework cannot honour is refused with one line; a
  setting accepted for compatibility without effect is recorded, and
  reported by the plan (:mod:`trinity.common.config.schema.fields`).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar, Union

from trinity.common.config.errors import ConfigError as ConfigError
from trinity.common.config.schema import Config
from trinity.common.config.schema.fields import INERT, INTERNAL, REFUSED, REFUSED_VALUES, ConfigSource

T = TypeVar("T")

#: Boolean spellings OmegaConf accepts for a bool field.
_TRUE = {"true", "yes", "on", "y", "1"}
_FALSE = {"false", "no", "off", "n", "0"}


def load_config(path: str | Path, overrides: Mapping[str, Any] | None = None) -> Config:
    """Read, interpolate, type-check and check the YAML config at ``path``; return it.

    ``overrides`` maps dotted paths to values applied before interpolation
    (``{"trainer.save_interval": 2}``); ``config.source`` records the file and
    the keys it set. Raises :class:`ConfigError`.
    """
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config file {str(file)!r} does not exist; pass an existing YAML file to --config")
    raw = read_yaml(file, overrides)
    try:
        return parse_config(raw, file=str(file))
    except ConfigError as exc:
        raise ConfigError(f"{file}: {exc}") from None


def read_yaml(file: Path, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Return the YAML file as plain data, OmegaConf-interpolated, with ``overrides`` applied first."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    _register_env_alias()
    try:
        node = OmegaConf.load(file)
    except OSError as exc:
        raise ConfigError(f"{file}: cannot be read ({exc.strerror or exc})") from None
    except Exception as exc:  # noqa: BLE001 - yaml and omegaconf parse errors have no common base
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or _first_line(exc)
        raise ConfigError(f"{file}: not valid YAML{where}: {problem}") from None
    if not OmegaConf.is_dict(node):
        raise ConfigError(f"{file}: the top level must be a mapping of sections, got a list")
    for dotted, value in (overrides or {}).items():
        try:
            OmegaConf.update(node, dotted, value, merge=True, force_add=True)
        except OmegaConfBaseException as exc:
            raise ConfigError(f"{file}: override {dotted}: {_first_line(exc)}") from None
    try:
        data = OmegaConf.to_container(node, resolve=True)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", None) or "config"
        raise ConfigError(f"{file}: {key}: {_interpolation_problem(exc)}") from None
    assert isinstance(data, dict)
    return {str(k): v for k, v in data.items()}


def _register_env_alias() -> None:
    """Let ``${env:VAR,default}`` (trinity-rft's older spelling) mean ``${oc.env:VAR,default}``."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("env"):
        env = OmegaConf._get_resolver("oc.env")  # type: ignore[attr-defined]
        import omegaconf

        # 2.4 renamed register_new_resolver (and deprecated the old name); in 2.3 register_resolver is the legacy API
        modern = tuple(int(p) for p in omegaconf.__version__.split(".")[:2]) >= (2, 4)
        register: Any = OmegaConf.register_resolver if modern else OmegaConf.register_new_resolver
        register("env", env)


def _interpolation_problem(exc: BaseException) -> str:
    text = _first_line(exc)
    if "Environment variable" in text and "not found" in text:
        name = text.split("'")[1] if "'" in text else "the variable"
        return (f"environment variable {name} is not set and has no default; set it or write "
                f"${{oc.env:{name},<default>}}")
    return text.removeprefix("KeyError raised while resolving interpolation: ")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def parse_config(raw: Mapping[str, Any], *, file: str = "") -> Config:
    """Build a checked :class:`Config` from plain data (already interpolated). Raises :class:`ConfigError`."""
    from trinity.common.config import compat
    from trinity.common.config.rules import check_rules

    data = compat.normalise(dict(raw))
    builder = _Builder()
    config = builder.build(Config, data, "")
    config.source = ConfigSource(file=file, explicit=frozenset(builder.explicit), inert=tuple(builder.inert))
    check_rules(config)
    return config


class _Builder:
    """Builds dataclasses from plain data, collecting what was set and what is inert."""

    def __init__(self) -> None:
        self.explicit: set[str] = set()
        self.inert: list[tuple[str, str]] = []

    def build(self, cls: type[T], raw: Any, path: str) -> T:
        """Build dataclass ``cls`` from ``raw`` (a mapping), checking keys and types under ``path``."""
        from trinity.common.config import compat

        where = path or "config"
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{where}: expected a section (mapping), got {_describe(raw)}")
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get(INTERNAL)}  # type: ignore[arg-type]
        values: dict[str, Any] = {}
        for key, value in raw.items():
            dotted = f"{path}.{key}" if path else str(key)
            if key not in fields:
                raise ConfigError(compat.unknown_key_message(dotted, str(key), list(fields)))
            self.explicit.add(dotted)
            converted = self.convert(hints[key], value, dotted)
            _check_refused(fields[key], converted, dotted)
            why = fields[key].metadata.get(INERT)
            if why and converted != _default_of(fields[key]):
                self.inert.append((dotted, str(why)))
            values[key] = converted
        return cls(**values)

    def convert(self, hint: Any, value: Any, path: str) -> Any:
        """Return ``value`` coerced to ``hint`` as OmegaConf would; raises ConfigError naming ``path``."""
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if origin in (Union, types.UnionType):
            if value is None and type(None) in args:
                return None
            options = [a for a in args if a is not type(None)]
            errors = []
            for option in options:
                try:
                    return self.convert(option, value, path)
                except ConfigError as exc:
                    errors.append(str(exc))
            if len(errors) == 1:
                raise ConfigError(errors[0])
            raise ConfigError(f"{path}: expected {_name(hint)}, got {_describe(value)}")
        if dataclasses.is_dataclass(hint):
            return self.build(hint, value, path)  # type: ignore[arg-type]
        if origin is list:
            if not isinstance(value, list):
                raise ConfigError(f"{path}: expected a list, got {_describe(value)}")
            return [self.convert(args[0], item, f"{path}[{i}]") for i, item in enumerate(value)] if args else value
        if origin is dict:
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: expected a mapping, got {_describe(value)}")
            if args and dataclasses.is_dataclass(args[1]):
                return {str(k): self.convert(args[1], v, f"{path}.{k}") for k, v in value.items()}
            return dict(value)
        if hint is bool:
            return _to_bool(value, path)
        if hint is int:
            return _to_int(value, path)
        if hint is float:
            return _to_float(value, path)
        if hint is str:
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise ConfigError(f"{path}: expected a string, got {_describe(value)}")
            return str(value)
        if hint is Any:
            return value
        raise ConfigError(f"{path}: unsupported field type {hint!r}")  # a schema bug, not user input


def _check_refused(field: dataclasses.Field[Any], value: Any, path: str) -> None:
    why = field.metadata.get(REFUSED)
    if why and value != _default_of(field):
        raise ConfigError(f"{path}: {_describe(value)} is not supported: {why}")
    by_value = field.metadata.get(REFUSED_VALUES) or {}
    if isinstance(value, str) and value.strip().lower() in by_value:
        raise ConfigError(f"{path}: {value!r} is not supported: {by_value[value.strip().lower()]}")


def _default_of(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def _to_bool(value: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ConfigError(f"{path}: expected true or false, got {_describe(value)}")


def _to_int(value: Any, path: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip().replace("_", ""))
        except ValueError:
            pass
    raise ConfigError(f"{path}: expected an integer, got {_describe(value)}")


def _to_float(value: Any, path: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip().replace("_", ""))
        except ValueError:
            pass
    raise ConfigError(f"{path}: expected a number, got {_describe(value)}")


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _name(hint: Any) -> str:
    return getattr(hint, "__name__", str(hint).replace("typing.", ""))


def in_file(config: Config, exc: ConfigError) -> ConfigError:
    """Return ``exc`` with the config's file in front of its message (as the loader's errors have)."""
    file = config.source.file
    message = str(exc)
    if not file or message.startswith(f"{file}:"):
        return exc
    return ConfigError(f"{file}: {message}")
