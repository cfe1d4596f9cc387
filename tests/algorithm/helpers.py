"""Shared assertion helper for the algorithm tests."""

from __future__ import annotations

import torch


def assert_values(actual: torch.Tensor, expected: list[float] | list[list[float]], atol: float = 1e-6) -> None:
    """Assert ``actual`` equals the hand-computed ``expected`` (nested lists) within ``atol``."""
    want = torch.tensor(expected, dtype=torch.float64)
    got = actual.detach().to(torch.float64)
    assert got.shape == want.shape, f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert torch.allclose(got, want, atol=atol, rtol=1e-6), f"{got.tolist()} != {want.tolist()}"
