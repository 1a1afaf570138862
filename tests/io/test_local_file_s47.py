"""LocalFile (s47): a stat of the O_DIRECT reopen that fails says so, not "cannot open"."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from headrace.errors import ConfigError, StorageError
from headrace.io import LocalFile


def _failing_fstat(monkeypatch: pytest.MonkeyPatch, fail_on: int) -> None:
    """Fault injection: the ``fail_on``-th ``os.fstat`` from now answers EIO."""
    real = os.fstat
    calls = [0]

    def fstat(fd: int) -> os.stat_result:
        calls[0] += 1
        if calls[0] == fail_on:
            raise OSError(errno.EIO, "Input/output error")
        return real(fd)

    monkeypatch.setattr(os, "fstat", fstat)


def test_a_failed_fstat_of_the_o_direct_reopen_says_what_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(8192))
    with LocalFile(path) as f:
        try:
            with LocalFile(path) as probe:
                _ = probe.direct_fd
        except ConfigError:
            pytest.skip("O_DIRECT is refused here (tmpfs?)")
        before = len(os.listdir("/proc/self/fd"))
        _failing_fstat(monkeypatch, 2)  # the reopened descriptor's
        with pytest.raises(StorageError) as info:
            _ = f.direct_fd
        monkeypatch.undo()
        message = str(info.value)
        assert "cannot open" not in message, message
        assert f"{path}: cannot stat the descriptor reopened with O_DIRECT" in message
        assert "Input/output error" in message and info.value.errno == errno.EIO
        assert len(os.listdir("/proc/self/fd")) == before  # the reopened one closed
        assert f.direct_fd >= 0  # a later use tries again


def test_a_fifo_or_a_device_is_refused_at_open_not_waited_on(tmp_path: Path) -> None:
    # A FIFO's open waited for a writer for ever; /dev/zero read as "past the end of the
    # file, which has 0 bytes".
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(StorageError, match=r"pipe: is a FIFO \(named pipe\), not a file"):
        LocalFile(fifo)
    with pytest.raises(StorageError, match=r"/dev/zero: is a character device, not a file"):
        LocalFile("/dev/zero")
    # A file's descriptor is left blocking, as reads of it expect.
    (tmp_path / "f.bin").write_bytes(b"abc")
    f = LocalFile(tmp_path / "f.bin")
    try:
        assert os.get_blocking(f.fd) and bytes(f.pread(0, 3)) == b"abc"
    finally:
        f.close()
