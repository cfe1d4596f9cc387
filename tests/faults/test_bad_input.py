"""Failures the user causes, met through `trinity run` before Ray starts: one line, exit 2, in seconds.

Each case gives the command one thing wrong (the model, the task file, the
Ray address, the run folder) and checks what an operator sees: exit status 2,
a single ``trinity: error:`` line naming what is wrong and where and saying
what to do, no traceback, no Ray started and nothing left running.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_run_both import job_config
from tests.faults.ledger import FaultLedger
from tests.faults.operator_view import one_error_line, ray_started, run, sft_config, write_config
from tests.listeners import http_listener

#: Found before Ray starts, a failure costs about the command's start-up time.
FAST_S = 15.0


@pytest.fixture(scope="module")
def web_server() -> Iterator[str]:
    """Yield ``host:port`` of a listener that answers every connection like an HTTP/1 web server (not Ray)."""
    with http_listener() as address:
        yield address


def _broken_tasks(tmp: Path) -> Path:
    tasks = tmp / "tasks.jsonl"
    tasks.write_text('{"question": "a", "answer": "a"}\n{"question": "b", "answer": \n', encoding="utf-8")
    return tasks


def _not_a_model(tmp: Path) -> Path:
    folder = tmp / "config-only"
    folder.mkdir()
    (folder / "config.json").write_text("{}", encoding="utf-8")
    return folder


#: name -> (config from (tmp, model, web server), fragments the line must hold). Every line also says what to do.
CASES: dict[str, tuple[Callable[[Path, Path, str], dict[str, Any]], tuple[str, ...]]] = {
    "model-path-missing": (
        lambda tmp, model, _: sft_config(tmp, model, **{"model.model_path": str(tmp / "no-such-model")}),
        ("model.model_path", "no-such-model", "does not exist"),
    ),
    "model-path-not-a-model": (
        lambda tmp, model, _: sft_config(tmp, model, **{"model.model_path": str(_not_a_model(tmp))}),
        ("model.model_path: ", "config-only", "not a complete Hugging Face model folder"),
    ),
    "task-file-missing": (
        lambda tmp, model, _: job_config(
            tmp,
            model,
            **{
                "buffer.explorer_input.taskset.path": str(tmp / "gone.jsonl"),
                "buffer.explorer_input.eval_tasksets": [],
            },
        ),
        ("buffer.explorer_input.taskset", "gone.jsonl"),
    ),
    "task-file-broken-line": (
        lambda tmp, model, _: job_config(
            tmp,
            model,
            **{
                "buffer.explorer_input.taskset.path": str(_broken_tasks(tmp)),
                "buffer.explorer_input.eval_tasksets": [],
            },
        ),
        ("buffer.explorer_input.taskset: ", "tasks.jsonl cannot be read (line 2 is not valid JSON"),
    ),
    "address-not-ray": (
        lambda tmp, model, web: sft_config(tmp, model, **{"cluster.ray_address": web}),
        ("no Ray cluster answers at ", "it is not a Ray cluster", "cluster.ray_address"),
    ),
    "ray-client-address-not-ray": (
        lambda tmp, model, web: sft_config(tmp, model, **{"cluster.ray_address": f"ray://{web}"}),
        ("no Ray cluster answers at 'ray://", "it is not a Ray client server", "cluster.ray_address"),
    ),
    "run-folder-not-writable": (
        lambda tmp, model, _: sft_config(tmp, model, checkpoint_root_dir=str(tmp / "read-only")),
        ("cannot lock the run folder", "read-only", "checkpoint_root_dir"),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_and_exit_2_before_ray(  # noqa: PLR0917 - fixtures
    case: str,
    tmp_path: Path,
    tiny_model: Path,
    web_server: str,
    ray_tmp: Path,
    fault_ledger: FaultLedger,
    read_only: Callable[[Path], int],
) -> None:
    fault_ledger.case(case)
    make, fragments = CASES[case]
    if case == "run-folder-not-writable":
        fragments = (*fragments[:1], os.strerror(read_only(tmp_path / "read-only")), *fragments[2:])
    config = write_config(tmp_path, make(tmp_path, tiny_model, web_server))
    begin = time.monotonic()
    code, output = run(config, tmp_path / "run.log", ray_tmp=ray_tmp, timeout=60)
    took = time.monotonic() - begin
    line = one_error_line(output)
    assert code == 2, output
    for fragment in fragments:
        assert fragment in line, line
    assert not ray_started(ray_tmp), "the failure must be found before Ray starts"
    assert took < FAST_S, f"took {took:.1f} s"
