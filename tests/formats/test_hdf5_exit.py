"""A process that read HDF5 on read-ahead threads exits: h5py runs every call under one
lock, and a daemon thread inside a call as the interpreter finalizes is stopped there
holding it; the main thread's last deallocation of an h5py object (h5py keeps some from
its import) then waited for it for ever. Before the exit handler of ``_hdf5`` this
script hung 3 runs in 3 (a loaded CI's EIO test once: py-spy showed the main thread in
h5py's ObjectID dealloc, waiting for that lock)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("h5py", reason="h5py is a test extra")

SRC = str(Path(__file__).parents[2] / "src")

SCRIPT = r"""
import io, threading, time
import numpy as np
from headrace.formats._hdf5 import decode_hdf5, encode_hdf5

data = encode_hdf5({"x": np.arange(1000)})


class Slow(io.RawIOBase):
    # An HDF5 file whose every read waits, as one on a network mount does.
    def __init__(self, b):
        self.b, self.pos = b, 0
    def readable(self):
        return True
    def seekable(self):
        return True
    def seek(self, o, w=0):
        self.pos = o if w == 0 else self.pos + o if w == 1 else len(self.b) + o
        return self.pos
    def tell(self):
        return self.pos
    def readinto(self, buf):
        time.sleep(0.05)
        n = min(len(buf), len(self.b) - self.pos)
        buf[:n] = self.b[self.pos:self.pos + n]
        self.pos += n
        return n


def work():
    while True:  # a read-ahead: decodes until the process ends
        assert decode_hdf5(Slow(data), name="slow.h5", dataset="x").sum() == 499500


threading.Thread(target=work, daemon=True).start()
time.sleep(0.4)  # the thread is inside h5py, in one of its reads
print("done", flush=True)
"""


def test_a_script_exits_while_a_daemon_thread_decodes_hdf5(tmp_path: Path) -> None:
    script = tmp_path / "exit_while_decoding.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    try:
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, env=env, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the process hung at exit (a daemon thread held h5py's lock)")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().strip() == "done"
