"""headrace.io.reads_in_flight: a read is listed while it runs, never after it failed,
and a forked child lists none of its parent's.

Reads listed while a slow mount or a slow S3 endpoint keeps them waiting:
tests/integration/test_stall_warnings.py.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ReadEOFError, StorageError
from headrace.io import LocalFile, reads_in_flight
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
