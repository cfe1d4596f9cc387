"""How many Trinity-RFT configs ``trinity run --dry-run`` accepts, and how fast it answers.

Runs ``trinity run --config F --dry-run`` as a user does (one subprocess per
file, the installed console script) over every YAML file under the given
folders (default: this repository's ``examples/``). Point it at a checkout of
upstream Trinity-RFT's ``examples/`` to measure compatibility::

    python benchmarks/bench_dry_run.py ~/Trinity-RFT/examples --markdown

Upstream's example READMEs ask for a few environment variables; unless they
are set already, the script sets them to placeholder hub ids and paths
(``TRINITY_TASKSET_PATH`` and friends, see ``PLACEHOLDERS``), which a dry run
accepts with a warning because nothing is downloaded. Relative paths in the
configs resolve against the current directory, as in ``trinity run``.

Reported: how many files pass, the wall time per file (min / median / max,
process start included), and per failing file the first line of its message.
``--markdown`` prints the table docs/compatibility.md carries.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PLACEHOLDERS = {
    "TRINITY_TASKSET_PATH": "openai/gsm8k",
    "TRINITY_SFT_DATASET_PATH": "open-r1/sft",
    "TRINITY_BUFFER_PATH": "./buffer",
    "TRINITY_MODEL_PATH": "Qwen/Qwen2.5-1.5B-Instruct",
    "OPENAI_BASE_URL": "https://api.example.com/v1",  # bench/external_model's README asks for the endpoint
}


@dataclass(frozen=True)
class Outcome:
    """One file's dry run."""

    path: Path
    ok: bool
    seconds: float
    message: str


def _trinity() -> list[str]:
    """Return the command that starts the CLI (the console script next to this Python)."""
    script = Path(sys.executable).with_name("trinity")
    if script.exists():
        return [str(script)]
    found = shutil.which("trinity")
    if found is None:
        sys.exit("bench_dry_run: the `trinity` command is not installed; run `pip install -e .` first")
    return [found]


def dry_run(path: Path, env: dict[str, str], cwd: Path) -> Outcome:
    """Run ``trinity run --config path --dry-run`` and return its outcome."""
    start = time.perf_counter()
    proc = subprocess.run(
        [*_trinity(), "run", "--config", str(path), "--dry-run"],
        capture_output=True, text=True, env=env, cwd=cwd, check=False,
    )
    seconds = time.perf_counter() - start
    lines = [line for line in proc.stderr.splitlines() if line.startswith("trinity: error")]
    message = lines[0] if lines else (proc.stderr.strip().splitlines() or [""])[-1]
    return Outcome(path, proc.returncode == 0, seconds, "" if proc.returncode == 0 else message)


def _reason(outcome: Outcome) -> str:
    """Return the failing file's message without the ``trinity: error: <file>:`` prefix."""
    text = outcome.message.removeprefix("trinity: error: ")
    prefix = f"{outcome.path}: "
    return text[len(prefix):] if text.startswith(prefix) else text


def markdown(outcomes: list[Outcome], root: Path) -> str:
    """Return a Markdown table of the outcomes, one row per file."""
    rows = ["| config | dry run | why not |", "|---|---|---|"]
    for o in outcomes:
        name = o.path.relative_to(root) if o.path.is_relative_to(root) else o.path
        reason = _reason(o).replace("|", "\\|")
        rows.append(f"| `{name}` | {'accepted' if o.ok else 'refused'} | {reason} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, dry-run every config, print the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, default=[REPO / "examples"])
    parser.add_argument("--markdown", action="store_true", help="also print a Markdown table")
    args = parser.parse_args(argv)
    files = sorted(p.resolve() for folder in args.folders for p in folder.rglob("*.yaml"))
    if not files:
        parser.error(f"no .yaml files under {', '.join(map(str, args.folders))}")
    env = {**PLACEHOLDERS, **os.environ}
    root = Path(os.path.commonpath([f.parent for f in files]))
    outcomes = [dry_run(f, env, Path.cwd()) for f in files]
    times = [o.seconds for o in outcomes]
    passed = sum(o.ok for o in outcomes)
    print(f"accepted {passed}/{len(outcomes)} configs under {root}")
    print(
        f"seconds per dry run: min {min(times):.2f}, median {statistics.median(times):.2f}, "
        f"max {max(times):.2f}"
    )
    for o in outcomes:
        if not o.ok:
            print(f"  {o.path.relative_to(root)}: {_reason(o)}")
    if args.markdown:
        print()
        print(markdown(outcomes, root))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
