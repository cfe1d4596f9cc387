"""Fixtures of the CLI tests: a throwaway site directory and a runner of the real console script."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli._runner import Runner, run_trinity
from tests.fakedist import add_backend


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A directory put first on the CLI's ``PYTHONPATH``; it holds ``okdev``, a healthy backend."""
    path = tmp_path / "site"
    add_backend(path, "okdev", priority=5)
    return path


@pytest.fixture
def trinity(site: Path) -> Runner:
    """Return ``run(*args, timeout=30, **env)`` running the console script with ``site`` on its path."""
    return functools.partial(run_trinity, site)


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """In-process ``main()`` calls configure the root logger; put it back as it was."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
