"""The kill harness: run ``trinity -v run --config`` as an operator does, SIGKILL part of it at seeded
points, and run the same command again until it ends 0.

A :class:`Job` is one command. Each run of it gets its own session (its local
Ray cluster with it), its own log file and a private Ray temp folder (so no
other ``trinity run`` on the machine joins a cluster this harness kills). A
:class:`FaultPoint` says what to kill and when: once the current run reached a
point (its log shows ``train step 3:``, or it logged explorer step 2 into the
run's metrics), ``delay`` seconds later. The targets are

* ``driver``: the run's whole process group, the local Ray cluster with it;
* ``trainer``: one trainer rank's process (a Ray ``FSDPWorker`` actor);
* ``engine``: one rollout engine's process (a Ray ``HFEngine`` actor).

Actor processes are found in the driver's process tree by the title Ray gives
them (``ray::FSDPWorker...``); with several, the seed picks one.
:func:`drive` runs one or more jobs at once, each with its own fault points.
Every failure message names the job, the seed and the run, and ends with the
run's log tail; a run that makes no progress fails at the job's time limit.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]
#: Ray process-title prefix of each actor target's class.
ACTOR_TITLES = {"trainer": "ray::FSDPWorker", "engine": "ray::HFEngine"}
#: Every target a fault point may name.
TARGETS = ("driver", *ACTOR_TITLES)
#: Runs of one job at most (the first and its reruns).
MAX_RUNS = 8
#: Seconds between two looks at the processes under each driver.
WATCH_S = 0.5
#: Seconds a run that ended by itself gives its processes to end before they count as left running.
REAP_GRACE_S = 10.0


class ChaosError(AssertionError):
    """A fault case went wrong: a run hung, ended early, or a target process was not found."""


@dataclass
class Run:
    """One run of a job: its process, log file, start time and what was killed in it."""

    log: Path
    process: subprocess.Popen[bytes]
    #: Wall-clock start (seconds since the epoch), to tell this run's metric rows from earlier runs'.
    started: float
    #: Pid -> start time of every process seen under the driver (they outlive a killed driver).
    tree: dict[int, float] = field(default_factory=dict)
    #: Targets killed in this run, in order.
    killed: list[str] = field(default_factory=list)
    #: Processes (pid and command line) still running after the driver ended (the harness killed them).
    left: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The run's output so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    @property
    def returncode(self) -> int | None:
        """The run's exit status; None while it runs."""
        return self.process.poll()


def _never(run: Run) -> bool:
    return False


@dataclass(frozen=True)
class FaultPoint:
    """SIGKILL ``target`` ``delay`` seconds after ``reached(run)`` first holds for the job's current run.

    The kill comes sooner when ``overtaken(run)`` holds first: the run already
    went past the next point of its kind (a later training step), so a slow
    harness or a fast run cannot carry the kill past the rest of the schedule.
    """

    target: str
    #: The point in words (for messages).
    label: str
    reached: Callable[[Run], bool]
    delay: float
    overtaken: Callable[[Run], bool] = _never

    def describe(self) -> str:
        """Return the fault point in words."""
        return f"SIGKILL {self.target} {self.delay:.2f} s after {self.label}"


_TRAIN_STEP = re.compile(r"train step (\d+): ")


def after_train_step(step: int, target: str, delay: float) -> FaultPoint:
    """Return the point after the current run's ``trinity -v`` log shows training step ``step`` or a later one.

    A later one: a run resumed from a checkpoint past ``step`` never logs ``step`` itself.
    """

    def reached(run: Run) -> bool:
        return any(int(found) >= step for found in _TRAIN_STEP.findall(run.text))

    def overtaken(run: Run) -> bool:
        return any(int(found) > step for found in _TRAIN_STEP.findall(run.text))

    return FaultPoint(target, f"train step {step}", reached, delay, overtaken)


def after_explore_step(step: int, metrics: Path, target: str, delay: float) -> FaultPoint:
    """Return the point after the current run wrote explorer step ``step``'s row into ``metrics``."""

    def reached(run: Run) -> bool:
        if not metrics.exists():
            return False
        for line in metrics.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line being written
            if row.get("phase") == "explore" and row.get("step") == step and row.get("time", 0) >= run.started:
                return True
        return False

    return FaultPoint(target, f"explore step {step}", reached, delay)


def draw_train_kills(
    rng: random.Random, targets: Sequence[str], first: int, last: int, max_delay: float = 1.0
) -> list[FaultPoint]:
    """Return one fault point per target, after distinct training steps drawn from ``first..last`` in rising order.

    Each kill lands at a later step than the one before, so every rerun
    trains further than the run it replaces and the job ends.
    """
    steps = sorted(rng.sample(range(first, last + 1), len(targets)))
    return [
        after_train_step(step, target, round(rng.uniform(0.0, max_delay), 2))
        for target, step in zip(targets, steps, strict=True)
    ]


