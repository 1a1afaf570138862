"""headrace.io.reads_in_flight: a read, an open or a stat is listed while it runs, never
after it failed, and a forked child lists none of its parent's.

Reads listed while a slow mount or a slow S3 endpoint keeps them waiting:
tests/integration/test_stall_warnings.py.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ObjectNotFoundError, ReadEOFError, StorageError
from headrace.formats._file_walk import stat_listed, walk
from headrace.io import LocalFile, ReadInFlight, reads_in_flight
from headrace.io import _in_flight as in_flight


def _mine(path: Path) -> list[str]:
    return [str(r) for r in reads_in_flight() if r.where == str(path)]


def test_a_read_that_fails_is_not_left_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(256)) * 16)
    with LocalFile(str(path)) as f:
        with pytest.raises(ReadEOFError):
            f.pread_into(np.empty(100, np.uint8), 4050)  # runs past the end
        assert _mine(path) == []

        def eio(*_: object) -> int:  # fault injection: the disk answers EIO
            assert len(_mine(path)) == 1  # listed while it runs
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(os, "preadv", eio)
        with pytest.raises(StorageError, match=r"f\.bin"):
            f.pread_into(np.empty(100, np.uint8), 0)
        assert _mine(path) == []


# JAX, imported by another test of the same xdist worker, warns on any fork; the child
# here only reads a dict and exits.
@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")
def test_entries_are_oldest_first_and_a_forked_child_has_none(tmp_path: Path) -> None:
    a = in_flight.begin(str(tmp_path / "a"), 0, 10)
    b = in_flight.begin("s3://b/k, bytes [5, 9)", 0, -1)
    c = in_flight.begin("s3://b/whole", 0, -1)
    try:
        mine = [r for r in reads_in_flight() if r.where.startswith((str(tmp_path), "s3://b/"))]
        assert [(r.where, r.start, r.end) for r in mine] == [
            (str(tmp_path / "a"), 0, 10),
            ("s3://b/k", 5, 9),  # an object request's range, read from its wording
            ("s3://b/whole", None, None),
        ]
        assert mine[0].age_s >= mine[1].age_s >= mine[2].age_s >= 0
        pid = os.fork()
        if pid == 0:  # the child: its parent's reads are not running here
            os._exit(0 if reads_in_flight() == [] else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        for key in (a, b, c):
            in_flight.end(key)
    assert not [r for r in reads_in_flight() if r.where.startswith((str(tmp_path), "s3://b/"))]


def test_an_open_is_in_flight_while_it_runs_and_never_after_it_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f.bin"
    with pytest.raises(ObjectNotFoundError, match=r"f\.bin: no such file"):
        LocalFile(str(path))
    assert _mine(path) == []
    path.write_bytes(bytes(100))
    real_fstat = os.fstat
    opening: list[list[str]] = []

    def eio(fd: int) -> os.stat_result:  # fault injection: the mount answers EIO
        opening.append(_mine(path))
        raise OSError(errno.EIO, "Input/output error")

    with monkeypatch.context() as m:
        m.setattr(os, "fstat", eio)
        with pytest.raises(StorageError, match=r"f\.bin: cannot open \(Input/output error\)"):
            LocalFile(str(path))
    assert len(opening) == 1 and opening[0][0].startswith(f"open {path} (")
    assert _mine(path) == []
    seen: list[ReadInFlight] = []

    def fstat(fd: int) -> os.stat_result:
        seen.extend(r for r in reads_in_flight() if r.where == str(path))
        return real_fstat(fd)

    monkeypatch.setattr(os, "fstat", fstat)
    with LocalFile(str(path)) as f:
        assert f.size == 100 and _mine(path) == []
    assert [(r.what, r.start, r.end) for r in seen] == [("open", None, None)]


def test_a_stat_or_listing_that_fails_is_not_left_in_flight(tmp_path: Path) -> None:
    missing = tmp_path / "gone.bin"
    with pytest.raises(ObjectNotFoundError, match=r"gone\.bin"):
        stat_listed(str(missing))
    (tmp_path / "link.bin").symlink_to(missing)
    with pytest.raises(ObjectNotFoundError, match=r"link\.bin: a symbolic link to"):
        walk(tmp_path, (".bin",))  # the walk stats the dangling link, and fails
    assert [r for r in reads_in_flight() if r.where.startswith(str(tmp_path))] == []
