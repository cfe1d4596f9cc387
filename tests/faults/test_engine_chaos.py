"""Rollout engines SIGKILLed again and again at seeded points of one real ``trinity run``: nothing is lost.

Each case runs ``trinity -v run --config`` in mode both (real Ray, the tiny
model, an FSDP2 rank, online sync over gloo, strictly on-policy) and kills an
engine process (``ray::HFEngine``) a seeded moment after seeded training
steps, ten times. With one engine, its death leaves no engine to run the
batch's remaining tasks: they wait for the fresh engine. With two, they run
on the live one and the dead one is replaced after the batch. The run must
finish by itself (one run, exit 0) having trained every planned step on
every group the explorer was given: none dropped, none failed.
``TRINITY_CHAOS_SEEDS=1,2,3`` runs other seeds.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_run_both import job_config
from tests.faults.chaos import Job, after_train_step, chaos_seeds, drive
from tests.faults.ledger import FaultLedger
from trinity.monitor import load_records

STEPS = 30
KILLS = 10  # per case: 20 across the two cases


@pytest.mark.parametrize("engines", [1, 2], ids=lambda n: f"{n}-engine{'s' if n > 1 else ''}")
@pytest.mark.parametrize("seed", chaos_seeds(1), ids=lambda s: f"seed{s}")
def test_engines_killed_ten_times_lose_no_step_and_no_group(
    tmp_path: Path, tiny_model: Path, fault_ledger: FaultLedger, seed: int, engines: int
) -> None:
    rng = random.Random(seed * 100 + engines)
    # every other step at most (a fresh engine serves a whole step before it may be killed again), and none in
    # the last 8 steps: a kill there could land in the run's final teardown, where no engine is replaced
    kill_steps = sorted(rng.sample(range(1, STEPS - 8, 2), KILLS))
    points = [after_train_step(step, "engine", round(rng.uniform(0.0, 0.4), 2)) for step in kill_steps]
    schedule = "; ".join(p.describe() for p in points)
    fault_ledger.case(f"engine-kills-{engines}", seed=seed)
    raw = job_config(tmp_path, tiny_model, **{
        "buffer.total_steps": STEPS, "explorer.rollout_model.engine_num": engines,
        "cluster.gpu_per_node": engines + 1, "buffer.explorer_input.eval_tasksets": [],
        "explorer.eval_on_startup": False, "monitor.plot": False, "trainer.save_interval": 0,
        "model.max_response_tokens": 48,  # rollouts take most of a step: many kills land in the middle of one
    })
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump(raw))
    job = Job(f"engine-kills-{engines}", config, tmp_path / "logs", seed, limit=900)
    drive([(job, points)], fault_ledger.kill)

    rows = load_records(tmp_path / "ckpt" / "e2e" / "run" / "metrics.jsonl")
    trained = [r.step for r in rows if r.phase == "train"]
    explored = [r.metrics for r in rows if r.phase == "explore"]
    fault_ledger.lost(STEPS - len(set(trained)))
    summary = (f"seed {seed}, {engines} engine(s) ({schedule}): {len(job.runs)} run(s), exit "
               f"{[run.returncode for run in job.runs]}, trained {len(set(trained))}/{STEPS} steps, dropped groups "
               f"{sum(m.get('explore/dropped_groups', 0) for m in explored):g}, failed tasks "
               f"{sum(m.get('explore/failed', 0) for m in explored):g}, engine deaths met "
               f"{sum(m.get('explore/engine_lost_attempts', 0) for m in explored):g} attempt(s)")
    print(summary)
    assert len(job.runs) == 1 and job.runs[0].returncode == 0, summary
    assert trained == list(range(1, STEPS + 1)), summary
    assert all(m.get("explore/dropped_groups", 0) == 0 and m.get("explore/failed", 0) == 0 for m in explored), summary
    assert sum(len(run.killed) for run in job.runs) == KILLS
    starts = job.runs[0].text.count("starting a fresh one in its place")
    assert starts == KILLS, f"{starts} fresh engines started for {KILLS} kills; {summary}"
    train_rows = [r.metrics for r in rows if r.phase == "train"]
    assert all(m["rows"] == 8 for m in train_rows), summary  # 2 tasks x 4 rollouts in every step
