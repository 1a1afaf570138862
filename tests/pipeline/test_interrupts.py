"""A Ctrl-C caught around the loop (a notebook cell) while the loop waits on the I/O
pool's reads (``prefetch=0``): once the storage answers again, the same loader reads
on, and a new loader over the same source reads the batches a fresh one does.

The wait was ``concurrent.futures.wait``, whose lock handling an exception raised at
the wrong moment could leave a future's lock held by the main thread, and the pool
thread setting its result blocked for good; see tests/io/test_waits.py for that
fault injected, and benchmarks/interrupt_stress.py for the stress version.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from _stuck import interrupt_when_stuck

_NOTEBOOK = """
import threading
import numpy as np
from headrace.formats import TokenSource, _token_window
from headrace.pipeline import Loader

def make_source():
    return TokenSource(PATH, dtype="uint16", context=64, window_bytes=1 << 20,
                       block_bytes=1 << 16, reads="pread")

def first(ld, n):
    return [b["x"].copy() for _, b in zip(range(n), ld)]

with Loader(make_source(), batch_size=4, prefetch=0, seed=1) as ld:
    expected = first(ld, 5)
release, fills = threading.Event(), [0]
fill = _token_window.TokenWindow._fill
def stalled(self, block):  # storage that stops answering after two blocks, until released
    fills[0] += 1
    if fills[0] > 2 and not release.is_set():
        stuck_once()
        release.wait()
    return fill(self, block)
_token_window.TokenWindow._fill = stalled
said = threading.Lock()
def stuck_once():
    if said.acquire(blocking=False):
        print("stuck", flush=True)

src = make_source()
ld = Loader(src, batch_size=4, prefetch=0, seed=1)
try:
    for batch in ld:
        pass
    raise AssertionError("the loop ended without the interrupt")
except KeyboardInterrupt:
    pass
release.set()  # the storage answers again
assert len(first(ld, 20)) == 20  # the same loader reads on
ld.close()
with Loader(src, batch_size=4, prefetch=0, seed=1) as again:
    got = first(again, 5)
assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
"""


def test_a_caught_ctrl_c_while_pool_reads_are_stuck_leaves_loader_and_source_usable(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.bin"
    np.arange(1 << 20, dtype=np.uint16).tofile(path)
    rc, err, seconds = interrupt_when_stuck(_NOTEBOOK.replace("PATH", repr(str(path))))
    assert rc == 0, (rc, err[-2000:])
    assert seconds < 10, seconds
