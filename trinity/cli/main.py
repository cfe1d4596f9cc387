"""Entry point of the ``trinity`` console script.

The parser is plain argparse and every command module imports its heavy
dependencies inside its handler, so ``trinity --help`` and ``trinity backends
list`` start without torch or any device runtime. Every error a user can cause
ends as one line on stderr (``trinity: error: ...``) and a non-zero exit;
``TRINITY_DEBUG=1`` adds the traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from trinity.cli import backends, checkpoints, run
from trinity.cli.errors import UsageError
from trinity.errors import EXIT_FAILURE, EXIT_USAGE, TrinityError, carried_error, describe_storage_error, storage_error
from trinity.utils import stop

PROG = "trinity"
#: Set to ``1`` to get the traceback of an error along with its one line.
DEBUG_ENV = "TRINITY_DEBUG"
#: Exit status after Ctrl-C, as a shell reports a SIGINT.
EXIT_INTERRUPTED = 130

#: Each command module's ``register(subparsers, common)``; add ``run``, ``convert``... here.
COMMANDS: tuple[Callable[[Any, argparse.ArgumentParser], None], ...] = (
    run.register, backends.register, checkpoints.register,
)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (raised, not printed) instead of usage plus message."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


class _VersionAction(argparse.Action):
    """``--version``: computed only when asked, so startup imports nothing for it."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> NoReturn:
        from trinity import __version__
        from trinity.device.spec import SPEC_VERSION

        python = ".".join(str(part) for part in sys.version_info[:3])
        print(f"trinity-rft {__version__} (DeviceBackend spec {SPEC_VERSION}, Python {python})")
        parser.exit(0)


def build_parser() -> Parser:
    """Return the ``trinity`` argument parser with every command registered."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS,
        help="show more log messages (-v: info, -vv: debug)",
    )
    parser = Parser(
        prog=PROG,
        description="Reinforcement fine-tuning for language models on any accelerator.",
        epilog=f"Set {DEBUG_ENV}=1 to see the traceback of an error.",
        parents=[common],
    )
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands", parser_class=Parser)
    for register in COMMANDS:
        register(commands, common)
    return parser


class _OneLineFormatter(logging.Formatter):
    """``trinity: warning: <message>`` on one line; other libraries' records name their logger."""

    def __init__(self, debug: bool) -> None:
        super().__init__()
        self._debug = debug

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            message = f"{message}: {type(exc).__name__}: {exc}"
        where = "" if record.name == PROG or record.name.startswith(PROG + ".") else f"[{record.name}] "
        line = f"{PROG}: {record.levelname.lower()}: {where}{one_line(message)}"
        if self._debug and record.exc_info:
            line += "\n" + "".join(traceback.format_exception(*record.exc_info)).rstrip()
        return line


class _CLIHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`configure_logging` installs (found and replaced on a second call)."""

    #: What this handler shows reaches the console (``trinity.monitor.run_log`` looks for it).
    trinity_console = True


def configure_logging(verbosity: int, debug: bool = False) -> None:
    """Send log records to stderr, one line each: WARNING and up, INFO with ``-v``, DEBUG with ``-vv``."""
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    handler = _CLIHandler(sys.stderr)
    handler.setLevel(level)  # a run's log file takes INFO lines of the trinity loggers whatever the console shows
    handler.setFormatter(_OneLineFormatter(debug))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _CLIHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


def one_line(text: str) -> str:
    """Return ``text`` with its lines joined, so an error stays a single line."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip()) or str(text)


def _error(message: str) -> None:
    print(f"{PROG}: error: {one_line(message)}", file=sys.stderr)


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    configure_logging(getattr(args, "verbose", 0), debug=os.environ.get(DEBUG_ENV) == "1")
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        chosen: argparse.ArgumentParser = getattr(args, "command_parser", parser)
        chosen.print_help()
        raise UsageError(f"missing command (see `{chosen.prog} --help`)")
    code = handler(args)
    sys.stdout.flush()  # a closed pipe shows up here, inside main(), not at interpreter exit
    return code


def _tolerate_unencodable_output() -> None:
    """Print ``?`` for characters the terminal's encoding lacks instead of failing (LANG=C, ascii pipes)."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        reconfigure = getattr(stream, "reconfigure", None)
        if encoding != "utf8" and reconfigure is not None:
            reconfigure(errors="replace")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``trinity`` command line on ``argv`` (``sys.argv[1:]`` when None); return the exit status."""
    debug = os.environ.get(DEBUG_ENV) == "1"
    _tolerate_unencodable_output()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, stop.SAVE_SIGNAL)}
    stop.reset()
    stop.install()  # before Ray starts; the session installs it again after ray.init replaced it
    try:
        return _run(argv)
    except TrinityError as exc:
        if debug:
            traceback.print_exc()
        known = carried_error(exc)
        _error(str(known))
        return known.exit_code
    except stop.Terminated as exc:
        _error(f"terminated ({exc.name})")
        return exc.exit_code
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`trinity backends list | head`): not an error worth a message.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILURE
    except Exception as exc:  # noqa: BLE001 - the one place every remaining error is turned into a line
        if debug:
            traceback.print_exc()
        disk = storage_error(exc)
        if disk is not None:  # a full, read-only or forbidden filesystem is the user's to fix, not a bug
            _error(f"the run stopped: {describe_storage_error(disk)}")
            return EXIT_USAGE
        hint = "" if debug else f"; rerun with {DEBUG_ENV}=1 to see the traceback"
        _error(f"unexpected {type(exc).__name__}: {exc} (this is a bug in trinity or a backend plugin{hint})")
        return EXIT_FAILURE
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig, handler in previous.items():
                signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
