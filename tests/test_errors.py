"""One error root: every error a user can cause is a TrinityError with its exit status, mapped once by the CLI."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from trinity.buffer import errors as buffer_errors
from trinity.cli import main as cli_main
from trinity.cli.errors import CLIError, UsageError
from trinity.common.config.errors import ConfigError
from trinity.common.models.placement import PlacementError
from trinity.common.models.pretrained import ModelPathError, check_model_folder
from trinity.common.ray_connect import RayConnectionError
from trinity.device import errors as device_errors
from trinity.errors import EXIT_FAILURE, EXIT_USAGE, TrinityError
from trinity.synchronizer.synchronizer import SyncError, SyncTimeoutError
from trinity.trainer.checkpoint import CheckpointError, CheckpointWriteError
from trinity.utils.registry import DuplicateNameError, UnknownNameError

BAD_INPUT = [
    ConfigError,
    RayConnectionError,
    UnknownNameError,
    DuplicateNameError,
    UsageError,
    ModelPathError,
    buffer_errors.TaskFileError,
    buffer_errors.DatasetError,
    buffer_errors.FormatError,
    buffer_errors.ChatTemplateError,
    buffer_errors.TaskPositionError,
    device_errors.UnknownBackendError,
    device_errors.InvalidDeviceRequestError,
    device_errors.ConflictingChoiceError,
    CheckpointWriteError,
]
RUN_FAILED = [
    buffer_errors.StorageError,
    buffer_errors.StorageTimeoutError,
    buffer_errors.BufferExhaustedError,
    SyncError,
    SyncTimeoutError,
    CheckpointError,
    device_errors.BackendUnavailableError,
    device_errors.BackendLoadError,
    device_errors.CollectiveGroupError,
    device_errors.UnsupportedDtypeError,
    PlacementError,
]


@pytest.mark.parametrize("cls", BAD_INPUT, ids=lambda c: c.__name__)
def test_bad_input_exits_2(cls: type[TrinityError]) -> None:
    assert issubclass(cls, TrinityError) and cls("x").exit_code == EXIT_USAGE


@pytest.mark.parametrize("cls", RUN_FAILED, ids=lambda c: c.__name__)
def test_a_failed_run_exits_1(cls: type[TrinityError]) -> None:
    assert issubclass(cls, TrinityError) and cls("x").exit_code == EXIT_FAILURE


def test_the_old_bases_still_hold() -> None:
    assert issubclass(ConfigError, ValueError) and issubclass(SyncTimeoutError, TimeoutError)
    assert issubclass(PlacementError, TimeoutError)
    assert issubclass(UnknownNameError, KeyError) and issubclass(buffer_errors.TaskFileError, ValueError)
    assert CLIError("x", 3).exit_code == 3


def test_the_cli_maps_any_trinity_error_once_with_its_exit_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from trinity.cli import report

    class PluginFamilyError(TrinityError):
        exit_code = 7

    def failing(*args: object) -> None:
        raise PluginFamilyError("the thing at /x is wrong;\nfix it")

    monkeypatch.setattr(report, "gather", failing)
    assert cli_main.main(["backends", "list"]) == 7
    assert capsys.readouterr().err == "trinity: error: the thing at /x is wrong; fix it\n"

    monkeypatch.setenv("TRINITY_DEBUG", "1")  # the traceback comes first, the one line stays last
    assert cli_main.main(["backends", "list"]) == 7
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "in failing" in err
    assert err.endswith("\ntrinity: error: the thing at /x is wrong; fix it\n")


@pytest.mark.parametrize(
    ("name", "fragment"),
    [("absent", "does not exist"), ("empty", "is a folder but not a Hugging Face model"), ("file", "is a file")],
)
def test_a_path_that_cannot_be_a_model_is_refused(tmp_path: Path, name: str, fragment: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    path = str(tmp_path / name)
    with pytest.raises(ModelPathError, match=fragment):
        check_model_folder(path, "model.model_path")
    check_model_folder("Qwen/Qwen2.5-0.5B", "model.model_path")  # a hub id passes: the hub decides


def _sqlite_full(tmp_path: Path) -> sqlite3.OperationalError:
    """Return the real error SQLite raises when a database reaches its page limit."""
    with closing(sqlite3.connect(tmp_path / "full.sqlite")) as connection:
        connection.execute("CREATE TABLE t (x BLOB)")
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        connection.execute(f"PRAGMA max_page_count = {pages}")
        try:
            connection.execute("INSERT INTO t VALUES (?)", (b"x" * 100_000,))
        except sqlite3.OperationalError as exc:
            return exc
    raise AssertionError("SQLite took the row")


def test_sqlites_full_database_maps_to_enospc_through_sqlalchemy_and_pickling(tmp_path: Path) -> None:
    import errno
    import pickle

    from sqlalchemy.exc import OperationalError

    from trinity.errors import describe_storage_error, storage_error

    raw = _sqlite_full(tmp_path)
    assert str(raw) == "database or disk is full"
    for wrapped in (raw, OperationalError("INSERT", None, raw), pickle.loads(pickle.dumps(raw))):
        try:
            try:
                raise wrapped
            except Exception as exc:
                raise RuntimeError("a buffer write failed") from exc
        except RuntimeError as outer:
            found = storage_error(outer)
        assert found is not None and found.errno == errno.ENOSPC
        assert describe_storage_error(found).startswith("No space left on device (errno ENOSPC); ")
    assert storage_error(sqlite3.OperationalError("no such table: t")) is None


def test_an_os_error_reported_by_a_rust_library_is_a_storage_error() -> None:
    """safetensors' writer raises SafetensorError with the OS error in its text only."""
    import errno as errnos

    from trinity.errors import os_error_of, storage_error

    class SafetensorError(Exception):
        pass

    full = SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    assert storage_error(RuntimeError("export failed")) is None
    wrapped = RuntimeError("export failed")
    wrapped.__cause__ = full
    found = storage_error(wrapped)
    assert found is not None and found.errno == errnos.ENOSPC and found.strerror == "No space left on device"
    debug_form = os_error_of(SafetensorError('IoError(Os { code: 30, kind: ReadOnlyFilesystem, message: "x" })'))
    assert debug_form is not None and debug_form.errno == errnos.EROFS
    assert os_error_of(SafetensorError("header too large")) is None
