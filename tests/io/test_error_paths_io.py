"""Error paths of local file I/O that no other test reached.

- The ``O_DIRECT`` descriptor of a file (``FileSource(local_read="odirect")``) is a
  second open, through ``/proc/self/fd``, checked to be the same file by ``fstat``: an
  ``fstat`` that fails (EIO, injected) is an open error naming the file, once a read,
  with no descriptor left open. (The other check there, a file replaced since it was
  opened, is in test_io_faults.py.)
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError, StorageError
from headrace.formats import FileSource
from headrace.io import LocalFile
from headrace.pipeline import Loader

FILES = 3


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "d"
    root.mkdir()
    for i in range(FILES):
        (root / f"f{i}.bin").write_bytes(np.random.default_rng(i).bytes(10_000 + 37 * i))
    try:
        with LocalFile(root / "f0.bin") as f:
            _ = f.direct_fd
    except ConfigError:
        pytest.skip(f"{root}: O_DIRECT is refused here (tmpfs?)")
    return root


def fds_in(folder: Path) -> int:
    """This process's descriptors on files in ``folder`` (as tests/_fds.py counts them)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith(f"{folder}{os.sep}")
        except OSError:  # the listing's own descriptor, gone by now
            pass
    return n


def _fstat_fails_on_direct_descriptors(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``os.fstat`` of a descriptor opened with ``O_DIRECT`` answers EIO; the others'
    go on. The descriptors it failed on."""
    real = os.fstat
    failed: list[int] = []

    def fstat(fd: int) -> os.stat_result:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            failed.append(fd)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd)

    monkeypatch.setattr(os, "fstat", fstat)
    return failed


#: The reopen succeeded: its check, not an open, failed (until 2026-12-06 "cannot open").
_STAT_FAILED = (
    r"cannot stat the descriptor reopened with O_DIRECT, to check they are one file "
    r"\(Input/output error\)"
)


def test_an_eio_checking_the_o_direct_reopen_is_a_stat_error_naming_the_file(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = FileSource(folder, format="raw", local_read="odirect")
    failed = _fstat_fails_on_direct_descriptors(monkeypatch)
    first = re.escape(str(folder / "f0.bin"))
    with pytest.raises(
        StorageError,
        match=rf"{first}: {_STAT_FAILED}$",
    ) as info:
        src.files.fetch(0)
    assert info.value.errno == errno.EIO
    assert isinstance(info.value.__cause__, OSError)
    assert len(failed) == 1  # one reopen, not tried again
    assert fds_in(folder) == 0  # the reopened descriptor and the file closed
    # Through a loader: the batch fails with it, each of its two files reopened at most
    # once (the first failure may stop the other's read).
    named = "|".join(re.escape(str(folder / f"f{i}.bin")) for i in range(FILES))
    with Loader(src, batch_size=2, seed=0, steps=1, prefetch=0) as loader:
        with pytest.raises(
            StorageError,
            match=rf"({named}): {_STAT_FAILED}\n"
            r"while reading step 0 \(rank 0\)$",
        ):
            next(iter(loader))
    assert 2 <= len(failed) <= 3
    assert fds_in(folder) == 0
    src.close()
    # Without the fault, the same files read.
    monkeypatch.undo()
    assert bytes(src.files.fetch(0)) == (folder / "f0.bin").read_bytes()
    src.close()
