"""SIGTERM and SIGINT in a process running ``trinity.cli.main.main``: the first stops it like Ctrl-C (exit 143
for SIGTERM, 130 for SIGINT), a second one during that stop ends the process at once.

Each case runs a small Python program in a subprocess, so the signals reach a real process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: A ``trinity`` whose command blocks: it writes "ready", then waits; its teardown takes 30 s ("slow").
PROGRAM = r"""
import sys, time
import trinity.cli.main as cli
from trinity.utils import stop

def blocking(args):
    if "cluster-gone" in sys.argv:  # the session's probe finds Ray gone, as after a job-wide signal
        stop.watch_cluster(lambda: False, lambda: "its newest checkpoint is step 7 (/runs/x/checkpoints/step-7)")
    try:
        print("ready", flush=True)
        time.sleep(60)
    finally:
        if "slow" in sys.argv:
            print("tearing down", flush=True)
            time.sleep(30)
    return 0

def register(commands, common):
    commands.add_parser("block", parents=[common]).set_defaults(handler=blocking)

cli.COMMANDS = (*cli.COMMANDS, register)
sys.exit(cli.main(["block"]))
"""


def _start(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-c", PROGRAM, *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    return process


@pytest.mark.parametrize(("sig", "code", "line"), [(signal.SIGTERM, 143, "terminated (SIGTERM)"),
                                                   (signal.SIGINT, 130, "interrupted")])
def test_first_signal_stops_the_command_with_its_exit_status(sig: int, code: int, line: str) -> None:
    process = _start()
    process.send_signal(sig)
    _, err = process.communicate(timeout=30)
    assert process.returncode == code
    assert err.strip() == f"trinity: error: {line}"


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT])
def test_second_signal_during_the_stop_ends_at_once(second: int) -> None:
    process = _start("slow")
    assert process.stdout is not None
    process.send_signal(signal.SIGTERM)
    assert process.stdout.readline().strip() == "tearing down"
    started = time.monotonic()
    process.send_signal(second)
    _, err = process.communicate(timeout=20)
    assert time.monotonic() - started < 10, "the second signal must not wait for the teardown"
    assert process.returncode == 128 + second
    assert f"{signal.Signals(second).name} again: exiting at once" in err



def test_a_stop_signal_that_took_the_cluster_with_it_ends_the_command_at_once() -> None:
    process = _start("slow", "cluster-gone")
    begun = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=20)
    assert process.returncode == 143 and time.monotonic() - begun < 5  # not the 30 s teardown
    (line,) = err.strip().splitlines()
    assert line.startswith("trinity: error: SIGTERM reached the whole job: Ray's processes stopped with the driver")
    assert "its newest checkpoint is step 7 (/runs/x/checkpoints/step-7)" in line and "SIGUSR1" in line


def test_the_early_warning_signal_asks_for_a_save_and_stop_without_raising() -> None:
    from trinity.utils import stop

    stop.reset()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    try:
        stop.install()
        assert not stop.requested() and not stop.signalled()
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.05)
        assert stop.requested() and stop.signalled()
        stopped = stop.terminated()
        assert (stopped.name, stopped.exit_code) == ("SIGUSR1", 138)
    finally:
        stop.reset()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
