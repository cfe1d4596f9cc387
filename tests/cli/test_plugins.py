"""User code loaded as upstream Trinity-RFT loads it: ``--plugin-dir``, ``TRINITY_PLUGIN_DIRS``, dotted config names.

Each case runs the real ``trinity`` console script in a subprocess on the
CPU quickstart's config with ``--dry-run`` (the names a config uses are
resolved at load time, so a plugin that registers a workflow is what makes
the config valid), from a folder of the test's own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from tests.cli._runner import TRINITY
from trinity.utils.registry import DuplicateNameError, Registry

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart" / "cpu.yaml"

ECHO = """
from trinity.common.workflows import WORKFLOWS
from trinity.common.workflows.toy import ToyRepeatWorkflow


@WORKFLOWS.register_module("{name}")
class PluginWorkflow(ToyRepeatWorkflow):
    pass
"""


def write_plugin(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return path


def dry_run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "TRINITY_PLUGIN_DIRS"}
    environ.update(env, TRINITY_CHECKPOINT_ROOT_DIR=str(cwd / "ckpt"), TRINITY_TASKSET_PATH=str(
        REPO / "examples" / "quickstart" / "tasks" / "train.jsonl"))
    no_eval = ("--set", "buffer.explorer_input.eval_tasksets=[]")  # its path is relative to the repository
    return subprocess.run([*TRINITY, "run", "--config", str(QUICKSTART), "--dry-run", *no_eval, *args], cwd=cwd,
                          env=environ,
                          capture_output=True, text=True, timeout=60, check=False)


def workflow(name: str) -> tuple[str, str]:
    return "--set", f"buffer.explorer_input.default_workflow_type={name}"


def test_a_plugin_dir_registers_the_workflow_a_config_names(tmp_path: Path) -> None:
    write_plugin(tmp_path / "plugins", "echo", ECHO.format(name="plugin_echo"))
    without = dry_run(tmp_path, *workflow("plugin_echo"))
    assert without.returncode == 2 and "unknown workflow 'plugin_echo'" in without.stderr
    done = dry_run(tmp_path, "--plugin-dir", str(tmp_path / "plugins"), *workflow("plugin_echo"))
    assert done.returncode == 0, done.stderr
    assert "workflow plugin_echo" in done.stdout


def test_plugin_folders_from_the_environment_and_repeated_options(tmp_path: Path) -> None:
    write_plugin(tmp_path / "a", "first", ECHO.format(name="plugin_first"))
    write_plugin(tmp_path / "b", "second", ECHO.format(name="plugin_second"))
    from_env = dry_run(tmp_path, *workflow("plugin_first"), TRINITY_PLUGIN_DIRS=str(tmp_path / "a"))
    assert from_env.returncode == 0, from_env.stderr
    both = dry_run(tmp_path, "--plugin-dir", str(tmp_path / "a"), "--plugin-dir", str(tmp_path / "b"),
                   *workflow("plugin_second"))
    assert both.returncode == 0, both.stderr


def test_a_dotted_name_is_imported_from_the_current_folder(tmp_path: Path) -> None:
    """Upstream's ``default_workflow_type: examples.x.workflow.MyWorkflow``, run from the project's root."""
    write_plugin(tmp_path / "my_flows", "__init__", "")
    write_plugin(tmp_path / "my_flows", "flow", ECHO.format(name="dotted_echo"))
    done = dry_run(tmp_path, *workflow("my_flows.flow.PluginWorkflow"))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("text", "line", "error"), [
    ("import json\n\ndef broken(:\n    pass\n", 3, "SyntaxError"),
    ("import json\n\nraise RuntimeError('no licence key for the judge')\n", 3,
     "RuntimeError: no licence key for the judge"),
    ("from trinity.common.workflows import WORKFLOWS\n\n@WORKFLOWS.register_module('toy_repeat')\nclass X:\n    pass\n",
     3, "DuplicateNameError: workflow 'toy_repeat' is registered twice: it already names"),
])
def test_a_plugin_that_fails_to_import_is_one_line_naming_its_file_and_line(
        tmp_path: Path, text: str, line: int, error: str) -> None:
    path = write_plugin(tmp_path / "plugins", "bad", text)
    done = dry_run(tmp_path, "--plugin-dir", str(tmp_path / "plugins"))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    (message,) = done.stderr.strip().splitlines()
    assert message.startswith(f"trinity: error: plugin {path}, line {line} failed to import: {error}"), message


def test_a_plugin_folder_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    done = dry_run(tmp_path, "--plugin-dir", str(tmp_path / "missing"))
    assert done.returncode == 2
    assert done.stderr.strip() == (f"trinity: error: plugin folder {tmp_path / 'missing'} (--plugin-dir) does not "
                                   "exist; name a folder of Python files")


def test_upstreams_registry_api_over_ours() -> None:
    from trinity.utils.registry import Registry as UpstreamRegistry

    assert UpstreamRegistry is Registry
    registry: Registry[object] = Registry("example", default_mapping={"json_dumps": "json.dumps"})

    @registry.register_module("shout")
    class Shout:
        pass

    registry.register_module(module_cls=str)
    assert registry.get("shout") is Shout and getattr(Shout, "_name", None) == "shout"
    assert registry.get("str") is str and registry.get("json_dumps").__name__ == "dumps"
    assert registry.name == "example" and set(registry.modules) >= {"shout", "str", "json_dumps"}
    with pytest.raises(DuplicateNameError, match=r"'shout' is registered twice: it already names .*Shout"):
        registry.register_module("shout", module_cls=int)
    registry.register_module("shout", module_cls=int, force=True)
    assert registry.get("shout") is int


def test_the_same_class_loaded_twice_is_one_entry(tmp_path: Path) -> None:
    """A plugin file loaded as a plugin and imported again by its module path registers the same class twice."""
    import importlib.util

    path = write_plugin(tmp_path, "twice", "class Flow:\n    def run(self):\n        return []\n")
    registry: Registry[object] = Registry("example")
    for name in ("plugin_twice_a", "plugin_twice_b"):
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # as the plugin loader and the import system do
        try:
            spec.loader.exec_module(module)
            registry.add("flow", module.Flow)  # no DuplicateNameError the second time
        finally:
            del sys.modules[name]


def test_trainer_ranks_load_the_drivers_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A trainer rank (a real ``FSDPWorker`` actor, constructed only) loads the plugins the driver named."""
    import ray

    from tests.plans import make_plan
    from tests.trainer.support import start_ray, tiny_model
    from trinity.trainer.trainer import remote_worker_class, worker_actor_options
    from trinity.utils import plugins

    write_plugin(tmp_path / "plugins", "rank_side", "LOADED = 'yes'\n")
    monkeypatch.setenv(plugins.PLUGIN_DIRS_ENV, str(tmp_path / "plugins"))
    plan = make_plan({"mode": "train", "model.model_path": str(tiny_model(tmp_path / "model"))})
    started = start_ray()
    try:
        rank = remote_worker_class().options(**worker_actor_options(0.1)).remote(plan, 0, 1)
        loaded = ray.get(rank.__ray_call__.remote(
            lambda actor: str(sys.modules["trinity.plugins.rank_side"].LOADED)), timeout=120)
        assert loaded == "yes"
        ray.kill(rank)
    finally:
        if started:
            ray.shutdown()


