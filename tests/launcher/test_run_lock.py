"""The run folder's role locks, held by real separate processes (flock locks are per process)."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from trinity.common.config import Config
from trinity.common.config.plan.run import RunPlan
from trinity.errors import EXIT_USAGE
from trinity.launcher.run_lock import (
    Owner,
    RunFolderBusyError,
    RunFolderLockError,
    is_lock_file,
    lock_path,
    lock_run_folder,
)
from trinity.launcher.session import fresh_run_dir
from trinity.utils.flock import try_lock

HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from trinity.launcher.run_lock import lock_run_folder
    lock_run_folder(Path(sys.argv[1]), sys.argv[2])
    print("held", flush=True)
    sys.stdin.read()
""")


class Holder:
    """Another process holding the locks of ``mode`` on ``run_dir`` until stopped."""

    def __init__(self, run_dir: Path, mode: str) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        self.process = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(run_dir), mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline() == b"held\n"

    def stop(self, sig: int | None = None) -> None:
        if sig is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
        else:
            self.process.send_signal(sig)
        self.process.wait(10)


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    started: list[Holder] = []
    yield started
    for holder in started:
        if holder.process.poll() is None:
            holder.stop(signal.SIGKILL)


def test_a_second_run_is_refused_naming_the_owner(tmp_path: Path, holders: list[Holder]) -> None:
    run_dir = tmp_path / "proj" / "run"
    holders.append(Holder(run_dir, "both"))
    with pytest.raises(RunFolderBusyError) as refused:
        lock_run_folder(run_dir, "both")
    message = str(refused.value)
    assert refused.value.exit_code == EXIT_USAGE
    assert f"pid {holders[0].process.pid} on host {socket.gethostname()} (mode both, since " in message
    assert str(run_dir) in message and "`name`" in message and "\n" not in message


@pytest.mark.parametrize(
    ("held", "wanted"),
    [("explore", "explore"), ("train", "train"), ("both", "explore"), ("explore", "both"), ("bench", "bench")],
)
def test_roles_that_overlap_are_refused(tmp_path: Path, holders: list[Holder], held: str, wanted: str) -> None:
    holders.append(Holder(tmp_path, held))
    with pytest.raises(RunFolderBusyError, match=f"mode {held}"):
        lock_run_folder(tmp_path, wanted)
    # nothing half-taken stays behind: once the holder is gone, the whole set can be taken
    holders[0].stop()
    lock_run_folder(tmp_path, wanted).release()


@pytest.mark.parametrize("held", ["train", "explore", "both"])
def test_a_bench_job_evaluates_beside_the_folders_other_jobs(tmp_path: Path, holders: list[Holder], held: str) -> None:
    holders.append(Holder(tmp_path, held))
    with lock_run_folder(tmp_path, "bench"):
        bench = Owner.parse(lock_path(tmp_path, "bench").read_text())
        assert bench is not None and bench.mode == "bench"
    assert lock_path(tmp_path, "bench").read_text() == ""


def test_explore_and_train_share_a_folder(tmp_path: Path, holders: list[Holder]) -> None:
    holders.append(Holder(tmp_path, "explore"))
    with lock_run_folder(tmp_path, "train"):
        train = Owner.parse(lock_path(tmp_path, "train").read_text())
        explore = Owner.parse(lock_path(tmp_path, "explore").read_text())
        assert train is not None and (train.pid, train.host, train.mode) == (os.getpid(), socket.gethostname(), "train")
        assert explore is not None and (explore.pid, explore.mode) == (holders[0].process.pid, "explore")


def test_a_killed_owner_is_taken_over_with_a_warning(
    tmp_path: Path, holders: list[Holder], caplog: pytest.LogCaptureFixture
) -> None:
    holders.append(Holder(tmp_path, "both"))
    dead = holders[0].process.pid
    holders[0].stop(signal.SIGKILL)
    with caplog.at_level(logging.WARNING, logger="trinity.launcher"):
        lock = lock_run_folder(tmp_path, "train")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"taking over the train lock left by pid {dead} on host" in warnings[0]
    assert json.loads(lock_path(tmp_path, "train").read_text())["pid"] == os.getpid()
    lock.release()


