"""The ``trinity`` entry point: help, version, light imports, and how errors reach the user."""

from __future__ import annotations

import re

import pytest

from tests.cli._runner import Result, Runner
from trinity.cli import main as cli_main
from trinity.device import UnknownBackendError, facade
from trinity.device.loader import builtin_records
from trinity.device.selection import select

#: Modules the light commands must not import: torch and the vendor runtimes behind it.
HEAVY = {"torch", "torch_npu", "acl", "vllm", "vllm_ascend", "transformers", "ray"}


def imported_modules(result: Result) -> set[str]:
    """Return every module a run imported, from its ``PYTHONPROFILEIMPORTTIME`` report on stderr."""
    found = set()
    for line in result.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", line)
        if match:
            found.add(match.group(1))
    assert found, f"no import-time report on stderr:\n{result.stderr[:500]}"
    return found


def test_help_lists_the_commands_and_imports_neither_torch_nor_the_device_layer(trinity: Runner) -> None:
    result = trinity("--help", PYTHONPROFILEIMPORTTIME="1")
    assert result.returncode == 0
    assert "backends" in result.stdout and "TRINITY_DEBUG" in result.stdout
    modules = imported_modules(result)
    assert not {m.split(".")[0] for m in modules} & HEAVY
    assert "trinity.device" not in modules and "rich" not in modules


@pytest.mark.parametrize("args", [("backends", "list"), ("backends", "list", "--json")])
def test_list_imports_no_torch_nor_vendor_runtime(trinity: Runner, args: tuple[str, ...]) -> None:
    result = trinity(*args, PYTHONPROFILEIMPORTTIME="1")
    assert result.returncode == 0, result.stderr
    top_level = {m.split(".")[0] for m in imported_modules(result)}
    assert not top_level & HEAVY
    assert ("rich" in top_level) == ("--json" not in args)  # rich only to draw the table


def test_version(trinity: Runner) -> None:
    result = trinity("--version")
    assert result.returncode == 0
    assert re.fullmatch(r"trinity-rft \S+ \(DeviceBackend spec \d+, Python [\d.]+\)\n", result.stdout)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--no-such-option",), "unrecognized arguments: --no-such-option"),
        (("frobnicate",), "invalid choice: 'frobnicate'"),
        (("backends", "frobnicate"), "invalid choice: 'frobnicate'"),
        (("backends", "show"), "the following arguments are required: NAME"),
        (("backends", "list", "--jsn"), "unrecognized arguments: --jsn"),
        (("backends",), "missing command"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(trinity: Runner, args: tuple[str, ...], fragment: str) -> None:
    result = trinity(*args)
    assert result.returncode == 2
    line = result.error_line()
    assert fragment in line and "--help`" in line


def test_unknown_known_backend_names_the_pip_extra() -> None:
    records = {record.name: record for record in builtin_records()}  # no npu, no cuda installed
    hint = r"installed: cpu; install it with: pip install 'trinity-rft\[npu\]'"
    for asked in ("npu", "ascend"):
        with pytest.raises(UnknownBackendError, match=hint):
            select(records, environ={"TRINITY_DEVICE": asked})
    with pytest.raises(UnknownBackendError, match=r"pip install 'trinity-rft\[cuda\]'"):
        select(records, choice="gpu", environ={})


def test_the_cli_prints_the_pip_extra_hint_as_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(facade, "discover", lambda: {r.name: r for r in builtin_records()})
    monkeypatch.setenv("TRINITY_DEVICE", "npu")
    assert cli_main.main(["backends", "list", "--json"]) == 1
    out, err = capsys.readouterr()
    assert [row["name"] for row in Result(0, out, err).json()["backends"]] == ["cpu"]
    assert Result(1, out, err).error_line() == (
        "trinity: error: unknown device backend 'npu' (TRINITY_DEVICE environment variable); installed: cpu; "
        "install it with: pip install 'trinity-rft[npu]'"
    )


def test_an_unexpected_error_is_one_line_with_a_debug_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from trinity.cli import report

    def broken_gather(address: str | None = None) -> None:
        raise RuntimeError("something\nwent wrong")

    monkeypatch.setattr(report, "gather", broken_gather)
    assert cli_main.main(["backends", "list"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "trinity: error: unexpected RuntimeError: something went wrong (this is a bug in trinity or a backend "
        "plugin; rerun with TRINITY_DEBUG=1 to see the traceback)\n"
    )

    monkeypatch.setenv("TRINITY_DEBUG", "1")
    assert cli_main.main(["backends", "list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "broken_gather" in err
    assert err.splitlines()[-1].startswith("trinity: error: unexpected RuntimeError: something went wrong")


def test_a_device_error_is_one_line_without_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TRINITY_DEVICE", "no-such-device")
    assert cli_main.main(["backends", "check"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("trinity: error: unknown device backend 'no-such-device'")
