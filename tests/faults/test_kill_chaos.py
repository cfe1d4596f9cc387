"""SIGKILLs of the driver, a trainer rank and a rollout engine at seeded points of real ``trinity run`` jobs.

Each case runs ``trinity -v run --config`` as an operator does (real Ray, the
tiny model, FSDP2 ranks and online weight sync over gloo, a SQLite buffer),
kills part of it at points drawn from ``random.Random(seed)``, runs the same
command again until it ends 0, then checks the invariants of
:mod:`tests.faults.invariants` across all runs. The seed is in the test id and
in every failure message; ``TRINITY_CHAOS_SEEDS=1,2,3`` runs other seeds.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_run_both import job_config
from tests.faults import invariants
from tests.faults.chaos import (
    TARGETS,
    Job,
    after_explore_step,
    after_train_step,
    chaos_seeds,
    draw_train_kills,
    drive,
    one_line_failure,
)
from tests.faults.ledger import FaultLedger

GROUP_SIZE = 4  # algorithm.repeat_times
GROUPS_PER_BATCH = 2  # buffer.batch_size


def _write(tmp: Path, name: str, raw: dict) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _both_config(tmp: Path, model: Path, *, steps: int, sync_offset: int, trainer_ranks: int) -> dict:
    """Mode both on a SQLite buffer, two engines, a checkpoint every 2 steps, checksums after every sync."""
    return job_config(
        tmp,
        model,
        **{
            "buffer.total_steps": steps,
            "trainer.save_interval": 2,
            "cluster.gpu_per_node": trainer_ranks + 2,
            "explorer.rollout_model.engine_num": 2,
            "synchronizer.sync_offset": sync_offset,
            "synchronizer.verify_checksums": True,
            "buffer.explorer_input.eval_tasksets": [],
            "explorer.eval_on_startup": False,
            "monitor.plot": False,
            "buffer.trainer_input.experience_buffer": {
                "name": "experience",
                "storage_type": "sql",
                "max_read_timeout": 120.0,
            },
        },
    )


def _check_runs(job: Job) -> list[str]:
    """Return how the job's runs that failed on their own (not a killed driver) broke "one line, nothing left"."""
    problems = []
    for number, run in enumerate(job.runs, 1):
        if "driver" in run.killed or run.returncode == 0:
            continue
        why = one_line_failure(run.text)
        if why is not None:
            problems.append(f"run {number} (killed {run.killed}) ended {run.returncode}, but {why}")
    for number, run in enumerate(job.runs, 1):
        if "driver" not in run.killed and run.left:
            problems.append(f"run {number} ended {run.returncode} and left processes running: {run.left}")
    return problems


def _report(seed: int, schedule: str, problems: list[str]) -> str:
    return f"seed {seed} ({schedule}):\n  " + "\n  ".join(problems)


def _kill_both_mode(
    tmp: Path,
    model: Path,
    ledger: FaultLedger,
    seed: int,
    *,
    case: str,
    sync_offset: int,
    kills: int,
    trainer_ranks: int,
    steps: int,
) -> None:
    rng = random.Random(seed)
    targets = rng.sample(TARGETS, kills)
    points = draw_train_kills(rng, targets, first=1, last=steps - 3)
    schedule = "; ".join(p.describe() for p in points)
    ledger.case(case, seed=seed)
    config = _write(
        tmp, "job", _both_config(tmp, model, steps=steps, sync_offset=sync_offset, trainer_ranks=trainer_ranks)
    )
    run_dir = tmp / "ckpt" / "e2e" / "run"
    job = Job(case, config, tmp / "logs", seed, limit=300)
    drive([(job, points)], ledger.kill)

    logs = [run.text for run in job.runs]
    lost = invariants.steps_lost(run_dir, steps)
    ledger.lost(lost)
    problems = _check_runs(job)
    problems += invariants.step_problems(run_dir, steps, checksums=True)
    problems += invariants.resume_problems(logs)
    problems += invariants.group_problems(run_dir, logs, steps * GROUPS_PER_BATCH, GROUP_SIZE)
    problems += invariants.checkpoint_problems(run_dir)
    assert lost == 0 and not problems, _report(seed, schedule, [*problems, f"steps lost: {lost}"])
    assert sum(len(run.killed) for run in job.runs) == kills


