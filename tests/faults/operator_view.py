"""What an operator sees of a `trinity run`: the command in its own session, its exit status, its one line.

Every fault case starts the real command line in a subprocess (its own
session, so the local Ray cluster it starts can be found and killed), with a
private ``RAY_TMPDIR`` (so a run that started Ray is visible, and no run joins
another's cluster), and checks what an operator meets: the exit status, one
``trinity: error:`` line saying what, where and what to do, no traceback, and
no process of the run left behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.processes import session_pids

REPO = Path(__file__).resolve().parents[2]
SFT_DATA = REPO / "examples" / "data" / "sft" / "messages"
#: Where the fault-injecting ``sitecustomize`` lives (put first on a run's PYTHONPATH to arm it).
INJECTOR = Path(__file__).resolve().parent / "injector"


def sft_config(tmp: Path, model: Path, **overrides: Any) -> dict[str, Any]:
    """A mode ``train`` SFT job on the tiny model: one trainer rank, no engine, a checkpoint every step."""
    raw: dict[str, Any] = {
        "mode": "train",
        "project": "faults",
        "name": "sft",
        "checkpoint_root_dir": str(tmp / "ckpt"),
        "algorithm": {"algorithm_type": "sft", "optimizer": {"lr": 1e-3}},
        "model": {"model_path": str(model), "max_prompt_tokens": 96, "max_response_tokens": 32},
        "cluster": {"node_num": 1, "gpu_per_node": 1},
        "buffer": {
            "total_steps": 2,
            "train_batch_size": 4,
            "trainer_input": {
                "experience_buffer": {
                    "name": "sft_data",
                    "storage_type": "file",
                    "path": str(SFT_DATA),
                    "format": {"prompt_type": "messages", "messages_key": "messages"},
                }
            },
        },
        "trainer": {"save_interval": 1, "use_dynamic_bsz": False, "use_torch_compile": False},
        "monitor": {"progress": False, "plot": False, "monitor_type": "none"},
    }
    for dotted, value in overrides.items():
        node = raw
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return raw


def write_config(tmp: Path, raw: dict[str, Any], file: str = "job.yaml") -> Path:
    """Write ``raw`` as YAML to ``tmp/file`` and return its path."""
    import yaml

    path = tmp / file
    path.write_text(yaml.safe_dump(raw))
    return path


def start(
    config: Path, log: Path, *, ray_tmp: Path, env: dict[str, str] | None = None, verbose: bool = False
) -> subprocess.Popen[bytes]:
    """Start ``trinity [-v] run --config`` in its own session with Ray's files under ``ray_tmp``; output to ``log``."""
    ray_tmp.mkdir(parents=True, exist_ok=True)
    full_env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "RAY_AUTH_MODE": "disabled",
        "RAY_TMPDIR": str(ray_tmp),
        **(env or {}),
    }
    full_env.pop("RAY_ADDRESS", None)
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "trinity.cli.main", *(["-v"] if verbose else []), "run", "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
            cwd=REPO,
        )


def armed(env: dict[str, str], **faults: Any) -> dict[str, str]:
    """Return ``env`` with the fault injector first on PYTHONPATH and ``faults`` (see its module) set."""
    path = os.pathsep.join(p for p in (str(INJECTOR), os.environ.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": path, **{f"TRINITY_FAULT_{k.upper()}": json.dumps(v) for k, v in faults.items()}}


def finish(process: subprocess.Popen[bytes], log: Path, timeout: float = 300) -> tuple[int, str]:
    """Wait for ``process``; assert nothing of its session is left after it; return its status and whole log.

    Whatever is still running is SIGKILLed at the end, so a failed check leaves nothing behind either.
    """
    try:
        code = process.wait(timeout)
        deadline = time.monotonic() + 20
        while session_pids(process.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = session_pids(process.pid)
        assert left == [], f"the run left processes of its own behind: {left}"
        return code, log.read_text()
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(30)


def run(
    config: Path, log: Path, *, ray_tmp: Path, env: dict[str, str] | None = None, timeout: float = 300
) -> tuple[int, str]:
    """Run ``config`` to its end (see :func:`finish`); return its exit status and output."""
    return finish(start(config, log, ray_tmp=ray_tmp, env=env), log, timeout)


def one_error_line(output: str) -> str:
    """Return the single ``trinity: error:`` line of ``output``; assert it is the last line and no traceback shows."""
    assert "Traceback" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if line.startswith("trinity: error: ")]
    assert len(errors) == 1, f"expected one error line:\n{output[-3000:]}"
    assert output.rstrip().splitlines()[-1] == errors[0], output[-3000:]
    return errors[0]


def ray_started(ray_tmp: Path) -> bool:
    """Return True when a run with ``RAY_TMPDIR=ray_tmp`` started a Ray session."""
    return (ray_tmp / "ray").exists()


def train_steps(run_dir: Path) -> list[int]:
    """Return the steps of the ``train`` rows of ``<run_dir>/metrics.jsonl``, as written (resumes included)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [row["step"] for row in rows if row["phase"] == "train"]
