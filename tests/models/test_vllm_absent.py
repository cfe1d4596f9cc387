"""Without vLLM installed (this machine, CI): the vllm engine type fails clearly, and nothing imports vLLM."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trinity.common.config.loader import ConfigError


def test_without_vllm_the_engine_type_is_one_clear_error(caplog: pytest.LogCaptureFixture) -> None:
    from trinity.common.config.schema import Config
    from trinity.common.models.engines import ENGINES
    from trinity.common.models.vllm_engine import VLLMEngine, VLLMEngineError
    from trinity.launcher.session import check_engine_requirements

    assert "vllm" not in sys.modules
    assert ENGINES.get("vllm")() is VLLMEngine  # loading the class imports no vLLM
    config = Config()
    config.explorer.engine_type = "vllm"
    with pytest.raises(ConfigError, match="vLLM is not installed in this Python"):
        check_engine_requirements(config, alive_nodes=1)
    check_engine_requirements(config, alive_nodes=3)  # engine nodes may have it: a warning only
    assert "the engine nodes must have it" in caplog.text
    config.explorer.engine_type = "hf"
    check_engine_requirements(config, alive_nodes=1)
    with pytest.raises(VLLMEngineError, match="vLLM is not installed"):
        VLLMEngine("/nonexistent")


def test_importing_trinity_and_the_engine_module_never_imports_vllm() -> None:
    code = (
        "import sys, trinity, trinity.common.models.engines, trinity.common.models.vllm_engine; "
        "assert 'vllm' not in sys.modules, 'vllm imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
