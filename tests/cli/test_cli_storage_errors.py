"""A write that the filesystem refuses (full, over quota, read-only, forbidden) ends ``trinity`` as one line, exit 2.

No small filesystem can be mounted here without root, so the failing write is
a fault-injecting file object handed to the real ``torch.save``: its
``write`` raises ``OSError(ENOSPC)`` once a few hundred bytes are in, as a
full disk does, and torch reports it the way it does on a real full disk
(``unexpected pos ...`` with the OSError as its context).
"""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import pytest

from tests.cli.test_cli_run import GOOD, write
from trinity.cli import main as cli_main


class RefusingWriter(io.RawIOBase):
    """A writable stream whose writes fail with ``OSError(code)`` after ``room`` bytes."""

    def __init__(self, code: int, room: int = 500) -> None:
        super().__init__()
        self.code, self.room, self.written = code, room, 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.written += len(data)
        if self.written > self.room:
            raise OSError(self.code, os.strerror(self.code))
        return len(data)


def _save_into(code: int) -> None:
    import torch

    torch.save({"weight": torch.zeros(4096)}, RefusingWriter(code))


#: errno of the refused write -> (words the line must hold, the fix it must suggest).
CASES = {
    errno.ENOSPC: ("No space left on device (errno ENOSPC)", "free space there"),
    errno.EDQUOT: ("Disk quota exceeded (errno EDQUOT)", "free space there"),
    errno.EROFS: ("Read-only file system (errno EROFS)", "make it writable"),
    errno.EACCES: ("Permission denied (errno EACCES)", "make it writable"),
}


@pytest.mark.parametrize("code", sorted(CASES), ids=lambda code: errno.errorcode[code])
def test_a_refused_write_inside_torch_save_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], code: int,
) -> None:
    words, fix = CASES[code]
    import trinity.launcher

    monkeypatch.setattr(trinity.launcher, "run_job", lambda *args: _save_into(code))
    monkeypatch.delenv("TRINITY_DEBUG", raising=False)
    assert cli_main.main(["run", "--config", str(write(tmp_path, GOOD))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("trinity: error: the run stopped: "), err
    assert words in err and fix in err and "intact" in err
    assert "unexpected pos" not in err and "bug" not in err and "Traceback" not in err


def test_the_debug_switch_keeps_the_whole_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import trinity.launcher

    monkeypatch.setattr(trinity.launcher, "run_job", lambda *args: _save_into(errno.ENOSPC))
    monkeypatch.setenv("TRINITY_DEBUG", "1")
    assert cli_main.main(["run", "--config", str(write(tmp_path, GOOD))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "unexpected pos" in err
    assert err.splitlines()[-1].startswith("trinity: error: the run stopped: No space left on device")
