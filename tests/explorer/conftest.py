"""Tiny-model fixtures (see tests/models/tiny_fixtures.py)."""

from tests.models.tiny_fixtures import shared_engine, tiny_model

__all__ = ["shared_engine", "tiny_model"]