def test_a_cleanly_released_lock_leaves_no_record_and_no_warning(
    tmp_path: Path, holders: list[Holder], caplog: pytest.LogCaptureFixture
) -> None:
    holders.append(Holder(tmp_path, "both"))
    holders[0].stop()
    assert lock_path(tmp_path, "explore").read_text() == ""
    with caplog.at_level(logging.WARNING, logger="trinity.launcher"):
        lock_run_folder(tmp_path, "both").release()
    assert not caplog.records


def test_locks_are_reentrant_within_a_process_and_released_by_the_last_holder(tmp_path: Path) -> None:
    outer = lock_run_folder(tmp_path, "stages", roles=("explore", "train"))
    inner = lock_run_folder(tmp_path, "explore")
    inner.release()
    assert try_lock(lock_path(tmp_path, "explore")) is None, "the outer holder still holds the explore role"
    outer.release()
    fd = try_lock(lock_path(tmp_path, "explore"))
    assert fd is not None
    os.close(fd)


def test_an_unwritable_folder_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(RunFolderLockError, match="cannot lock the run folder") as failed:
        lock_run_folder(blocker / "run", "both")
    assert failed.value.exit_code == EXIT_USAGE


def test_lock_files_do_not_make_a_run_folder_look_used(tmp_path: Path) -> None:
    from tests.plans import make_plan

    plan = make_plan({"checkpoint_root_dir": str(tmp_path), "continue_from_checkpoint": False})
    lock_run_folder(plan.run_dir, "both").release()
    lock_run_folder(plan.run_dir, "bench").release()
    assert all(is_lock_file(entry) for entry in plan.run_dir.iterdir())
    assert fresh_run_dir(plan).run_dir == plan.run_dir
    (plan.run_dir / "metrics.jsonl").write_text("{}\n")
    assert fresh_run_dir(plan).run_dir != plan.run_dir


def _stages_config(tmp_path: Path) -> Config:
    from tests.plans import make_config

    return make_config(
        {
            "checkpoint_root_dir": str(tmp_path),
            "model.model_path": str(tmp_path / "model"),
            "stages": [{"stage_name": "one"}, {"stage_name": "two", "mode": "train"}],
        }
    )


def test_a_stages_run_holds_its_folder_from_the_first_stage_to_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trinity.launcher import modes, stages
    from trinity.planner.run import run_dir_of

    config = _stages_config(tmp_path)
    top = run_dir_of(config)
    seen: list[tuple[str, bool]] = []

    def run_plan(plan: RunPlan) -> int:
        assert plan.stage is not None
        fd = try_lock(lock_path(top, "explore"))
        seen.append((plan.stage[2], fd is None))
        if fd is not None:
            os.close(fd)
        return 0

    monkeypatch.setattr(modes, "run_plan", run_plan)
    monkeypatch.setattr(stages, "final_model", lambda plan: None)
    assert stages.run_stages(config) == 0
    assert seen == [("one", True), ("two", True)], "the top folder stays locked through every stage"
    fd = try_lock(lock_path(top, "train"))
    assert fd is not None, "and is let go after the last"
    os.close(fd)


def test_a_second_stages_run_is_refused_before_its_first_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, holders: list[Holder]
) -> None:
    from trinity.launcher import modes, stages
    from trinity.planner.run import run_dir_of

    config = _stages_config(tmp_path)
    holders.append(Holder(run_dir_of(config), "train"))
    monkeypatch.setattr(modes, "run_plan", lambda plan: pytest.fail("no stage may start"))
    with pytest.raises(RunFolderBusyError, match="mode train"):
        stages.run_stages(config)
    assert not (run_dir_of(config) / stages.STAGES_FILE).exists()
