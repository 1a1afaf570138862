"""Readers on a slowfs mount whose server is killed mid-run: an error naming the file.

A token window checks its file's size before each gather (a file that shrank under
its map would SIGBUS); on a mount whose server was killed that ``fstat`` answered
ENOTCONN, and the loader raised a bare ``OSError: [Errno 107] Transport endpoint is
not connected`` naming no file and no fix, where the row and file readers name both.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from headrace.emulate import SlowMount, fuse_available
from headrace.errors import StorageError
from headrace.formats import PaddedRows, TokenSource
from headrace.pipeline import Loader

pytestmark = pytest.mark.integration


def _source(kind: str, root: Path) -> TokenSource | PaddedRows:
    if kind == "tokens":
        return TokenSource(str(root / "tokens.bin"), dtype="uint16", context=128)
    return PaddedRows(str(root / "rows.npy"), context=128, reader="adaptive")


@pytest.mark.parametrize("kind", ["tokens", "rows"])
def test_a_killed_server_is_an_error_naming_the_file_and_the_fix(tmp_path: Path, kind: str) -> None:
    ok, reason = fuse_available()
    if not ok:
        pytest.skip(f"FUSE unavailable: {reason}")
    src = tmp_path / "src"
    src.mkdir()
    rng = np.random.default_rng(0)
    rng.integers(1, 1000, 1 << 20, dtype=np.uint16).tofile(src / "tokens.bin")
    np.save(src / "rows.npy", rng.integers(1, 1000, (4096, 129), dtype=np.uint16))
    name = "tokens.bin" if kind == "tokens" else "rows.npy"
    with SlowMount(src, tmp_path / "mnt", read_latency_ms=1) as m:
        with Loader(_source(kind, m.mnt), batch_size=8, seed=0, prefetch=0) as loader:
            batches = iter(loader)
            next(batches)
            os.kill(m.pid, signal.SIGKILL)
            # Past the kernel's 1 s attribute cache: a stat then meets the gone server
            # (within it, a page not yet cached fails first, EIO naming the file too).
            time.sleep(1.5)
            deadline = time.monotonic() + 30
            with pytest.raises(StorageError) as info:
                while time.monotonic() < deadline:  # the pages read so far are cached
                    next(batches)
    assert info.value.errno == errno.ENOTCONN
    text = str(info.value)
    assert str(m.mnt / name) in text
    assert "the mount it is on is gone" in text