BROKEN = """
from trinity.common.workflows import WORKFLOWS
from trinity.common.workflows.toy import ToyRepeatWorkflow


@WORKFLOWS.register_module("plugin_broken")
class Broken(ToyRepeatWorkflow):
    def run(self, engine, task):
        raise KeyError("answer_field")
"""


def test_a_run_whose_every_task_fails_exits_1_quoting_the_first_error(tmp_path: Path) -> None:
    """Before, such a run trained 0 steps, wrote no checkpoint and exited 0."""
    write_plugin(tmp_path / "plugins", "broken", BROKEN)
    environ = {k: v for k, v in os.environ.items() if k not in ("TRINITY_PLUGIN_DIRS", "RAY_ADDRESS")}
    ray_tmp = tempfile.mkdtemp(prefix="trp-", dir="/tmp")  # Ray's socket paths must stay under 108 bytes
    environ.update(TRINITY_CHECKPOINT_ROOT_DIR=str(tmp_path / "ckpt"), RAY_AUTH_MODE="disabled",
                   RAY_TMPDIR=ray_tmp, TRINITY_TASKSET_PATH=str(
                       REPO / "examples" / "quickstart" / "tasks" / "train.jsonl"))
    done = subprocess.run(
        [*TRINITY, "run", "--config", str(QUICKSTART), "--plugin-dir", str(tmp_path / "plugins"),
         *workflow("plugin_broken"), "--set", "buffer.explorer_input.eval_tasksets=[]",
         "--set", "explorer.max_retry_times=1", "--set", "monitor.progress=false"],
        cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("trinity: error: explorer step 1: every task failed (8 of 8, 16 attempt(s), 0 timed out); "
                           "the first error, task 0 (plugin_broken): KeyError: 'answer_field'"), line
    assert "Traceback" not in done.stderr
    shutil.rmtree(ray_tmp, ignore_errors=True)


HALF_PORTED = """
from trinity.common.workflows import WORKFLOWS, Workflow


@WORKFLOWS.register_module("half_ported")
class HalfPorted(Workflow):
    # upstream's constructor, trinity-rft's run signature: neither framework can build and run it
    def __init__(self, task, model, auxiliary_models):
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)

    def run(self, engine, task):
        return []
"""

UPSTREAM_SHAPED = """
from trinity.common.workflows import WORKFLOWS, Workflow


@WORKFLOWS.register_module("upstream_shaped")
class UpstreamShaped(Workflow):
    def __init__(self, task, model, auxiliary_models):
        super().__init__(task=task, model=model, auxiliary_models=auxiliary_models)

    def run(self):
        return []
"""


def test_dry_run_builds_a_users_workflow_as_the_run_will(tmp_path: Path) -> None:
    """Half-ported code used to pass --dry-run and then fail every task."""
    write_plugin(tmp_path / "plugins", "half", HALF_PORTED)
    write_plugin(tmp_path / "plugins", "whole", UPSTREAM_SHAPED)
    half = dry_run(tmp_path, "--plugin-dir", str(tmp_path / "plugins"), *workflow("half_ported"))
    assert half.returncode == 2 and "Traceback" not in half.stderr
    (line,) = half.stderr.strip().splitlines()
    assert "workflow half_ported cannot be built as the framework builds one of its shape, cls(sampling, " \
           "**workflow_args); a workflow written for upstream's API takes run(self) with no arguments" in line
    whole = dry_run(tmp_path, "--plugin-dir", str(tmp_path / "plugins"), *workflow("upstream_shaped"))
    assert whole.returncode == 0, whole.stderr
    assert "user code     workflow upstream_shaped: the framework can build them" in whole.stdout
