"""Entry point of the ``trinity`` console script (placeholder until the CLI lands)."""

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the ``trinity`` command line and return its exit code."""
    print("trinity: CLI not yet available", file=sys.stderr)
    return 2
