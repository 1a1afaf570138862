"""Parallel positional reads on the thread engine run on the shared I/O pool: 8 reads
in flight by default, as many as ``HEADRACE_IO_THREADS`` or ``set_io_threads(n)`` say.

Each case runs in a fresh process (the pool is process-wide and sized once); every
``os.preadv`` there is slowed by 20 ms, so the reads that overlap are counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

_CHILD = r"""
import json, os, sys, threading, time
import numpy as np
from headrace.io import RangeReader, ReaderConfig, io_threads, set_io_threads

path, resize = sys.argv[1], int(sys.argv[2])
if resize:
    set_io_threads(resize)
lock, now, peak = threading.Lock(), [0], [0]
real = os.preadv

def slow(fd, bufs, offset):  # latency injected, the bytes are the file's
    with lock:
        now[0] += 1
        peak[0] = max(peak[0], now[0])
    try:
        time.sleep(0.02)
        return real(fd, bufs, offset)
    finally:
        with lock:
            now[0] -= 1

os.preadv = slow
data = open(path, "rb").read()
ranges = [(i * 200_000 + 11, 3000) for i in range(40)]  # never coalesced: 40 reads
with RangeReader(ReaderConfig(strategy="pread", engine="threads")) as r:
    got = r.read(path, ranges)
same = [g.tobytes() for g in got] == [data[o : o + n] for o, n in ranges]
print(json.dumps({"threads": io_threads(), "peak": peak[0], "same": same}))
"""


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("pool") / "f.bin"
    p.write_bytes(os.urandom(40 * 200_000))
    return p


@pytest.mark.parametrize(
    ("env", "resize", "want"),
    [({}, 0, 8), ({"HEADRACE_IO_THREADS": "5"}, 0, 5), ({}, 3, 3)],
    ids=["default", "environment", "set_io_threads"],
)
def test_reads_in_flight_follow_the_pool_size(
    data_file: Path, env: dict[str, str], resize: int, want: int
) -> None:
    base = {k: v for k, v in os.environ.items() if k != "HEADRACE_IO_THREADS"}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(data_file), str(resize)],
        env={**base, "PYTHONPATH": os.pathsep.join(sys.path), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    r = json.loads(out.strip().splitlines()[-1])
    # The calling thread runs one of the reads itself, the pool's threads the others.
    assert r == {"threads": want, "peak": want, "same": True}
