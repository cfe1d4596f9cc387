"""Without vLLM installed (this machine, CI): the vllm engine type fails clearly, and nothing imports vLLM."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trinity.common.config.loader import ConfigError


def test_without_vllm_the_engine_type_is_one_clear_error(caplog: pytest.LogCaptureFixture) -> None:
    import dataclasses

    from tests.plans import make_layout, make_plan
    from trinity.common.models.engines import ENGINES
    from trinity.common.models.vllm_engine import VLLMEngine, VLLMEngineError
    from trinity.launcher.session import check_engine_requirements

    assert "vllm" not in sys.modules
    assert ENGINES.get("vllm")() is VLLMEngine  # loading the class imports no vLLM
    hf_layout = make_layout(make_plan())  # engine_type auto: hf on the CPU backend
    assert hf_layout.engine_type == "hf"
    layout = dataclasses.replace(hf_layout, engine_type="vllm")  # as an accelerator backend resolves it
    with pytest.raises(ConfigError, match="vLLM is not installed in this Python"):
        check_engine_requirements(layout, alive_nodes=1)
    check_engine_requirements(layout, alive_nodes=3)  # engine nodes may have it: a warning only
    assert "the engine nodes must have it" in caplog.text
    check_engine_requirements(hf_layout, alive_nodes=1)
    with pytest.raises(VLLMEngineError, match="vLLM is not installed"):
        VLLMEngine("/nonexistent")


def test_importing_trinity_and_the_engine_module_never_imports_vllm() -> None:
    code = (
        "import sys, trinity, trinity.common.models.engines, trinity.common.models.vllm_engine; "
        "assert 'vllm' not in sys.modules, 'vllm imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
