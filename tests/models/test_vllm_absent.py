"""Without vLLM installed (this machine, CI): the vllm engine type fails clearly, and nothing imports vLLM."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trinity.common.config.loader import ConfigError


def test_without_vllm_the_engine_type_is_one_clear_error() -> None:
    from trinity.common.models.engines import ENGINES

    assert "vllm" not in sys.modules
    with pytest.raises(ConfigError, match="vLLM is not installed in this Python"):
        ENGINES.get("vllm")()


def test_importing_trinity_and_the_engine_module_never_imports_vllm() -> None:
    code = (
        "import sys, trinity, trinity.common.models.engines, trinity.common.models.vllm_engine; "
        "assert 'vllm' not in sys.modules, 'vllm imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