@pytest.mark.parametrize("seed", chaos_seeds(1), ids=lambda s: f"seed{s}")
def test_driver_trainer_rank_and_engine_killed_in_async_mode_both(
    tmp_path: Path,
    tiny_model: Path,
    fault_ledger: FaultLedger,
    seed: int,
) -> None:
    """Mode both, explorer one batch ahead (``sync_offset: 1``), SQLite buffer, 2 trainer ranks, 2 engines.

    Killed, in a seed-chosen order and after seed-chosen training steps: the
    driver (its process group, the local cluster with it), one trainer rank's
    process and one engine's process; the same command is rerun after each
    failure. Asserted: steps 1..8 trained once each in the effective history
    and none lost, each run resumed right after its checkpoint, every
    explored group trained exactly once and stored once in SQLite, every
    checkpoint left intact, engine weights equal to the trainer's after every
    sync, and a run that failed on its own ended with one line and left
    nothing running.
    """
    _kill_both_mode(
        tmp_path,
        tiny_model,
        fault_ledger,
        seed,
        case="kill-async-both",
        sync_offset=1,
        kills=3,
        trainer_ranks=2,
        steps=8,
    )


@pytest.mark.parametrize("seed", chaos_seeds(1), ids=lambda s: f"seed{s}")
def test_two_of_driver_trainer_and_engine_killed_in_serial_mode_both(
    tmp_path: Path,
    tiny_model: Path,
    fault_ledger: FaultLedger,
    seed: int,
) -> None:
    """Mode both, explorer and trainer in turn (``sync_offset: 0``), SQLite buffer, 1 trainer rank, 2 engines.

    Killed: two seed-chosen targets of driver, trainer rank and engine, after
    seed-chosen training steps, the command rerun after each failure. Asserted:
    the same invariants as the async case.
    """
    _kill_both_mode(
        tmp_path,
        tiny_model,
        fault_ledger,
        seed,
        case="kill-serial-both",
        sync_offset=0,
        kills=2,
        trainer_ranks=1,
        steps=6,
    )


@pytest.mark.parametrize("seed", chaos_seeds(1), ids=lambda s: f"seed{s}")
def test_explore_and_train_jobs_killed_while_sharing_a_sqlite_buffer(
    tmp_path: Path,
    tiny_model: Path,
    fault_ledger: FaultLedger,
    seed: int,
) -> None:
    """A mode ``explore`` job and a mode ``train`` job at once on one run folder and SQLite buffer.

    Killed: the train job's driver after a seed-chosen training step and the
    explore job's driver a seed-chosen moment after a seed-chosen explorer
    step (each job's process group, its own local cluster with it); each job
    is rerun until it ends 0. Asserted: steps 1..8 trained once each and none
    lost, each train run resumed right after its checkpoint, every explored
    group trained exactly once and stored once in SQLite (none explored
    twice, none lost), every explorer step recorded once, every checkpoint
    intact.
    """
    steps = 8
    rng = random.Random(seed)
    ledger = fault_ledger
    ledger.case("kill-explore-train-jobs", seed=seed)
    run_dir = tmp_path / "ckpt" / "e2e" / "run"
    common = {
        "buffer.total_steps": steps,
        "cluster.gpu_per_node": 1,
        "buffer.explorer_input.eval_tasksets": [],
        "monitor.plot": False,
        "trainer.save_interval": 2,
        "buffer.trainer_input.experience_buffer": {
            "name": "experience",
            "storage_type": "sql",
            "max_read_timeout": 120.0,
        },
    }
    explore = Job(
        "explore",
        _write(tmp_path, "explore", job_config(tmp_path, tiny_model, mode="explore", **common)),
        tmp_path / "logs",
        seed,
        limit=300,
    )
    train = Job(
        "train",
        _write(tmp_path, "train", job_config(tmp_path, tiny_model, mode="train", **common)),
        tmp_path / "logs",
        seed,
        limit=300,
    )
    # a step of either job takes about 0.1 s here: the kills land within a step or two of their points
    train_kill = after_train_step(rng.randint(1, steps - 4), "driver", round(rng.uniform(0.0, 0.15), 2))
    explore_kill = after_explore_step(
        rng.randint(1, steps - 4), run_dir / "metrics.jsonl", "driver", round(rng.uniform(0.0, 0.1), 2)
    )
    schedule = f"train: {train_kill.describe()}; explore: {explore_kill.describe()}"
    drive([(train, [train_kill]), (explore, [explore_kill])], ledger.kill)

    train_logs = [run.text for run in train.runs]
    lost = invariants.steps_lost(run_dir, steps)
    ledger.lost(lost)
    problems = _check_runs(train) + _check_runs(explore)
    problems += invariants.step_problems(run_dir, steps, checksums=False)
    problems += invariants.resume_problems(train_logs)
    problems += invariants.group_problems(run_dir, train_logs, steps * GROUPS_PER_BATCH, GROUP_SIZE)
    problems += invariants.checkpoint_problems(run_dir)
    from trinity.monitor import load_records

    explored = [r.step for r in load_records(run_dir / "metrics.jsonl") if r.phase == "explore"]
    if explored != list(range(1, steps + 1)):
        problems.append(f"explorer steps in metrics.jsonl: {explored}")
    assert lost == 0 and not problems, _report(seed, schedule, [*problems, f"steps lost: {lost}"])


