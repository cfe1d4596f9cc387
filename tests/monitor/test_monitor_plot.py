"""The reward-curve PNG: drawn from metrics.jsonl, valid, readable, robust to missing series."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from tests.monitor._helpers import only
from trinity.monitor import METRICS_FILE, REWARD_PLOT_FILE, MetricRecord, Monitor, plot_reward_curve
from trinity.monitor.plot import reward_series

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _check_png(path: Path) -> np.ndarray:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 8_000, f"suspiciously small PNG: {len(data)} bytes"
    pixels = imread(path)
    assert pixels.shape[:2] == (450, 800)
    ink = (pixels[..., :3] < 0.9).any(axis=-1).mean()  # share of pixels that are not (near) white
    assert 0.01 < ink < 0.5, f"not a drawn chart: {ink:.3%} of the pixels are ink"
    return pixels


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_monitor_close_draws_the_reward_curve_from_metrics_jsonl(tmp_path: Path) -> None:
    monitor = Monitor(only(jsonl=True, plot=True), tmp_path, project="demo", name="grpo")
    for step in range(1, 31):
        monitor.log({"reward/mean": 1 - 0.8 ** step, "loss": 1.0 / step}, step=step, phase="train")
        if step % 10 == 0:
            monitor.log({"reward/mean": 0.9 - 0.7 ** (step / 10)}, step=step, phase="eval")
    path = monitor.close()

    assert path == tmp_path / REWARD_PLOT_FILE
    pixels = _check_png(path)
    # the train curve (matplotlib's C0 blue, #1f77b4) and an eval curve (C1 orange, #ff7f0e) are drawn
    rgb = (pixels[..., :3] * 255).round()
    assert np.any(np.all(np.abs(rgb - [31, 119, 180]) < 8, axis=-1))
    assert np.any(np.all(np.abs(rgb - [255, 127, 14]) < 8, axis=-1))


def test_series_come_from_train_then_explore_and_every_eval_reward_key(tmp_path: Path) -> None:
    records = [
        MetricRecord(1, "explore", 0.0, {"reward/mean": 0.1}),
        MetricRecord(2, "explore", 0.0, {"reward/mean": 0.2}),
        MetricRecord(2, "eval", 0.0, {"reward/mean": 0.3, "gsm8k/reward/mean": 0.4, "reward/std": 9.0}),
        MetricRecord(2, "explore", 0.0, {"reward/mean": 0.25}),  # a repeated step: the last value wins
        MetricRecord(3, "explore", 0.0, {"reward/mean": float("nan")}),
    ]
    series = reward_series(records)
    assert series.train_phase == "explore" and series.train == {1: 0.1, 2: 0.25}
    assert series.eval == {"eval": {2: 0.3}, "eval gsm8k": {2: 0.4}}
    with_train = reward_series([*records, MetricRecord(1, "train", 0.0, {"reward/mean": 0.7})])
    assert with_train.train_phase == "train" and with_train.train == {1: 0.7}


@pytest.mark.parametrize(
    "rows",
    [
        [{"step": 5, "phase": "eval", "time": 1.0, "metrics": {"reward/mean": 0.5}}],  # eval only, one point
        [{"step": s, "phase": "train", "time": 1.0, "metrics": {"reward/mean": s / 4}} for s in (1, 2, 3)],
        [{"step": 1, "phase": "train", "time": 1.0, "metrics": {"loss": 0.5}}],  # no reward at all
        [],  # empty file
    ],
    ids=["eval-only", "train-only", "no-reward", "empty"],
)
def test_missing_series_still_give_a_valid_png(tmp_path: Path, rows: list[dict[str, object]]) -> None:
    metrics = _write(tmp_path / METRICS_FILE, rows)
    path = plot_reward_curve(metrics)
    assert path == tmp_path / REWARD_PLOT_FILE
    _check_png(path)
    assert not list(tmp_path.glob(".*.tmp"))  # the partial file was renamed into place


def test_a_damaged_line_is_skipped(tmp_path: Path) -> None:
    metrics = tmp_path / METRICS_FILE
    _write(metrics, [{"step": 1, "phase": "train", "time": 1.0, "metrics": {"reward/mean": 0.5}}])
    with open(metrics, "a", encoding="utf-8") as file:
        file.write('{"step": 2, "phase": "tra\nnot json\n[1, 2]\n')
        file.write(json.dumps({"step": 3, "phase": "train", "time": 1.0, "metrics": {"reward/mean": 0.9}}) + "\n")
    from trinity.monitor.records import load_records

    assert [r.step for r in load_records(metrics)] == [1, 3]
    _check_png(plot_reward_curve(metrics, tmp_path / "out" / "curve.png"))


def test_without_jsonl_the_plot_comes_from_memory(tmp_path: Path) -> None:
    with Monitor(only(plot=True), tmp_path) as monitor:
        for step in (1, 2, 3):
            monitor.log({"reward/mean": step / 3, "loss": 1.0}, step=step, phase="train")
    assert not (tmp_path / METRICS_FILE).exists()
    assert monitor.plot_path == tmp_path / REWARD_PLOT_FILE
    assert [r.metrics for r in monitor._reward_history] == [{"reward/mean": s / 3} for s in (1, 2, 3)]
    _check_png(monitor.plot_path)


def test_plot_off_draws_nothing_and_a_missing_file_is_an_error(tmp_path: Path) -> None:
    with Monitor(only(jsonl=True), tmp_path) as monitor:
        monitor.log({"reward/mean": 0.5}, step=1, phase="train")
    assert monitor.plot_path is None and not (tmp_path / REWARD_PLOT_FILE).exists()
    with pytest.raises(FileNotFoundError):
        plot_reward_curve(tmp_path / "nope.jsonl")


def test_an_eval_set_named_eval_is_labelled_once() -> None:
    from trinity.monitor.plot import reward_series
    from trinity.monitor.records import MetricRecord

    series = reward_series([MetricRecord(4, "eval", 0.0, {"eval/reward/mean": 0.25})])
    assert series.eval == {"eval": {4: 0.25}}
