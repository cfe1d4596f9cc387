"""The config error, and the "did you mean" hint every unknown-key message carries."""

from __future__ import annotations

import difflib

from trinity.errors import EXIT_USAGE, TrinityError


class ConfigError(TrinityError, ValueError):
    """A configuration is invalid; the message names the file and dotted path and says what to do."""

    exit_code = EXIT_USAGE


def closest_key(key: str, known: list[str]) -> str:
    """Return "; did you mean 'x'?" for the closest of ``known``, or "; known keys: ..."."""
    close = difflib.get_close_matches(key, known, n=2, cutoff=0.6)
    if close:
        return f"; did you mean {' or '.join(repr(c) for c in close)}?"
    return f"; known keys: {', '.join(known)}"