@pytest.mark.parametrize("seed", chaos_seeds(1), ids=lambda s: f"seed{s}")
def test_driver_and_trainer_rank_killed_while_replaying_experiences(
    tmp_path: Path,
    tiny_model: Path,
    fault_ledger: FaultLedger,
    seed: int,
) -> None:
    """Mode both with experience replay (``decay_limit_randomization``, at most 2 uses per group, no cooldown).

    ``explorer_driven`` lets the trainer take steps of replayed groups while
    the explorer rolls out, so the number of steps depends on timing. Killed:
    the driver and one trainer rank after seed-chosen training steps, the
    command rerun after each failure. Asserted: in the effective history every
    explored group is trained at least once and at most twice, the replay
    pool's file records exactly those uses (the pool rolled back to each
    checkpoint), the train records are steps 1..N once each with the last
    checkpoint at N, each run resumed right after its checkpoint, and every
    checkpoint is intact.
    """
    steps, limit = 6, 2
    rng = random.Random(seed)
    points = draw_train_kills(rng, ["driver", "trainer"], first=1, last=steps - 2)
    schedule = "; ".join(p.describe() for p in points)
    fault_ledger.case("kill-replay-both", seed=seed)
    raw = _both_config(tmp_path, tiny_model, steps=steps, sync_offset=0, trainer_ranks=2)
    raw["synchronizer"]["sync_style"] = "explorer_driven"
    raw["buffer"]["trainer_input"]["experience_buffer"]["replay_buffer"] = {
        "enable": True, "priority_fn": "decay_limit_randomization", "reuse_cooldown_time": 0,
        "priority_fn_args": {"use_count_limit": limit},
    }
    run_dir = tmp_path / "ckpt" / "e2e" / "run"
    job = Job("kill-replay-both", _write(tmp_path, "job", raw), tmp_path / "logs", seed, limit=300)
    drive([(job, points)], fault_ledger.kill)

    logs = [run.text for run in job.runs]
    history = invariants.effective_groups(logs)
    total = max(history)
    trained = [g for groups in history.values() for g in groups]
    fault_ledger.replay_uses("kill-replay-both", [trained.count(g) for g in set(trained)], limit)
    problems = _check_runs(job)
    problems += invariants.step_problems(run_dir, total, checksums=False)  # syncs follow the explorer's asks
    problems += invariants.resume_problems(logs)
    problems += invariants.replay_problems(run_dir, logs, steps * GROUPS_PER_BATCH, limit)
    problems += invariants.checkpoint_problems(run_dir)
    assert not problems, _report(seed, schedule, problems)
    assert sum(len(run.killed) for run in job.runs) == 2
