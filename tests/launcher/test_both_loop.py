"""Mode both with the explorer and the trainer running at the same time: real Ray, the tiny model, FSDP2 over gloo.

The sync policy is the only thing that makes one wait for the other: these
runs check that ``sync_offset: 0`` is exactly the serial loop, that
``sync_offset: 1`` lets the explorer run one batch ahead and never more, and
that ``staleness_control`` keeps older experiences out of training.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_run_both import job_config, records
from trinity.common.config import parse_config
from trinity.launcher import both as both_module
from trinity.launcher import run_plan
from trinity.launcher.both_loop import BothLoop
from trinity.planner.run import resolve_run


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trinity.common.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny")


class SerialLoop(BothLoop):
    """The reference: explore a batch, train a step, sync, in one thread (the loop mode both had before)."""

    def run(self, resumed: bool) -> None:
        from trinity.launcher.evaluation import evaluate

        assert not resumed
        if self.plan.buffer.eval_tasksets and self.plan.explorer.eval_on_startup:
            self._log(evaluate(self.plan, self.scheduler, 0), 0, "eval")
        lead = self.plan.sync.offset
        while not self._trainer_done():
            while not self.exhausted and self.explored_places - self.taken_places < self.groups_per_step * (lead + 1):
                self.exhausted = not self._explore()
            waiting = self.explored_places - self.taken_places
            if waiting <= 0:
                break
            groups = self._take(min(waiting, self.groups_per_step))
            if groups:
                self._train(groups)
            else:
                self._skip()
        self._finish()


def _run(tmp: Path, model: Path, name: str, **overrides: Any) -> list[dict[str, Any]]:
    raw = job_config(tmp, model, name=name, **{"synchronizer.verify_checksums": False, **overrides})
    assert run_plan(resolve_run(parse_config(raw))) == 0
    return records(tmp / "ckpt" / "e2e" / name)


def _by_phase(logged: list[dict[str, Any]], phase: str) -> dict[int, dict[str, float]]:
    return {r["step"]: r["metrics"] for r in logged if r["phase"] == phase}


def test_offset_zero_matches_the_serial_loop(tmp_path: Path, tiny_model: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # one runner thread: the engine serves requests in one order, so its seeded sampling repeats exactly
    same = {"explorer.runner_per_model": 1}
    concurrent = _run(tmp_path, tiny_model, "concurrent", **same)
    monkeypatch.setattr(both_module, "BothLoop", SerialLoop)
    serial = _run(tmp_path, tiny_model, "serial", **same)

    for phase, keys in (("train", ("loss", "buffer/trained_staleness")),
                        ("explore", ("reward/mean", "explore/model_version"))):
        ours, theirs = _by_phase(concurrent, phase), _by_phase(serial, phase)
        assert sorted(ours) == sorted(theirs) == [1, 2, 3]
        for step in ours:
            for key in keys:
                assert ours[step][key] == theirs[step][key], (phase, step, key)
    # strictly on-policy: explorer step k ran on the weights of trainer step k - 1
    assert [m["explore/model_version"] for _, m in sorted(_by_phase(concurrent, "explore").items())] == [0, 1, 2]
    assert all(m["buffer/trained_staleness"] == 0 for m in _by_phase(concurrent, "train").values())


def test_offset_one_runs_one_batch_ahead_and_never_more(tmp_path: Path, tiny_model: Path) -> None:
    logged = _run(tmp_path, tiny_model, "ahead", **{"synchronizer.sync_offset": 1, "buffer.total_steps": 5})
    explore, train = _by_phase(logged, "explore"), _by_phase(logged, "train")
    assert sorted(train) == [1, 2, 3, 4, 5]
    versions = [explore[k]["explore/model_version"] for k in sorted(explore)]
    # step k may use weights one step older than on-policy (k - 2), never older
    assert versions == [0, 0, 1, 2, 3]
    assert [train[k]["buffer/trained_staleness"] for k in sorted(train)] == [0, 1, 1, 1, 1]
    order = [(r["phase"], r["step"]) for r in logged if r["phase"] in ("explore", "train")]
    assert order.index(("explore", 2)) < order.index(("train", 1)), "the explorer did not run ahead"
    # and for real at the same time: some rollout batch was running while a training step was
    rollouts = [(r["time"] - r["metrics"]["explore/time_s"], r["time"]) for r in logged if r["phase"] == "explore"]
    # a training step is logged after its sync, which first waits for the rollout batch in flight
    ends = [(r["time"] - r["metrics"].get("time/sync_s", 0.0) - r["metrics"].get("time/sync_wait_s", 0.0),
             r["metrics"]["step_time_s"]) for r in logged if r["phase"] == "train"]
    steps = [(end - took, end) for end, took in ends]
    assert any(a < d and c < b for a, b in rollouts for c, d in steps), "explorer and trainer never overlapped"


def test_staleness_control_drops_older_groups_and_the_run_finishes(tmp_path: Path, tiny_model: Path) -> None:
    logged = _run(tmp_path, tiny_model, "stale", **{
        "synchronizer.sync_offset": 1, "buffer.total_steps": 6,
        "algorithm.sample_strategy": "staleness_control",
        "algorithm.sample_strategy_args": {"max_staleness": 0},
    })
    train = _by_phase(logged, "train")
    assert train, "no training step ran"
    assert all(m["buffer/trained_staleness"] == 0 for m in train.values())
    assert max(m["buffer/stale_dropped_groups"] for m in train.values()) > 0
    assert (tmp_path / "ckpt" / "e2e" / "stale" / "checkpoints").is_dir()
