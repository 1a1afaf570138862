"""A file whose ``fstat`` fails mid-run (ENOTCONN: the FUSE server of its mount was
killed) is a :class:`StorageError` naming the file and the fix, on every path that
checks the size: a mapped read checks it before each gather, and raised the bare
``OSError: [Errno 107] Transport endpoint is not connected`` (seen in CI on
2026-12-07: tests/emulate/test_killed_server_s51.py's rows case, when the adaptive
reader was mapped at the kill). Fault injection of ``os.fstat`` on the real file's
descriptor; the read before it is real bytes."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import StorageError
from headrace.io import RangeReader

ROW = 64


@pytest.mark.parametrize("strategy", ["mmap", "pread"])
def test_a_failed_stat_names_the_file_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, strategy: str
) -> None:
    path = tmp_path / "rows.bin"
    data = np.random.default_rng(0).integers(0, 256, 64 * ROW, dtype=np.uint8)
    data.tofile(path)
    with RangeReader(strategy) as r:  # type: ignore[arg-type]
        got = r.read_rows(str(path), [3, 1], ROW)
        assert got.tobytes() == data[3 * ROW : 4 * ROW].tobytes() + data[ROW : 2 * ROW].tobytes()
        real = os.fstat

        def gone(fd: int) -> os.stat_result:
            if os.path.realpath(f"/proc/self/fd/{fd}") == str(path):
                raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")
            return real(fd)

        monkeypatch.setattr(os, "fstat", gone)
        with pytest.raises(StorageError) as info:
            r.size(str(path))
        if strategy == "mmap":  # the mapped read's size check, before its gather
            with pytest.raises(StorageError) as info:
                r.read_rows(str(path), [5], ROW)
    assert info.value.errno == errno.ENOTCONN
    text = str(info.value)
    assert str(path) in text and "cannot stat" in text
    assert "the mount it is on is gone" in text
