"""Fill the pages a gather from a memory-mapped file will touch, in parallel, first.

NumPy gathers rows from a map one page fault at a time, in the gathering
thread; on a network mount (NFS, a FUSE file system) each fault is a round
trip, so a batch of rows at random costs one round trip per page, in turn.
Asking the kernel for those pages first (``MADV_POPULATE_READ`` on the deep
I/O pool, up to 64 calls at once, GIL released) puts a batch's faults in
flight together, and the gather then copies from memory. It also turns an I/O
error under the map into an exception naming the file and bytes instead of a
SIGBUS at the gather (a page evicted between the two can still fault later).

On pages already in memory the fill is pure cost (a pool hand-off and a
system call per run: 13-15% fewer batches/s on a page-cached table, measured
on a loaded machine), so :class:`FillPolicy` turns it off while the pages it
asks for are resident and on again when a gather by page faults turns slow.
Timing decides only whether to fill, never which bytes a batch holds.
:class:`ReadAhead` fills runs no read waits for yet (a windowed shuffle's
next window), a bounded number at a time.
"""

from __future__ import annotations

import resource
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from headrace.io import PAGE, deep_io_pool, deep_io_threads
from headrace.io._batch import results
from headrace.io._buffers import populate_file
from headrace.io._ranges import coalesce_arrays
from headrace.io._waits import wait_done

__all__ = ["FillPolicy", "MappedFile", "ReadAhead", "fill_now", "fill_pages", "page_runs"]

#: Ranges of one map closer than this are filled by one call (the pages between
#: are read too: a network mount's READ is 128 KiB or more anyway).
GAP = 64 << 10
#: The longest run one call fills: a populate keeps a READ or two in flight, so
#: longer stretches are cut into runs that threads fill side by side.
RUN = 1 << 20
#: Until a kernel says it has no ``MADV_POPULATE_READ`` (before Linux 5.14).
_supported = True


class MappedFile(Protocol):
    path: str
    map_address: int  # where the file's map starts
    size: int

    def check_size(self) -> None: ...


