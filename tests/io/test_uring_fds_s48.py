"""io_uring's first ring refused for want of file descriptors: threads for now, not for good."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

import headrace.io._uring as uring
from headrace.errors import ConfigError
from headrace.io import RangeReader, ReaderConfig
from headrace.io._uring import RingPool, ring_pool

needs_uring = pytest.mark.skipif(
    not ring_pool().available(), reason=f"io_uring unavailable: {ring_pool().reason}"
)

RANGES = [(i * 100_000 + 7, 5000) for i in range(6)]  # never coalesced


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch):
    fresh = RingPool()
    monkeypatch.setattr(uring, "_POOL", fresh)
    yield fresh
    fresh.close()


@needs_uring
@pytest.mark.parametrize("err", [errno.EMFILE, errno.ENFILE])
def test_a_first_ring_refused_for_want_of_fds_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: RingPool, err: int
) -> None:
    # The first ring's failure was taken as "io_uring does not work here", for the life
    # of the process: a first batch run while the process was out of file descriptors
    # (EMFILE, or the system's: ENFILE) left every later one on threads, and
    # engine="uring" refused for good, though io_uring worked once fds were free.
    data = np.random.default_rng(3).integers(0, 256, 1 << 20, dtype=np.uint8)
    path = tmp_path / "f.bin"
    path.write_bytes(data.tobytes())
    real = uring._sys_setup
    refused: list[int] = []

    def out_of_fds_once(entries: int, params: uring._Params) -> int:
        if not refused:
            refused.append(entries)
            raise OSError(err, os.strerror(err))
        return real(entries, params)

    monkeypatch.setattr(uring, "_sys_setup", out_of_fds_once)
    want = [data[o : o + n].tobytes() for o, n in RANGES]
    with RangeReader(ReaderConfig(strategy="pread", in_flight=4)) as r:  # engine "auto"
        assert [g.tobytes() for g in r.read(str(path), RANGES)] == want
        assert r.stats.reads_by_engine == {"threads": 1}
        assert pool.reason == "" and os.strerror(err) in pool.failure
        assert [g.tobytes() for g in r.read(str(path), RANGES)] == want
        assert r.stats.reads_by_engine == {"threads": 1, "uring": 1}
    with RangeReader(ReaderConfig(strategy="pread", in_flight=4, engine="uring")) as r:
        assert [g.tobytes() for g in r.read(str(path), RANGES)] == want


@pytest.mark.parametrize(
    ("err", "said"),
    [
        (errno.EPERM, "seccomp profile"),
        (errno.ENOSYS, "has no io_uring"),
        (errno.ENOMEM, "ulimit -l"),
    ],
)
def test_a_ring_refused_by_the_kernel_stays_refused_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: RingPool, err: int, said: str
) -> None:
    # EPERM alone ("Operation not permitted") did not say who forbade it.
    calls: list[int] = []

    def refuse(entries: int, params: uring._Params) -> int:
        calls.append(entries)
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(uring, "_sys_setup", refuse)
    assert pool.acquire() is None and pool.acquire() is None
    assert len(calls) == 1 and os.strerror(err) in pool.reason and said in pool.reason
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(1 << 20))
    with RangeReader(ReaderConfig(strategy="pread", engine="uring")) as r:
        with pytest.raises(ConfigError, match=f"io_uring is not available here.*{said}"):
            r.read(str(path), RANGES)
