"""Putting the vLLM double (``tests/doubles/vllm_site``) on the import path for a while, and taking it off again.

The double follows vLLM's documented V1 interfaces (see its README); it lets
the ``vllm`` engine run on this CPU-only machine, where vLLM cannot be
installed. Outside this context ``import vllm`` must fail again: other tests
check what happens without vLLM.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: The folder that holds the double's ``vllm`` package.
SITE = Path(__file__).resolve().parent / "vllm_site"


def _forget_vllm() -> None:
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]


@contextmanager
def vllm_double() -> Iterator[Path]:
    """Make ``import vllm`` find the double in this process and in child processes (``PYTHONPATH``)."""
    old_path = os.environ.get("PYTHONPATH")
    sys.path.insert(0, str(SITE))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(SITE), old_path) if p)
    _forget_vllm()
    try:
        yield SITE
    finally:
        _forget_vllm()
        if str(SITE) in sys.path:
            sys.path.remove(str(SITE))
        if old_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_path
