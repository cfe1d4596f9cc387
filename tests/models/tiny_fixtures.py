"""Fixtures shared by the engine, workflow and explorer tests: one tiny model per session, in-process engines."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trinity.common.models.hf_engine import HFEngine
from trinity.common.models.tiny import build_tiny_model


def tiny_path(factory: pytest.TempPathFactory, name: str = "tiny-model", config: Any = None) -> Path:
    """Build (once per session: later calls find it) the tiny model ``name`` (``config``) and return its folder."""
    return build_tiny_model(factory.getbasetemp() / name, config)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model folder (Qwen2, hidden 64, 2 layers, ~400 tokens)."""
    return tiny_path(tmp_path_factory)


@pytest.fixture(scope="session")
def shared_engine(tiny_model: Path) -> Iterator[HFEngine]:
    """An in-process engine whose weights no test changes."""
    yield HFEngine(str(tiny_model), max_batch_size=16, torch_threads=1)


def vllm_model_path(factory: pytest.TempPathFactory) -> Path:
    """Build (once per session) the tiny model with 2 heads of 32 and return its folder.

    vLLM's CPU attention refuses the tiny model's head size (16); this one is
    the same model otherwise, and the double serves it as well.
    """
    from trinity.common.config.schema.model import TinyModelConfig

    return tiny_path(factory, "tiny-vllm-model", TinyModelConfig(num_heads=2))


@pytest.fixture(scope="session")
def vllm_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model folder the vLLM engine tests serve (Qwen2, hidden 64, 2 heads, 2 layers)."""
    return vllm_model_path(tmp_path_factory)


@pytest.fixture(scope="session")
def vllm_model_hf(vllm_model: Path) -> Iterator[HFEngine]:
    """An in-process ``hf`` engine on :func:`vllm_model` whose weights no test changes (the vLLM tests' oracle)."""
    yield HFEngine(str(vllm_model), max_batch_size=16, torch_threads=1)


def record_batches(engine: HFEngine) -> list[int]:
    """Spy on ``engine``'s generate calls: return the list it appends each call's row count to.

    ``del engine._sample`` restores the engine's own method.
    """
    sizes: list[int] = []
    original = engine._sample

    def spy(prompts, params, images=None):  # type: ignore[no-untyped-def]
        sizes.append(len(prompts))
        return original(prompts, params, images)

    engine._sample = spy  # type: ignore[method-assign]
    return sizes
