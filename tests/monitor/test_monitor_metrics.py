"""Metric helpers: statistics of lists, tokens per second, the timer."""

from __future__ import annotations

import time

import numpy as np
import pytest

from trinity.monitor import Stats, Timer, stats, summarize, tokens_per_second


def test_stats_and_summarize() -> None:
    result = stats([1, 2, 3, 4])
    assert result[:3] == (2.5, 1.0, 4.0) and result.std == pytest.approx(float(np.std([1, 2, 3, 4])))
    assert stats(np.array([0.5])) == Stats(0.5, 0.5, 0.5, 0.0)
    assert summarize([0.0, 1.0], "reward") == {
        "reward/mean": 0.5, "reward/min": 0.0, "reward/max": 1.0, "reward/std": 0.5
    }
    assert summarize([], "reward") == {}
    with pytest.raises(ValueError, match="empty"):
        stats([])


def test_tokens_per_second() -> None:
    assert tokens_per_second(1000, 2.0) == 500.0
    assert tokens_per_second(1000, 0.0) == 0.0


def test_timer_measures_and_stores_even_when_the_block_raises() -> None:
    metrics: dict[str, float] = {}
    with pytest.raises(RuntimeError), Timer(metrics, "time/sync_s") as timer:
        time.sleep(0.05)
        assert timer.seconds > 0.0
        raise RuntimeError("boom")
    assert 0.04 < metrics["time/sync_s"] < 2.0
    assert timer.seconds == metrics["time/sync_s"]  # frozen once the block ends
    with Timer() as bare:
        pass
    assert 0.0 <= bare.seconds < metrics["time/sync_s"]
    with pytest.raises(ValueError, match="both"):
        Timer(metrics)
