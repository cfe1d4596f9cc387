"""User plugins: Python files that register workflows, rewards, algorithms and operators before a run uses them.

This is how upstream Trinity-RFT loads a user's own code, and it works the same
here:

* every ``*.py`` file of the ``trinity/plugins`` folder of the installed package;
* every ``*.py`` file of each folder in ``TRINITY_PLUGIN_DIRS`` (separated by ``os.pathsep``);
* every ``*.py`` file of each ``trinity run --plugin-dir DIR`` (the option repeats).

Files whose name starts with ``_`` are skipped. Each file is imported once, as
``trinity.plugins.<file stem>``, with its folder on ``sys.path`` (so it can
import the modules beside it); registering a name is what makes it usable
in a config (``@WORKFLOWS.register_module("my_workflow")``). A dotted name in
a config (``default_workflow_type: examples.my_agent.workflow.MyWorkflow``)
is imported with the current folder on ``sys.path``, as upstream resolves it.

A plugin that fails to import stops the command with one line naming the
file, the line and the error (:class:`PluginError`, exit status 2). The
driver hands the folders to its Ray workers (:func:`worker_env`), which load
them when they start (:func:`load_in_worker`).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import time
import traceback
from collections.abc import Iterable, Sequence
from pathlib import Path

from trinity.errors import EXIT_USAGE, TrinityError

logger = logging.getLogger(__name__)

#: Folders of plugin files, separated by ``os.pathsep`` (upstream's variable).
PLUGIN_DIRS_ENV = "TRINITY_PLUGIN_DIRS"
#: The folder dotted names in a config are resolved against (the driver's current folder), for workers.
IMPORT_ROOT_ENV = "TRINITY_IMPORT_ROOT"
#: The package folder whose files are always loaded.
BUILT_IN_DIR = Path(__file__).resolve().parents[1] / "plugins"

#: Plugin files loaded in this process, by resolved path.
_loaded: dict[Path, str] = {}
#: Seconds spent loading plugins in this process.
load_seconds = 0.0


class PluginError(TrinityError):
    """A plugin folder or file cannot be loaded (exit status 2)."""

    exit_code = EXIT_USAGE


def plugin_dirs(extra: Iterable[str | Path] = (), environ: dict[str, str] | None = None) -> list[Path]:
    """Return the plugin folders in load order: the package's, ``TRINITY_PLUGIN_DIRS``, then ``extra``.

    Raises PluginError for a named folder that is missing or not a folder.
    """
    env = os.environ if environ is None else environ
    named = [(d, PLUGIN_DIRS_ENV) for d in env.get(PLUGIN_DIRS_ENV, "").split(os.pathsep) if d.strip()]
    named += [(str(d), "--plugin-dir") for d in extra]
    folders = [BUILT_IN_DIR]
    for folder, origin in named:
        path = Path(folder).expanduser().resolve()
        if not path.is_dir():
            what = "does not exist" if not path.exists() else "is not a folder"
            raise PluginError(f"plugin folder {folder} ({origin}) {what}; name a folder of Python files")
        if path not in folders:
            folders.append(path)
    return folders


def load_plugins(extra: Sequence[str | Path] = (), environ: dict[str, str] | None = None) -> list[Path]:
    """Load every plugin file of :func:`plugin_dirs` not loaded yet; return the files of all plugin folders.

    Also puts the current folder on ``sys.path`` (last) for dotted names in
    configs, and records the folders in ``TRINITY_PLUGIN_DIRS`` for the Ray
    workers this process starts. Raises PluginError on the first file that
    fails to import.
    """
    global load_seconds
    started = time.monotonic()
    folders = plugin_dirs(extra, environ)
    allow_imports_from(Path.cwd())
    files: list[Path] = []
    for folder in folders:
        for file in sorted(folder.glob("*.py")):
            if file.name.startswith("_"):
                continue
            files.append(file)
            _load_file(file.resolve())
    user = [str(f) for f in folders if f != BUILT_IN_DIR]
    if user:
        os.environ[PLUGIN_DIRS_ENV] = os.pathsep.join(user)
    load_seconds += time.monotonic() - started
    return files


def allow_imports_from(folder: Path) -> None:
    """Put ``folder`` on ``sys.path`` (last, so installed packages keep their names) unless it is there."""
    text = str(folder)
    if text not in sys.path:
        sys.path.append(text)


def _load_file(path: Path) -> None:
    if path in _loaded:
        return
    name = f"trinity.plugins.{path.stem}"
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) != str(path):
        raise PluginError(f"plugin {path}: another plugin file already took the module name {name}; "
                          "rename one of the two files")
    allow_imports_from(path.parent)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"plugin {path}: not a Python file Python can import")
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "trinity.plugins"
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise PluginError(f"plugin {path}{_line_in(exc, path)} failed to import: {type(exc).__name__}: "
                          f"{_first_line(exc)}") from exc
    _loaded[path] = name
    logger.info("plugin %s loaded", path)


def _line_in(exc: BaseException, path: Path) -> str:
    """Return ``, line N`` of the deepest frame of ``exc`` in ``path`` (a syntax error's own line), or ``""``."""
    if isinstance(exc, SyntaxError) and exc.lineno and Path(exc.filename or "").resolve() == path:
        return f", line {exc.lineno}"
    lines = [frame.lineno for frame in traceback.extract_tb(exc.__traceback__)
             if Path(frame.filename).resolve() == path and frame.lineno]
    return f", line {lines[-1]}" if lines else ""


def _first_line(exc: BaseException) -> str:
    text = str(exc.msg if isinstance(exc, SyntaxError) else exc).strip()
    return text.splitlines()[0] if text else "no detail"


def worker_env() -> dict[str, str]:
    """Return the environment a Ray worker needs to load this process's plugins and resolve its dotted names."""
    env = {IMPORT_ROOT_ENV: str(Path.cwd())}
    if os.environ.get(PLUGIN_DIRS_ENV):
        env[PLUGIN_DIRS_ENV] = os.environ[PLUGIN_DIRS_ENV]
    return env


def load_in_worker() -> None:
    """In a Ray worker the driver started (:func:`worker_env`): load its plugins, resolve names from its folder.

    Does nothing elsewhere (no ``TRINITY_IMPORT_ROOT`` in the environment).
    """
    root = os.environ.get(IMPORT_ROOT_ENV)
    if not root:
        return
    allow_imports_from(Path(root))
    load_plugins()
