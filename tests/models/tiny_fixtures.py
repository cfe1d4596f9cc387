"""Fixtures shared by the engine, workflow and explorer tests: one tiny model per session, in-process engines."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from trinity.common.models.hf_engine import HFEngine
from trinity.common.models.tiny import build_tiny_model


def tiny_path(factory: pytest.TempPathFactory) -> Path:
    """Build (once per session: later calls find it) the tiny model and return its folder."""
    return build_tiny_model(factory.getbasetemp() / "tiny-model")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model folder (Qwen2, hidden 64, 2 layers, ~400 tokens)."""
    return tiny_path(tmp_path_factory)


@pytest.fixture(scope="session")
def shared_engine(tiny_model: Path) -> Iterator[HFEngine]:
    """An in-process engine whose weights no test changes."""
    yield HFEngine(str(tiny_model), max_batch_size=16, torch_threads=1)


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
