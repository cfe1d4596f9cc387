"""The trinity-vs-TRL benchmark: its trinity config is a valid run of the set knobs, and it needs TRL by name."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "bench_vs_trl.py"


def _bench() -> object:
    spec = importlib.util.spec_from_file_location("bench_vs_trl", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def test_without_trl_the_benchmark_stops_with_one_line() -> None:
    hide = (
        "import runpy, sys; sys.modules['trl'] = None; sys.argv = ['bench_vs_trl.py', '--rounds', '1']; "
        f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-c", hide], capture_output=True, text=True, cwd=REPO, check=False, timeout=120
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "TRL is not installed" in lines[0] and 'pip install -e ".[bench]"' in lines[0]


@pytest.mark.parametrize("name", ["quickstart", "5m"])
def test_the_trinity_side_runs_the_quickstart_with_the_setups_knobs(tmp_path: Path, name: str) -> None:
    from trinity.common.config import load_config
    from trinity.planner.run import resolve_run

    bench = _bench()
    setup = bench.SETUPS[name]  # type: ignore[attr-defined]
    path = bench._trinity_config(setup, tmp_path / "model", tmp_path, "run", steps=7, offset=1)  # type: ignore[attr-defined]
    plan = resolve_run(load_config(path))
    assert plan.mode == "both" and plan.buffer.total_steps == 7 and plan.sync.offset == 1
    assert plan.config.algorithm.repeat_times == setup.group and plan.buffer.batch_size == setup.prompts
    assert plan.config.model.max_response_tokens == setup.max_new_tokens
    assert plan.config.algorithm.optimizer.lr == setup.lr
    assert not plan.buffer.eval_tasksets and plan.trainer.save_interval == 0
    assert plan.buffer.experience is not None and plan.buffer.experience.kind == "queue"


def test_each_arm_is_its_devices_and_offset(tmp_path: Path) -> None:
    from trinity.common.config import load_config
    from trinity.planner.run import resolve_run

    bench = _bench()
    setup = bench.SETUPS["quickstart"]  # type: ignore[attr-defined]
    for arm, (devices, offset) in bench.ARMS.items():  # type: ignore[attr-defined]
        path = bench._trinity_config(setup, tmp_path / "model", tmp_path, arm, steps=5, offset=offset,  # type: ignore[attr-defined]
                                     devices=devices)
        plan = resolve_run(load_config(path))
        assert (plan.cluster.devices_per_node, plan.sync.offset) == (devices, offset), arm
    assert bench.ARMS["colocate"] == (1, 0)  # type: ignore[attr-defined]


def test_processes_of_a_run_are_told_apart_by_role() -> None:
    bench = _bench()
    role = bench._role  # type: ignore[attr-defined]
    assert role(["python", "-m", "trinity.cli.main", "run"], 10, 10) == "driver"
    assert role(["ray::FSDPWorker.train_step"], 10, 11) == "trainer"
    assert role(["ray::HFEngine.generate_tokens"], 10, 12) == "engine"
    assert role(["/venv/bin/raylet", "--node_id"], 10, 13) == "ray"