def page_runs(
    address: NDArray[np.int64], length: NDArray[np.int64], f: MappedFile
) -> list[tuple[int, int]]:
    """The page-aligned runs ``[start, end)`` that cover the byte ranges
    ``[address, address + length)`` lying in ``f``'s map, coalesced as the I/O
    engine coalesces reads (gaps up to :data:`GAP`, runs up to :data:`RUN`, so
    a window's rows merged into one stretch are still filled side by side).
    Ranges outside the map (copies in process memory) are left out."""
    lo, hi = f.map_address, f.map_address + f.size
    keep = (length > 0) & (address >= lo) & (address + length <= hi)
    if not keep.any():
        return []
    first = address[keep] // PAGE * PAGE
    end = -(-(address[keep] + length[keep]) // PAGE) * PAGE
    runs = coalesce_arrays(first, end - first, max_gap=GAP, max_span=RUN)
    stop = -(-hi // PAGE) * PAGE  # the map's last page is whole
    return [
        (a, min(b, stop)) for a, b in zip(runs.starts.tolist(), runs.ends.tolist(), strict=True)
    ]


class FillPolicy:
    """Whether a gather's pages are filled first; decided by what the last ones met.

    Starts on (a first batch from cold storage gains the most). After
    :attr:`CALM` fills in a row that found every page in memory (no major page
    fault in the filling threads: nothing was read from storage), it turns
    off: the gathers fault nothing. A gather that then takes longer than
    :attr:`SLOW_GATHER_S` and :attr:`SLOW_ROW_S` per row (page faults going to
    storage) turns it on again. Races between threads only change when it switches.
    ``keep_on`` (files on a network or FUSE mount) never turns it off: there the
    fill also turns a page the storage fails into an error instead of SIGBUS.
    """

    CALM = 8
    SLOW_GATHER_S = 0.010
    SLOW_ROW_S = 100e-6

    def __init__(self) -> None:
        self.on = True
        self.keep_on = False
        self._calm = 0
        #: fills made, runs filled, major page faults they took, switches on and off
        self.fills = self.runs = self.storage_faults = self.switches = 0

    def filled(self, runs: int, storage_faults: int) -> None:
        """A fill of ``runs`` runs that took ``storage_faults`` major page faults."""
        self.fills += 1
        self.runs += runs
        self.storage_faults += storage_faults
        self._calm = 0 if storage_faults else self._calm + 1
        if self.on and self._calm >= self.CALM and not self.keep_on:
            self.on = False
            self.switches += 1

    def gathered(self, seconds: float, rows: int) -> None:
        """A gather of ``rows`` rows with no fill first took ``seconds``."""
        if not self.on and seconds > max(self.SLOW_GATHER_S, rows * self.SLOW_ROW_S):
            self.on = True
            self._calm = 0
            self.switches += 1

    def to_dict(self) -> dict[str, int | bool]:
        return {
            "on": self.on,
            "fills": self.fills,
            "runs": self.runs,
            "storage_faults": self.storage_faults,
            "switches": self.switches,
        }


def _major_faults() -> int | None:
    """This thread's major page faults so far (None where the OS does not say)."""
    who = getattr(resource, "RUSAGE_THREAD", None)
    return None if who is None else resource.getrusage(who).ru_majflt


def fill_pages(jobs: Sequence[tuple[MappedFile, list[tuple[int, int]]]]) -> int:
    """Fault in every run of every file, spread over the deep I/O pool (one run per
    thread where there are threads enough: each call is a round trip on a network
    mount; 64 threads measured 1.5x the 8 of the shared pool at 20 ms), and return how
    many major page faults that took (reads from storage; 0: every page was in
    memory). Every run is done (or failed) before the first error is raised.

    The caller holds the maps open for the call. A run the storage cannot read
    raises :class:`~headrace.errors.StorageError` naming the file and its bytes
    (a file that shrank: :class:`~headrace.errors.ReadEOFError`, from
    ``check_size``). A kernel without the advice makes this a no-op from then on.
    """
    runs = [(f, a, b) for f, rs in jobs for a, b in rs]
    if not runs or not _supported:
        return 0
    n = min(len(runs), deep_io_threads())
    if n == 1:
        return _fill(runs)
    futures = [deep_io_pool().submit(_fill, runs[i::n]) for i in range(n)]
    return sum(results(futures, "other page fills also failed"))


def fill_now(f: MappedFile, start: int, end: int) -> None:
    """Fault in bytes ``[start, end)`` of ``f``'s map (page-aligned ``start``) in this
    thread, the GIL released while the storage answers (a page fault by a NumPy copy
    holds it: threads walking several files would wait on each other's round trips).
    Errors as :func:`fill_pages`'."""
    if _supported:
        _fill([(f, f.map_address + start, f.map_address + end)])


#: The most one read-ahead call fills: a populate keeps a READ or two in flight, so
#: a long run is cut into pieces that the pool's threads read side by side.
PIECE = 256 << 10
#: Read-ahead pieces in flight per :class:`ReadAhead`: half the deep pool's
#: default 64 threads, so fills a batch waits for find threads free.
AHEAD_DEPTH = 32


class ReadAhead:
    """Runs faulted in ahead of their reads, on the deep I/O pool, in pieces of
    :data:`PIECE`, at most ``depth`` at a time (the rest wait their turn here).

    Nothing waits for them; a failed piece is left to the read that needs its
    pages (which fills or faults them again and reports the error then).
    """

    def __init__(self, depth: int = AHEAD_DEPTH) -> None:
        self.depth = depth
        self._lock = threading.RLock()  # a done callback may run inside submit or cancel
        self._queue: deque[tuple[MappedFile, int, int]] = deque()
        self._running: set[Future[int]] = set()
        self._closed = False

    def add(self, jobs: Sequence[tuple[MappedFile, list[tuple[int, int]]]]) -> None:
        if not _supported:
            return
        with self._lock:
            if self._closed:
                return
            self._queue.extend(
                (f, p, min(b, p + PIECE))
                for f, rs in jobs
                for a, b in rs
                for p in range(a, b, PIECE)
            )
            self._pump()

    def _pump(self) -> None:
        pool = deep_io_pool()
        while self._queue and len(self._running) < self.depth and not self._closed:
            fut = pool.submit(_fill, [self._queue.popleft()])
            self._running.add(fut)
            fut.add_done_callback(self._done)

    def _done(self, fut: Future[int]) -> None:
        with self._lock:
            self._running.discard(fut)
            self._pump()

    def wait(self) -> None:
        """Until every piece added so far is done (tests, benchmarks)."""
        while True:
            with self._lock:
                running = list(self._running)
                if not running and not self._queue:
                    return
            wait_done(running)

    def close(self) -> None:
        """Drop the pieces not started and wait for the running ones (so none touches
        a map being closed)."""
        with self._lock:
            self._closed = True
            self._queue.clear()
            running = list(self._running)
        for f in running:
            f.cancel()
        wait_done(running)


def _fill(runs: list[tuple[MappedFile, int, int]]) -> int:
    global _supported
    before, slow = _major_faults(), 0
    for f, a, b in runs:
        t0 = time.perf_counter()
        lo, hi = a - f.map_address, min(b - f.map_address, f.size)
        if not populate_file(a, b - a, f.path, lo, hi, f.check_size):
            _supported = False  # an older kernel: the gather faults them in as before
            break
        # Without a fault count: a call this slow went to storage (resident: ~2 us).
        slow += time.perf_counter() - t0 > 100e-6
    after = _major_faults()
    return slow if before is None or after is None else after - before
