"""Tiny-model fixtures (tests/models/tiny_fixtures.py) and the vLLM under test (tests/doubles/vllm_under_test.py)."""

from tests.doubles.vllm_under_test import vllm_kind
from tests.models.tiny_fixtures import shared_engine, tiny_model, vllm_model, vllm_model_hf

__all__ = ["shared_engine", "tiny_model", "vllm_kind", "vllm_model", "vllm_model_hf"]
