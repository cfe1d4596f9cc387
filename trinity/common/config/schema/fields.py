"""Field helpers that record, next to a setting, how it relates to upstream Trinity-RFT's schema.

The loader reads this metadata: a setting upstream has but this framework
cannot honour is *refused* (one line saying what to do instead), never
silently ignored; a setting accepted for compatibility that changes nothing
here is *inert* and the plan lists it when a config sets it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Metadata key: message for any value other than the default.
REFUSED = "refused"
#: Metadata key: ``{value: message}`` for specific refused values.
REFUSED_VALUES = "refused_values"
#: Metadata key: why a setting has no effect here (reported when a config sets it).
INERT = "inert"
#: Metadata key: a field filled by the loader, never read from YAML.
INTERNAL = "internal"


def refused(default: Any, why: str) -> Any:
    """A setting refused when set to anything but ``default``; ``why`` says what to do instead."""
    return field(default=default, metadata={REFUSED: why})


def refused_factory(factory: Any, why: str) -> Any:
    """Like :func:`refused` for a mutable default built by ``factory``."""
    return field(default_factory=factory, metadata={REFUSED: why})


def refused_values(default: Any, values: dict[Any, str]) -> Any:
    """A setting whose listed ``values`` are refused, each with its own message."""
    return field(default=default, metadata={REFUSED_VALUES: values})


def inert(default: Any, why: str) -> Any:
    """A setting accepted for compatibility that has no effect here, for the reason ``why``."""
    return field(default=default, metadata={INERT: why})


@dataclass(frozen=True)
class ConfigSource:
    """Where a config came from and what it set (filled by the loader; never a YAML key)."""

    #: The YAML file ("" for a mapping built in code).
    file: str = ""
    #: Dotted paths the file (or an override) gave a value, e.g. ``trainer.save_interval``.
    explicit: frozenset[str] = frozenset()
    #: ``(dotted path, why)`` of inert settings the file set: accepted, without effect here.
    inert: tuple[tuple[str, str], ...] = ()

    def is_set(self, dotted: str) -> bool:
        """Return whether the config file (or an override) set ``dotted``."""
        return dotted in self.explicit


def internal(factory: Any) -> Any:
    """A field the loader fills (never read from YAML, not compared, not printed)."""
    return field(default_factory=factory, metadata={INTERNAL: True}, compare=False, repr=False)
