"""``trinity backends list``: every backend shown, bad ones as one clear line, the good ones still usable.

Each bad backend is a real distribution written to disk (``tests.fakedist``)
and found by ``importlib.metadata`` in the CLI's own process.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.cli._runner import ROW_FIELDS, Runner, assert_usable
from tests.fakedist import add_backend, write_distribution
from trinity.device.spec import MIN_SPEC_VERSION, SPEC_VERSION

#: What a broken backend cannot tell.
UNKNOWABLE = ROW_FIELDS - {"name", "distribution", "version", "target", "status", "error", "selected"}


def test_table_shows_backends_notes_and_selection(trinity: Runner, site: Path) -> None:
    write_distribution(site, "fake-importfail", {"fake_importfail": "raise RuntimeError('libfoo.so missing')"},
                       {"importfail": "fake_importfail"})
    add_backend(site, "nodev", available=False, device_count=0, reason="no /dev/nodev0; load the nodev driver")
    result = trinity("backends", "list", TRINITY_DEVICE="okdev")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    okdev = next(line for line in lines if " okdev " in line)
    assert okdev.lstrip().startswith("*") and "fake-backend-okdev 0.1.0" in okdev and " yes " in okdev
    assert " yes " in next(line for line in lines if " cpu " in line)
    assert "BROKEN" in next(line for line in lines if " importfail " in line)
    assert "importfail: broken: import of fake_importfail failed: RuntimeError: libfoo.so missing" in lines
    assert "nodev: not available: no /dev/nodev0; load the nodev driver" in lines
    assert lines[-1] == "selected: okdev (environment) — okdev requested by the TRINITY_DEVICE environment variable"
    assert "Traceback" not in result.stderr


def test_json_has_every_field_and_one_selected_row(trinity: Runner, site: Path) -> None:
    write_distribution(site, "fake-importfail", {"fake_importfail": "import no_such_vendor_runtime"},
                       {"importfail": "fake_importfail"})
    result = trinity("backends", "list", "--json")
    assert result.returncode == 0, result.stderr
    document = result.json()
    assert set(document) == {"cluster", "selected", "selection_error", "backends"} and document["cluster"] is None
    assert document["selection_error"] is None
    assert set(document["selected"]) == {"name", "source", "reason"} and document["selected"]["source"] == "auto"
    rows = result.rows()
    assert all(set(row) == ROW_FIELDS for row in rows.values())
    assert [name for name, row in rows.items() if row["selected"]] == [document["selected"]["name"]]
    assert document["backends"][0]["name"] == "cpu"
    assert_usable(rows, "cpu", "okdev")
    okdev = rows["okdev"]
    assert okdev["distribution"] == "fake-backend-okdev" and okdev["version"] == "0.1.0"
    assert (okdev["target"], okdev["priority"], okdev["device_count"]) == ("fake_okdev", 5, 1)
    assert (okdev["collective_backend"], okdev["visible_devices_env"], okdev["compile_supported"]) == (
        "gloo", "OKDEV_VISIBLE_DEVICES", True)
    broken = rows["importfail"]
    assert broken["status"] == "broken" and "ModuleNotFoundError" in broken["error"]
    assert all(broken[field] is None for field in UNKNOWABLE)
    assert broken["selected"] is False


def _import_raises(site: Path) -> None:
    write_distribution(site, "fake-importfail", {"fake_importfail": "raise RuntimeError('vendor lib missing')"},
                       {"bad": "fake_importfail"})


def _unknown_hook(site: Path) -> None:
    add_backend(site, "bad", extra="@hookimpl\ndef trinity_frobnicate():\n    return 1\n")


def _wrong_argument(site: Path) -> None:
    add_backend(site, "bad", extra="@hookimpl\ndef trinity_set_device(rank):\n    pass\n")


def _unmarked_hook(site: Path) -> None:
    add_backend(site, "bad", extra="def trinity_synchronize():\n    pass\n")


def _other_spec_version(site: Path) -> None:
    add_backend(site, "bad", spec_version="SPEC_VERSION + 7")


def _same_name_twice(site: Path) -> None:
    add_backend(site, "bad", distribution="fake-bad-one")
    write_distribution(site, "fake-bad-two", {"fake_bad_two": "from fake_bad import *\n"}, {"bad": "fake_bad_two"})


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        pytest.param(_import_raises, "import of fake_importfail failed: RuntimeError: vendor lib missing",
                     id="import-raises"),
        pytest.param(_unknown_hook, "does not match the DeviceBackend spec: unknown hook(s) trinity_frobnicate",
                     id="unknown-hook"),
        pytest.param(_wrong_argument,
                     "trinity_set_device(rank) of backend 'bad' (module fake_bad) takes argument(s) rank that the spec "
                     "does not declare; the spec's arguments are (local_rank)",
                     id="wrong-argument-name"),
        pytest.param(_unmarked_hook, "trinity_synchronize is not marked with @trinity.device.hookimpl",
                     id="unmarked-hook"),
        pytest.param(_other_spec_version,
                     f"written for DeviceBackend spec {SPEC_VERSION + 7}, this trinity-rft supports "
                     f"{MIN_SPEC_VERSION}..{SPEC_VERSION}; upgrade trinity-rft",
                     id="other-spec-version"),
        pytest.param(_same_name_twice, "backend name 'bad' is registered by fake-bad-one 0.1.0 (fake_bad) and "
                     "fake-bad-two 0.1.0 (fake_bad_two); uninstall one of them", id="same-name-twice"),
    ],
)
def test_a_broken_backend_is_one_line_and_the_others_stay_usable(
    trinity: Runner, site: Path, make: object, fragment: str
) -> None:
    make(site)  # type: ignore[operator]
    listed = trinity("backends", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert "Traceback" not in listed.stderr
    rows = listed.rows()
    assert rows["bad"]["status"] == "broken" and fragment in rows["bad"]["error"]
    assert "\n" not in rows["bad"]["error"]
    assert_usable(rows, "cpu", "okdev")
    warning = next(line for line in listed.stderr.splitlines() if "broken" in line)
    assert warning.startswith("trinity: warning: device backends skipped because they are broken: ")
    assert "bad" in warning

    forced = trinity("backends", "list", "--json", TRINITY_DEVICE="bad")
    assert forced.returncode == 1
    line = forced.error_line()
    assert line.startswith("trinity: error: device backend 'bad' (TRINITY_DEVICE environment variable) from ")
    assert "is installed but broken" in line and fragment in line
    assert forced.json()["selected"] is None and forced.json()["selection_error"] in line
    assert_usable(forced.rows(), "cpu", "okdev")


def test_unknown_forced_backend_lists_the_installed_ones(trinity: Runner) -> None:
    result = trinity("backends", "list", TRINITY_DEVICE="bogus")
    assert result.returncode == 1
    line = result.error_line()
    assert line.startswith("trinity: error: unknown device backend 'bogus' (TRINITY_DEVICE environment variable); ")
    installed = line.split("installed: ", 1)[1].split(";")[0].split(", ")
    assert {"cpu", "okdev"} <= set(installed)
    assert "selected: none — unknown device backend 'bogus'" in result.stdout  # the table is still printed
    assert " okdev " in result.stdout


def test_unavailable_forced_backend_gives_the_probe_reason(trinity: Runner, site: Path) -> None:
    add_backend(site, "nodev", available=False, device_count=0, reason="no /dev/nodev0; load the nodev driver")
    result = trinity("backends", "list", "--json", TRINITY_DEVICE="nodev")
    assert result.returncode == 1
    assert result.error_line() == (
        "trinity: error: device backend 'nodev' was requested by the TRINITY_DEVICE environment variable "
        "but is not available: no /dev/nodev0; load the nodev driver"
    )
    rows = result.rows()
    assert rows["nodev"]["available"] is False and rows["nodev"]["reason"] == "no /dev/nodev0; load the nodev driver"
    assert_usable(rows, "cpu", "okdev")


def test_a_raising_probe_makes_the_backend_unavailable(trinity: Runner, site: Path) -> None:
    add_backend(site, "flaky", extra="@hookimpl\ndef trinity_probe():\n    raise OSError('NVML exploded')\n")
    listed = trinity("backends", "list", "--json")
    assert listed.returncode == 0 and "Traceback" not in listed.stderr
    rows = listed.rows()
    assert (rows["flaky"]["status"], rows["flaky"]["available"]) == ("ok", False)
    assert rows["flaky"]["reason"] == "probe raised OSError: NVML exploded"
    assert_usable(rows, "cpu", "okdev")
    forced = trinity("backends", "list", "--json", TRINITY_DEVICE="flaky")
    assert forced.returncode == 1
    assert forced.error_line().endswith("is not available: probe raised OSError: NVML exploded")


def test_a_hanging_probe_is_cut_off_by_the_timeout(trinity: Runner, site: Path) -> None:
    add_backend(site, "stuck", extra="import time\n@hookimpl\ndef trinity_probe():\n    time.sleep(600)\n")
    started = time.monotonic()
    result = trinity("backends", "list", "--json", TRINITY_PROBE_TIMEOUT="1")
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert elapsed < 8, f"list took {elapsed:.1f} s with a 1 s probe timeout"
    rows = result.rows()
    assert (rows["stuck"]["available"], rows["stuck"]["reason"]) == (False, "probe did not answer within 1 s")
    assert rows["stuck"]["probe_cut_off"] is True and rows["okdev"]["probe_cut_off"] is False
    assert_usable(rows, "cpu", "okdev")


def test_a_slow_probe_is_named_and_a_named_device_does_not_wait_for_it(trinity: Runner, site: Path) -> None:
    """The closing figure: `backends list` with a hanging probe installed, auto vs TRINITY_DEVICE=cpu."""
    add_backend(site, "stuck", extra="import time\n@hookimpl\ndef trinity_probe():\n    time.sleep(600)\n")
    started = time.monotonic()
    auto = trinity("backends", "list", TRINITY_PROBE_TIMEOUT="4")
    auto_s = time.monotonic() - started
    assert auto.returncode == 0 and auto_s >= 4, auto.stderr
    note = next(line for line in auto.stdout.splitlines() if line.startswith("stuck: SLOW: "))
    assert "probe did not answer within 4 s" in note and "fix or uninstall fake-backend-stuck" in note
    assert "lower TRINITY_PROBE_TIMEOUT" in note
    warning = auto.stderr.strip().splitlines()[0]
    assert warning.startswith("trinity: warning: device backend 'stuck' (fake-backend-stuck): its probe did not")
    started = time.monotonic()
    named = trinity("backends", "list", TRINITY_PROBE_TIMEOUT="4", TRINITY_DEVICE="cpu")
    named_s = time.monotonic() - started
    assert named.returncode == 0 and named_s < auto_s - 2, (named_s, auto_s)
    note = next(line for line in named.stdout.splitlines() if line.startswith("stuck: SLOW: "))
    assert "(not waited for longer: TRINITY_DEVICE=cpu names the device" in note
    assert "name the device you use" not in note  # it is named already
    assert "Traceback" not in named.stderr + auto.stderr


def test_a_malformed_probe_timeout_is_one_line(trinity: Runner) -> None:
    listed = trinity("backends", "list", "--json", TRINITY_PROBE_TIMEOUT="abc")
    assert listed.returncode == 1
    assert listed.error_line() == (
        "trinity: error: TRINITY_PROBE_TIMEOUT='abc' is not a positive number of seconds; unset it or set e.g. 10"
    )
    assert_usable(listed.rows(), "cpu", "okdev")
    checked = trinity("backends", "check", TRINITY_PROBE_TIMEOUT="abc")
    assert checked.returncode == 2
    assert "TRINITY_PROBE_TIMEOUT='abc'" in checked.error_line()


def test_a_priority_tie_is_warned_about_in_one_line(trinity: Runner, site: Path) -> None:
    for name in ("tieb", "tiea"):
        add_backend(site, name, priority=10**9)
    result = trinity("backends", "list", "--json", "-v")
    assert result.returncode == 0
    assert result.json()["selected"]["name"] == "tiea"
    assert (
        "trinity: warning: device backends tiea, tieb share priority 1000000000 on this node; choosing 'tiea' "
        "by name. Set TRINITY_DEVICE to choose."
    ) in result.stderr.splitlines()
    assert any(line.startswith("trinity: info: device backend: tiea (") for line in result.stderr.splitlines())