class Job:
    """One ``trinity -v run --config`` command, run again after each failure until it ends 0."""

    def __init__(self, name: str, config_file: Path, logs: Path, seed: int, *, limit: float = 240.0) -> None:
        """``limit`` bounds the seconds the whole job may take, its reruns included."""
        self.name = name
        self.config_file = config_file
        self.logs = logs
        self.seed = seed
        self.limit = limit
        self.deadline = time.monotonic() + limit
        self.runs: list[Run] = []
        self.ray_tmp = Path(tempfile.mkdtemp(prefix="chaos-ray-"))  # short: Ray's socket paths must stay short
        logs.mkdir(parents=True, exist_ok=True)

    @property
    def current(self) -> Run:
        """The latest run."""
        return self.runs[-1]

    def fail(self, what: str, stacks: str = "") -> ChaosError:
        """Return the error saying ``what`` went wrong, with the job, seed, run, the run's log tail and ``stacks``."""
        tail = self.current.text[-4000:] if self.runs else ""
        history = "\n".join(self._run_summary(number, run) for number, run in enumerate(self.runs, 1))
        head = f"[{self.name}, seed {self.seed}, run {len(self.runs)}] {what}"
        where = f"\n--- where the run's processes were ---\n{stacks}" if stacks else ""
        return ChaosError(f"{head}\n--- runs ---\n{history}\n--- log tail ---\n{tail}{where}")

    @staticmethod
    def _run_summary(number: int, run: Run) -> str:
        steps = [int(found) for found in _TRAIN_STEP.findall(run.text)]
        logged = f"train steps {steps[0]}..{steps[-1]} logged" if steps else "no train step logged"
        return f"run {number}: {logged}; killed: {', '.join(run.killed) or 'nothing'}; exit {run.returncode}"

    def start(self) -> Run:
        """Start a run of the command in its own session and local Ray cluster, output to its own log."""
        if len(self.runs) >= MAX_RUNS:
            raise self.fail(f"the job did not end 0 in {MAX_RUNS} runs")
        log = self.logs / f"{self.name}-{len(self.runs) + 1}.log"
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "RAY_AUTH_MODE": "disabled",
            "RAY_ADDRESS": "local",
            "RAY_TMPDIR": str(self.ray_tmp),
        }
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "trinity.cli.main", "-v", "run", "--config", str(self.config_file)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                cwd=REPO,
            )
        self.runs.append(Run(log, process, time.time()))
        return self.current

    def watch(self) -> None:
        """Remember the processes under the current run's driver (a killed driver's cluster outlives it)."""
        run = self.current
        try:
            children = psutil.Process(run.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return
        for child in children:
            try:
                run.tree.setdefault(child.pid, child.create_time())
            except psutil.Error:
                continue

    def check_time(self) -> None:
        """Kill the current run and fail when the job ran past its limit (a hang, or no progress).

        The failure carries where the run's driver and actors were (py-spy's
        stacks of their Python threads), so a hang seen once says where it sits.
        """
        if time.monotonic() > self.deadline:
            stacks = self.stacks()
            self.stop()
            raise self.fail(f"the job did not end 0 within {self.limit:.0f} s", stacks)

    def stacks(self) -> str:
        """Return py-spy's dump of the current run's driver and actor processes ('' without py-spy)."""
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if not Path(spy).is_file():
            return ""
        try:
            root = psutil.Process(self.current.process.pid)
            processes = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return ""
        dumps = []
        for process in processes:
            try:
                title = " ".join(process.cmdline())[:80]
            except psutil.Error:
                continue
            if process is not root and not title.startswith(tuple(ACTOR_TITLES.values())):
                continue
            try:
                found = subprocess.run([spy, "dump", "--pid", str(process.pid)], capture_output=True, text=True,
                                       timeout=20, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                dumps.append(f"pid {process.pid} ({title}): no dump ({exc})")
                continue
            dumps.append(f"pid {process.pid} ({title}):\n{found.stdout or found.stderr}")
        return "\n".join(dumps)

    def kill(self, target: str) -> None:
        """SIGKILL ``target`` of the current run: its process group (``driver``) or one actor process."""
        run = self.current
        if target == "driver":
            self._kill_group()
        else:
            pid = self.actor_pid(target)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                raise self.fail(f"{target} process {pid} was gone before the kill") from None
        run.killed.append(target)

    def actor_pid(self, target: str) -> int:
        """Return the pid of one live ``target`` actor process of the current run (the seed picks among several)."""
        title = ACTOR_TITLES[target]
        end = time.monotonic() + 30
        while time.monotonic() < end:
            found = []
            try:
                children = psutil.Process(self.current.process.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                break
            for child in children:
                try:
                    if " ".join(child.cmdline()).startswith(title):
                        found.append(child.pid)
                except psutil.Error:
                    continue
            if found:
                return random.Random(f"{self.seed}-{len(self.runs)}-{target}").choice(sorted(found))
            time.sleep(0.1)
        raise self.fail(f"no {title} process under the driver")

    def _kill_group(self) -> None:
        """SIGKILL the current run's process group, wait for the driver, and kill what it left."""
        self.watch()
        run = self.current
        try:
            os.killpg(run.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        run.process.wait(30)
        self.reap()

    def reap(self, grace_s: float = 0.0) -> list[str]:
        """SIGKILL what the ended current run left running (seen under its driver, same start time); return them.

        Processes still shutting down get ``grace_s`` seconds to end by
        themselves first (a run that ended on its own: Ray reaps its workers
        after the driver returns). Each one killed is named by pid and command line.
        """
        deadline = time.monotonic() + grace_s
        while True:
            alive = []
            for pid, started in sorted(self.current.tree.items()):
                try:
                    process = psutil.Process(pid)
                    if process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE:
                        alive.append(process)
                except psutil.Error:
                    continue
            if not alive or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        left = []
        for process in alive:
            try:
                command = " ".join(process.cmdline())[:160]
                process.kill()
            except psutil.Error:
                continue
            left.append(f"{process.pid} ({command})")
        self.current.tree.clear()
        self.current.left.extend(left)
        return left

    def stop(self) -> None:
        """Kill the current run and all it left (the end of a failed case)."""
        if self.runs and self.current.returncode is None:
            self._kill_group()

    def close(self) -> None:
        """Stop the job and remove its private Ray temp folder."""
        self.stop()
        shutil.rmtree(self.ray_tmp, ignore_errors=True)


def drive(
    plan: Sequence[tuple[Job, Sequence[FaultPoint]]], on_kill: Callable[[str], None], poll_s: float = 0.05
) -> None:
    """Start every job, inject each job's fault points in order, and rerun each failed run until its job ends 0.

    ``on_kill(target)`` is called for every SIGKILL sent. Raises
    :class:`ChaosError` when a job ends 0 before all its fault points were
    reached, runs past its limit, or needs more than ``MAX_RUNS`` runs.
    """
    pending = {job: deque(points) for job, points in plan}
    armed: dict[Job, float] = {}  # job -> when its next point's delay is over
    for job, _ in plan:
        job.start()
    watched = 0.0
    try:
        while True:
            busy = False
            watch = time.monotonic() - watched > WATCH_S  # walking the process table costs CPU: not every poll
            watched = time.monotonic() if watch else watched
            for job, points in pending.items():
                job.check_time()
                if watch:
                    job.watch()
                code = job.current.returncode
                if code is not None:
                    job.reap(grace_s=REAP_GRACE_S)
                    armed.pop(job, None)
                    if code == 0:
                        if points:
                            raise job.fail(f"the job ended 0 before its fault point: {points[0].describe()}")
                        continue
                    job.start()
                busy = True
                if not points:
                    continue
                point = points[0]
                if job not in armed:
                    if point.reached(job.current):
                        armed[job] = time.monotonic() + point.delay
                elif time.monotonic() >= armed[job] or point.overtaken(job.current):
                    del armed[job]
                    job.kill(point.target)
                    points.popleft()
                    on_kill(point.target)
            if not busy:
                return
            time.sleep(poll_s)
    finally:
        for job, _ in plan:
            job.close()


def chaos_seeds(*fixed: int) -> list[int]:
    """Return the seeds a chaos case runs with: ``TRINITY_CHAOS_SEEDS=1,2,3`` when set, else ``fixed``."""
    chosen = os.environ.get("TRINITY_CHAOS_SEEDS")
    return [int(s) for s in chosen.split(",")] if chosen else list(fixed)


def one_line_failure(text: str) -> str | None:
    """Return why a failed run's output does not end in one ``trinity: error:`` line, or None when it does."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return "it printed nothing"
    if not lines[-1].startswith("trinity: error: "):
        return f"its last line is not a 'trinity: error:' line: {lines[-1][:300]!r}"
    if "Traceback (most recent call last)" in text:
        return "it printed a traceback"
    if len(lines[-1]) > 400:
        return f"its error line runs to {len(lines[-1])} characters"
    return None
