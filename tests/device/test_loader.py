"""Validation of backend plugins and discovery through entry points."""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from tests.device import plugins
from trinity.device.loader import PluginRejected, discover, load_plugin
from trinity.device.spec import ENTRY_POINT_GROUP, SPEC_VERSION


def test_valid_plugin_loads_and_resolves_backend_hooks() -> None:
    plugin = plugins.FakeAccel()
    backend = load_plugin(plugin, expected_name="accel")
    backend.synchronize()
    backend.set_device(1)
    assert plugin.synced == 1 and plugin.device == 1
    assert backend.current_device_index() == 1
    assert backend.implements("trinity_synchronize")
    assert not backend.implements("trinity_empty_cache")


def test_plugin_class_is_instantiated() -> None:
    backend = load_plugin(plugins.FakeAccel, expected_name="accel")
    assert backend.info.name == "accel"


@pytest.mark.parametrize(
    ("plugin", "message"),
    [
        (plugins.UnknownHook(), "trinity_warp_drive"),
        (plugins.WrongArgument(), "device_index"),
        (plugins.Unmarked(), "trinity_empty_cache is not marked"),
        (plugins.NoProbe(), "required hook(s) trinity_probe"),
        (plugins.FakeAccel(spec_version=SPEC_VERSION + 1), "upgrade trinity-rft"),
        (plugins.FakeAccel(spec_version=0), "upgrade the backend package"),
    ],
)
def test_invalid_plugins_are_rejected_with_the_reason(plugin: object, message: str) -> None:
    with pytest.raises(PluginRejected) as caught:
        load_plugin(plugin, expected_name=None)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_name_must_match_entry_point() -> None:
    with pytest.raises(PluginRejected, match="reports name 'accel' but is registered as 'gpu2'"):
        load_plugin(plugins.FakeAccel(), expected_name="gpu2")


def test_subset_of_arguments_is_accepted_and_called_correctly() -> None:
    backend = load_plugin(plugins.SubsetArguments(), expected_name="accel")
    assert backend.worker_env(True) == {"SUBSET_WORKER": "1"}


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory on sys.path holding real plugin modules written by the test."""
    (tmp_path / "good_backend.py").write_text(
        textwrap.dedent(
            """
            from tests.device.plugins import FakeAccel
            plugin = FakeAccel("good")
            twin = FakeAccel("twin")
            """
        )
    )
    (tmp_path / "exploding_backend.py").write_text("raise ImportError('libfoo.so: cannot open shared object file')\n")
    (tmp_path / "exiting_backend.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("good_backend", "exploding_backend", "exiting_backend"):
        sys.modules.pop(name, None)


def _ep(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)


def test_discover_isolates_broken_backends(plugin_dir: Path) -> None:
    records = discover(
        [
            _ep("good", "good_backend:plugin"),
            _ep("exploding", "exploding_backend"),
            _ep("exiting", "exiting_backend"),
            _ep("missing", "no_such_module_anywhere"),
        ]
    )
    assert records["cpu"].status == "ok"
    assert records["good"].status == "ok" and records["good"].backend is not None
    assert "libfoo.so" in records["exploding"].error
    assert records["exiting"].status == "broken" and "SystemExit" in records["exiting"].error
    assert "No module named 'no_such_module_anywhere'" in records["missing"].error


def test_two_registrations_of_one_name_are_both_refused(plugin_dir: Path) -> None:
    first = _ep("twin", "good_backend:twin")
    second = _ep("twin", "good_backend:plugin")
    records = discover([first, second])
    assert records["twin"].status == "broken"
    assert "registered by" in records["twin"].error and "uninstall one" in records["twin"].error
    assert records["cpu"].status == "ok"


def test_builtin_name_cannot_be_shadowed(plugin_dir: Path) -> None:
    records = discover([_ep("cpu", "good_backend:plugin")])
    assert records["cpu"].distribution == "trinity-rft" and records["cpu"].status == "ok"
    shadow = [r for name, r in records.items() if name.startswith("cpu@")]
    assert shadow and "reserved for the built-in backend" in shadow[0].error


@pytest.mark.parametrize(
    ("plugin", "message"),
    [
        (plugins.FakeAccel("Acme"), "must be lower case"),
        (plugins.FakeAccel("two words"), "must be lower case"),
    ],
)
def test_backend_names_must_be_typeable(plugin: object, message: str) -> None:
    with pytest.raises(PluginRejected, match=message):
        load_plugin(plugin)


def test_worker_env_prefixes_must_be_a_tuple() -> None:
    plugin = plugins.FakeAccel("listy")
    plugin._info = dataclasses.replace(plugin._info, worker_env_prefixes=["LISTY_"])  # type: ignore[arg-type]
    with pytest.raises(PluginRejected, match="worker_env_prefixes must be a tuple"):
        load_plugin(plugin)


def test_default_current_index_on_a_cpu_typed_backend_is_zero() -> None:
    class Minimal:
        @plugins.hookimpl
        def trinity_backend_info(self) -> plugins.BackendInfo:
            return plugins.info("minimal")

        @plugins.hookimpl
        def trinity_probe(self) -> plugins.ProbeResult:
            return plugins.ProbeResult(available=True, device_count=1)

    backend = load_plugin(Minimal(), expected_name="minimal")
    assert not backend.implements("trinity_current_device_index")
    backend.set_device(0)
    assert backend.current_device_index() == 0


def test_misspelled_hook_error_suggests_the_spec_name() -> None:
    with pytest.raises(PluginRejected) as caught:
        load_plugin(plugins.MisspelledHook(), expected_name="accel")
    assert "unknown hook(s) trinity_synchronise (did you mean trinity_synchronize?)" in str(caught.value)


def test_unrelated_unknown_hook_gets_no_suggestion() -> None:
    with pytest.raises(PluginRejected) as caught:
        load_plugin(plugins.UnknownHook(), expected_name="accel")
    assert "did you mean" not in str(caught.value)


def test_undeclared_argument_error_names_backend_and_module_not_pluggy_id() -> None:
    with pytest.raises(PluginRejected) as caught:
        load_plugin(plugins.WrongArgument(), expected_name="accel")
    message = str(caught.value)
    assert "trinity_set_device(device_index) of backend 'accel' (module tests.device.plugins)" in message
    assert "the spec's arguments are (local_rank)" in message
    assert "backend-" not in message.replace("backend 'accel'", ""), message


def test_name_clash_shows_each_distribution_with_its_own_version(tmp_path: Path) -> None:
    from tests.fakedist import backend_source, write_distribution

    write_distribution(tmp_path, "dist-a", {"twin_a": backend_source("twin")}, {"twin": "twin_a"}, version="1.0.0")
    write_distribution(tmp_path, "dist-b", {"twin_b": backend_source("twin")}, {"twin": "twin_b"}, version="2.5.0")
    from importlib.metadata import distributions

    found = [ep for dist in distributions(path=[str(tmp_path)]) for ep in dist.entry_points]
    record = discover(found)["twin"]
    assert record.status == "broken"
    assert "registered by dist-a 1.0.0 (twin_a) and dist-b 2.5.0 (twin_b)" in record.error
    assert record.distribution == "dist-a 1.0.0, dist-b 2.5.0" and record.version == ""
