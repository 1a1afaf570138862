"""A Ctrl-C landing between a descriptor's open and its keeping (as the open's
in-flight mark is taken down) closes it: until 2026-12-07 `LocalFile` and its O_DIRECT
reopen leaked the descriptor (1-2 of the data file per 30 interrupts survived
`reader.close()`). Fault injection: the interrupt is raised from `Waiting.__exit__`."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from headrace.errors import StorageError
from headrace.io import LocalFile, _in_flight


def _open_to(path: Path) -> list[str]:
    """The descriptors of this process open on ``path``."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                found.append(fd)
        except OSError:
            continue  # (the listing's own descriptor, closed since)
    return found


def _interrupt_on_exit(self: _in_flight.Waiting, *exc: object) -> None:
    _in_flight.end(self._key)
    raise KeyboardInterrupt


@pytest.fixture
def data(tmp_path: Path) -> Path:
    p = tmp_path / "w.bin"
    np.arange(10_000, dtype=np.uint8).tofile(p)
    return p


def test_a_ctrl_c_as_the_open_ends_closes_the_descriptor(data: Path) -> None:
    with mock.patch.object(_in_flight.Waiting, "__exit__", _interrupt_on_exit):
        with pytest.raises(KeyboardInterrupt):
            LocalFile(data)
    assert _open_to(data) == []


def test_a_ctrl_c_as_the_o_direct_reopen_ends_closes_it(data: Path) -> None:
    f = LocalFile(data)
    try:
        with mock.patch.object(_in_flight.Waiting, "__exit__", _interrupt_on_exit):
            with pytest.raises(KeyboardInterrupt):
                _ = f.direct_fd
        assert len(_open_to(data)) == 1  # the file's own descriptor alone
        assert f.direct_fd >= 0  # and a later reopen works
    except StorageError as exc:  # pragma: no cover - a file system without O_DIRECT
        pytest.skip(f"no O_DIRECT here: {exc}")
    finally:
        f.close()
    assert _open_to(data) == []


def test_a_directory_given_as_a_file_says_what_to_give(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"x")
    with pytest.raises(StorageError, match="is a directory, not a file") as info:
        LocalFile(tmp_path)
    assert info.value.errno == errno.EISDIR
    assert "a file in it" in str(info.value)


def test_an_eio_read_says_where_to_look(data: Path) -> None:
    f = LocalFile(data)
    try:
        with mock.patch("os.preadv", side_effect=OSError(errno.EIO, "Input/output error")):
            with pytest.raises(StorageError, match=r"\[0, 100\) failed") as info:
                f.pread_into(np.empty(100, np.uint8), 0)
    finally:
        f.close()
    assert info.value.errno == errno.EIO
    assert "dmesg" in str(info.value) and "another copy" in str(info.value)
