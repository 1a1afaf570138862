"""RangeReader: the range-read engine every local reader uses."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast, get_args

import numpy as np
from numpy.typing import NDArray

from headrace._closing import Closing
from headrace.errors import ConfigError, ReadEOFError
from headrace.io import _in_flight as in_flight
from headrace.io._adaptive import MAPPED, PARALLEL, AdaptivePolicy, AdaptiveState
from headrace.io._buffers import PAGE
from headrace.io._file import LocalFile
from headrace.io._mapped import (
    LONG_RUN,
    ask_for_runs,
    mapped_view,
    pages_of_ranges,
    pages_touched,
    populate_ranges,
)
from headrace.io._open_files import OpenFiles
from headrace.io._pool import deep_io_pool, deep_io_threads, io_pool, io_threads
from headrace.io._positional import DEFAULT_ALIGNMENT, read_spans
from headrace.io._ranges import (
    DEFAULT_MAX_GAP,
    DEFAULT_MAX_SPAN,
    INT64_MAX,
    Ranges,
    as_ranges,
    check_limits,
    whole_number,
)
from headrace.io._stats import ReadStats, StatsRecorder
from headrace.io._uring import RING_ENTRIES, Ring, ring_pool

__all__ = ["ENGINES", "STRATEGIES", "Engine", "ReaderConfig", "RangeReader", "Strategy"]

_T = TypeVar("_T")

Strategy = Literal["adaptive", "mmap", "pread", "odirect", "odirect-serial"]
STRATEGIES: tuple[str, ...] = get_args(Strategy)
Engine = Literal["auto", "uring", "threads"]
ENGINES: tuple[str, ...] = get_args(Engine)
URING_ENV = "HEADRACE_IO_URING"
ODIRECT = "odirect"
DEFAULT_ODIRECT_IN_FLIGHT = 32
# The kernel's default read-around of a mapped fault: what the adaptive check
# counts as one fault of a long missing range.
READ_AROUND = 128 << 10
# pread on io_uring: reads in flight cost ring entries, not threads, and a slow
# mount (10 ms per read) keeps every one of them waiting in parallel.
DEFAULT_URING_PREAD_IN_FLIGHT = 64
#: Files an adaptive reader remembers as checked (their first mapped read looked at):
#: past it, an arbitrary one is forgotten for each added, and checked again when read
#: (a residency check). Unbounded, a reader of millions of small files kept every path.
CHECKED = 1 << 16


@dataclass(frozen=True, kw_only=True, slots=True)
class ReaderConfig:
    """How a :class:`RangeReader` reads.

    ``strategy``: ``"mmap"`` (direct mapped indexing, serial by nature),
    ``"pread"`` (coalesced positional reads, ``in_flight`` at a time, on the
    shared I/O pool), ``"odirect"`` (coalesced aligned O_DIRECT reads,
    ``in_flight`` at a time, default 32, on the deep pool),
    ``"odirect-serial"`` (the same, one read at a time: a baseline), or
    ``"adaptive"`` (mapped, switching to parallel pread when that is cheaper;
    see :class:`AdaptivePolicy`). ``in_flight`` defaults to the I/O pool's
    size for pread on threads (it counts the calling thread, which reads too,
    and is capped at the deep pool's size plus one) and to 64 for pread on
    io_uring, where a read in flight costs a ring entry, not a thread.

    ``engine`` runs the positional reads (pread, O_DIRECT): ``"uring"`` (one
    io_uring ring per batch, filled and reaped by the calling thread, up to
    256 in flight; a :class:`ConfigError` where io_uring is unavailable),
    ``"threads"`` (``in_flight`` loops of ``os.preadv`` on the I/O pools) or
    ``"auto"``: uring for batches of more than one read in flight where
    io_uring works and ``HEADRACE_IO_URING`` is not ``0``, else threads.

    ``max_idle_files``: files kept open while no read of them runs; past it the
    least recently read are closed, and reopened (checked to be the same file)
    when read again. ``None``: a quarter of the process's descriptor limit when
    the reader is made (:func:`~headrace.io._open_files.default_max_idle`: 256
    under ``ulimit -n 1024``), shared with the other readers and sources that keep
    files open in this process (:func:`~headrace.io._open_files.idle_share`).
    """

    strategy: Strategy = "adaptive"
    engine: Engine = "auto"
    max_gap: int = DEFAULT_MAX_GAP
    max_span: int = DEFAULT_MAX_SPAN
    in_flight: int | None = None
    alignment: int = DEFAULT_ALIGNMENT
    policy: AdaptivePolicy = field(default_factory=AdaptivePolicy)
    max_idle_files: int | None = None

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigError(
                f"Unknown read strategy {self.strategy!r}; choose one of {', '.join(STRATEGIES)}."
            )
        if self.engine not in ENGINES:
            raise ConfigError(
                f"Unknown read engine {self.engine!r}; choose one of {', '.join(ENGINES)}."
            )
        check_limits(self.max_gap, self.max_span)
        if self.in_flight is not None and (not whole_number(self.in_flight) or self.in_flight < 1):
            raise ConfigError(
                f"in_flight must be a positive integer or None (got {self.in_flight!r})."
            )
        m = self.max_idle_files
        if m is not None and (not whole_number(m) or m < 0):
            raise ConfigError(f"max_idle_files must be an integer >= 0 or None (got {m!r}).")
        a = self.alignment
        if not whole_number(a) or a < 512 or a & (a - 1):
            raise ConfigError(
                f"alignment must be a power of two of at least 512 bytes (got {a!r})."
            )
        for name in ("max_gap", "max_span", "in_flight", "alignment", "max_idle_files"):
            if (v := getattr(self, name)) is not None:  # a NumPy integer (a computed size)
                object.__setattr__(self, name, int(v))

    def depth(self, *, ring: bool = False) -> int:
        """Reads in flight for the positional modes (the caller included)."""
        if self.strategy == "odirect-serial":
            return 1
        if self.in_flight is not None:
            return self.in_flight
        if self.strategy == ODIRECT:
            return DEFAULT_ODIRECT_IN_FLIGHT
        return DEFAULT_URING_PREAD_IN_FLIGHT if ring else io_threads()


def uring_enabled() -> bool:
    """False when ``HEADRACE_IO_URING`` turns io_uring off for ``engine="auto"``."""
    value = os.environ.get(URING_ENV, "").strip().lower()
    if value in ("", "1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(
        f"{URING_ENV} must be 1, true, yes or on (io_uring where it works), or 0, false, no "
        f"or off (got {value!r})."
    )


def _pool_for(depth: int) -> tuple[int, Executor | None]:
    if depth <= 1:
        return 1, None
    # The caller runs one loop itself, so depth - 1 pool threads suffice.
    if depth - 1 <= io_threads():
        return depth, io_pool()
    return min(depth, deep_io_threads() + 1), deep_io_pool()


class RangeReader(Closing):
    """Reads byte ranges of local files with one strategy; results in caller order.

    Keeps one :class:`LocalFile` per path open (mapped and positional reads share
    it) while a read of it runs, and up to ``config.max_idle_files`` more that no
    read uses: the least recently read past that are closed
    (:class:`~headrace.io._open_files.OpenFiles`; ``max_idle_files`` says how many
    it keeps now). Safe to call from several
    threads. ``clock``
    times reads for the adaptive policy and the stats; ``opener`` opens a
    path (tests wrap :class:`LocalFile` to inject latency or faults).
    """

    def __init__(
        self,
        config: ReaderConfig | Strategy = "adaptive",
        *,
        clock: Callable[[], float] = time.perf_counter,
        opener: Callable[[str], LocalFile] = LocalFile,
    ) -> None:
        if isinstance(config, str):
            config = ReaderConfig(strategy=config)
        self.config = config
        self._clock = clock
        self._opener = opener
        idle = config.max_idle_files
        self._files = OpenFiles(opener, idle)
        self._policy_lock = threading.Lock()
        self._adaptive = AdaptiveState(config.policy) if config.strategy == "adaptive" else None
        self._checked: set[str] = set()  # files whose first mapped read was checked
        s = config.strategy
        self._fixed_mode = MAPPED if s == "adaptive" else ("odirect" if "odirect" in s else s)
        self._stats = StatsRecorder(self._fixed_mode)

    def __getstate__(self) -> dict[str, Any]:
        """A copy for another process (a spawned worker's): a reader of the same config,
        clock and opener; its open files, stats and policy state are this process's."""
        return {"config": self.config, "clock": self._clock, "opener": self._opener}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["config"], clock=state["clock"], opener=state["opener"]
        )

    # -- files ---------------------------------------------------------------

    def file(self, path: str) -> LocalFile:
        """The open file for ``path`` (opened on first use).

        Not held for the caller: once ``max_idle_files`` other files are read after
        it, it may be closed. The reader's own reads hold their file while they run.
        """
        key = str(path)
        f = self._files.pin(key)
        self._files.unpin(key)
        return f

    def size(self, path: str) -> int:
        """The size of ``path`` in bytes, now."""
        key = str(path)
        f = self._files.pin(key)
        try:
            return f.current_size()
        finally:
            self._files.unpin(key)

    @property
    def max_idle_files(self) -> int:
        """Idle files kept open at most (``config.max_idle_files`` or its default)."""
        return self._files.max_idle

    @property
    def open_files(self) -> int:
        """Files open now: those being read and the idle ones kept."""
        return len(self._files)

    @property
    def reopened(self) -> int:
        """Files opened again after being closed to keep the idle ones under the bound."""
        return self._files.reopened

    @property
    def stats(self) -> ReadStats:
        return self._stats.snapshot()

    @property
    def closed(self) -> bool:
        return self._files.closed

    def close(self) -> None:
        """Close every open file (one being read: as its read returns)."""
        self._files.close()

    def __repr__(self) -> str:
        return f"RangeReader({self.config.strategy!r}, files={len(self._files)})"

    # -- reads ---------------------------------------------------------------

    def read(self, path: str, ranges: Ranges) -> list[NDArray[np.uint8]]:
        """One new array per ``(offset, length)`` range, in caller order."""
        offsets, lengths = as_ranges(ranges)
        lens = lengths.tolist()

        def scatter(buf: NDArray[np.uint8], pos: NDArray[np.int64]) -> list[NDArray[np.uint8]]:
            return [buf[p : p + n].copy() for p, n in zip(pos.tolist(), lens, strict=True)]

        return self._fetch(str(path), offsets, lengths, scatter)

    def read_into(self, path: str, ranges: Ranges, outs: Sequence[Any]) -> None:
        """Fill ``outs[i]`` (writable, contiguous, exactly ``length_i`` bytes: a buffer, or a
        CPU tensor) with range ``i``.

        If the read fails, the buffers' contents are unspecified.
        """
        offsets, lengths = as_ranges(ranges)
        if len(outs) != len(offsets):
            raise ConfigError(f"read_into got {len(offsets)} ranges but {len(outs)} buffers.")
        lens = lengths.tolist()
        dests = [_byte_view(o, n, i) for i, (o, n) in enumerate(zip(outs, lens, strict=True))]

        def scatter(buf: NDArray[np.uint8], pos: NDArray[np.int64]) -> None:
            for d, p, n in zip(dests, pos.tolist(), lens, strict=True):
                d[:] = buf[p : p + n]

        self._fetch(str(path), offsets, lengths, scatter)

    def read_rows(
        self,
        path: str,
        rows: Sequence[int] | NDArray[np.integer[Any]],
        row_bytes: int,
        *,
        base: int = 0,
        stride: int | None = None,
        out: NDArray[np.uint8] | None = None,
    ) -> NDArray[np.uint8]:
        """Rows of ``row_bytes`` at ``base + rows[i] * stride`` as one ``(N, row_bytes)`` array.

        ``stride`` defaults to ``row_bytes``. Rows may repeat and come in any
        order. The gather is one vectorised fancy index (no per-row Python),
        into ``out`` when given (a CPU tensor too, through DLPack: the array
        returned is then a view of it).
        """
        idx = np.asarray(rows)
        if idx.ndim != 1 or not (idx.size == 0 or np.issubdtype(idx.dtype, np.integer)):
            raise ConfigError(
                f"rows must be a 1-D sequence of integers (got shape {idx.shape}, "
                f"dtype {idx.dtype})."
            )
        stride = row_bytes if stride is None else stride
        for name, v, lo in (("row_bytes", row_bytes, 1), ("stride", stride, 1), ("base", base, 0)):
            if not whole_number(v) or v < lo:
                raise ConfigError(f"{name} must be an integer >= {lo} (got {v!r}).")
        if idx.size and int(idx.min()) < 0:
            raise ConfigError(f"rows must be non-negative (got {int(idx.min())}).")
        n = len(idx)
        if out is None:
            out = np.empty((n, row_bytes), dtype=np.uint8)
        else:
            if not isinstance(cast(Any, out), np.ndarray):  # a tensor, say
                given, out = out, _host_array(out, "out")
                if out is None:
                    raise ConfigError(
                        f"out must be a uint8 array of shape {(n, row_bytes)} (got a "
                        f"{type(given).__name__})."
                    )
            if out.shape != (n, row_bytes) or out.dtype != np.uint8:
                raise ConfigError(
                    f"out must be a uint8 array of shape {(n, row_bytes)} (got {out.dtype} "
                    f"{out.shape})."
                )
            if not out.flags.writeable:
                raise ConfigError("out is read-only; read_rows needs a writable array.")
            strides = zip(out.strides, out.shape, strict=True)
            if out.size and any(st == 0 and k > 1 for st, k in strides):
                # An expanded (broadcast) tensor: its rows (or bytes) are one memory, and
                # the last row written would be every row.
                raise ConfigError(
                    f"out's rows are one memory (strides {out.strides}: an expanded "
                    "tensor); read_rows needs an array with memory of its own for each row."
                )
        if n == 0:
            return out
        top = int(idx.max())
        if int(base) + top * int(stride) + row_bytes > INT64_MAX:
            # int64 offsets would wrap (row 2**62 of 4 bytes read row 0): past any file.
            i = int(np.argmax(idx))
            start = int(base) + top * int(stride)
            raise ReadEOFError(
                f"{path}: row {i} = bytes [{start}, {start + row_bytes}) (row index {top}, "
                f"stride {stride}, base {base}) is past the end of the file, which has "
                f"{self.size(str(path))} bytes"
            )
        offsets = int(base) + idx.astype(np.int64) * int(stride)
        lengths = np.full(n, row_bytes, dtype=np.int64)
        dest = out

        def scatter(buf: NDArray[np.uint8], pos: NDArray[np.int64]) -> None:
            # A sliding window makes every byte offset a "row" without a copy, so one
            # fancy index gathers all rows, at any (unaligned) offset. Made as a view
            # of buf's bytes (~1 us): NumPy's sliding_window_view took ~9 us a call,
            # 11% of a padded-row loader's GIL-held samples (2c, 2026-12-06).
            windows = np.ndarray(
                (buf.size - row_bytes + 1, row_bytes), np.uint8, buffer=buf, strides=(1, 1)
            )
            dest[...] = windows[pos]

        self._fetch(str(path), offsets, lengths, scatter)
        return out

    # -- the engine ----------------------------------------------------------

    def _fetch(
        self,
        path: str,
        offsets: NDArray[np.int64],
        lengths: NDArray[np.int64],
        scatter: Callable[[NDArray[np.uint8], NDArray[np.int64]], _T],
    ) -> _T:
        """Bring the requested bytes into memory and hand them to ``scatter``.

        Request ``i`` is ``buf[pos[i] : pos[i] + lengths[i]]``. The scatter is
        timed with the read: for mapped reads the copy out of the map *is*
        the read.

        The file is pinned until the scatter has copied out of it, so it is never
        closed under a read; no view of its map outlives this call, so closing it
        later unmaps it.
        """
        f = self._files.pin(path)
        try:
            return self._fetch_pinned(f, path, offsets, lengths, scatter)
        finally:
            self._files.unpin(path)

    def _fetch_pinned(
        self,
        f: LocalFile,
        path: str,
        offsets: NDArray[np.int64],
        lengths: NDArray[np.int64],
        scatter: Callable[[NDArray[np.uint8], NDArray[np.int64]], _T],
    ) -> _T:
        ends = offsets + lengths
        end = int(ends.max(initial=0))
        if end > f.size:
            size = f.current_size()
            if end > size:
                raise _past_end(path, offsets, ends, size, f.size)
        requested = int(lengths.sum())
        # A read of no bytes says nothing of the storage: it is no probe, no check of
        # its file, and the policy does not see it. Timed at ~0 s, it counted as a fast
        # mapped probe and sent a reader on slow storage back to mapped reads; as a
        # file's first read it marked the file checked, so the next read of cold rows
        # walked the map one fault at a time.
        timed = requested > 0
        mode, probe = self._choose(timed)
        if mode == MAPPED and self._adaptive is not None and not f.mappable:
            # A filesystem that cannot map (ENODEV) is not a question of timing: this
            # file is read in parallel, and the policy still rules the reader's others.
            mode = PARALLEL
        t0 = self._clock()
        estimate: float | None = None
        if (
            mode == MAPPED
            and self._adaptive is not None
            and timed
            and (probe or path not in self._checked)
        ):
            estimate = self._check_mapped(f, offsets, lengths, end)
            if estimate is not None:
                mode = PARALLEL
        t1 = self._clock()
        try:
            buf, pos, nread, engine = self._fetch_mode(mode, f, offsets, lengths, end)
        except ReadEOFError as exc:
            size = f.current_size()
            said = _past_end_text(offsets, ends, size, f.size)
            if end <= size or said in str(exc):  # grew back, or a mapped read's own words
                raise
            # Shrank under a positional read, whose error names a coalesced span (bytes
            # no caller asked for): a note names the caller's first range past the end,
            # as a mapped read's error does.
            exc.add_note(said)
            raise
        if engine or f.network:  # read already (a network map's pages were populated)
            result = scatter(buf, pos)
        else:  # a local map's gather: the copy faults the pages in, so it is the read
            key = in_flight.begin(path, int(offsets.min()) if len(offsets) else 0, end)
            try:
                result = scatter(buf, pos)
            finally:
                in_flight.end(key)
        del buf  # a mapped view pins the map; let close() unmap it
        t2 = self._clock()
        self._stats.record(
            mode=mode,
            rows=len(offsets),
            requested=requested,
            read=nread,
            seconds=t2 - t0,
            engine=engine,
        )
        if timed:
            self._observe(mode, probe, t2 - t1, len(offsets), estimate)
            if self._adaptive is not None:
                # Marked once the policy has seen this read: a read of the same file
                # that started meanwhile checks too, rather than walk it mapped.
                with self._policy_lock:
                    if path not in self._checked and len(self._checked) >= CHECKED:
                        self._checked.pop()
                    self._checked.add(path)
        return result

    def _check_mapped(
        self, f: LocalFile, offsets: NDArray[np.int64], lengths: NDArray[np.int64], end: int
    ) -> float | None:
        """Before a mapped read that may fault: ``None`` to read mapped, or the
        estimated seconds of a mapped read that would be slow (read in parallel).

        Rows on resident pages cost no I/O. The first missing row (its first
        ``READ_AROUND`` bytes if longer) is read alone and timed: a mapped read
        pays about that per fault, one fault after another, and faults once
        per page the missing rows lie on (the map is advised random), once per
        ``READ_AROUND`` bytes of those of ``LONG_RUN`` or more (asked for first).
        So a mapped read on slow storage costs one round trip, not one per row.

        The sample is read positionally and whole. Faulted in through the map,
        or read a page of it only, the rest of the row then looked like a
        sequential miss to the kernel, whose readahead added READs: on slowfs
        (64 READs in flight at most) the next read of 64 rows took 2-3 round
        trips instead of one.
        """
        if _mapped_view(f, offsets, lengths, end) is None or end == 0:  # None: grew past its map
            return None
        # An empty row reads nothing: never the sample, nor a fault.
        missing = np.flatnonzero(~f.resident(offsets, lengths) & (lengths > 0))
        slow, sample_s, faults = False, 0.0, 0
        if missing.size:
            i = int(missing[0])
            t0 = self._clock()
            f.pread(int(offsets[i]), min(int(lengths[i]), READ_AROUND))
            sample_s = self._clock() - t0
            off, n = offsets[missing], lengths[missing]
            # The map is advised random: a row shorter than LONG_RUN faults its pages in
            # one at a time; a longer one is asked for first, a read-around at a time.
            # A page faults once, however many rows lie on it (a row drawn twice, rows
            # sharing a page): counted per row, 16 draws of one row were 16 faults.
            long = n >= LONG_RUN
            faults = (
                pages_touched(off[~long], n[~long]) // PAGE
                + pages_touched(off[long], n[long], READ_AROUND) // READ_AROUND
            )
            slow = self.config.policy.mapped_too_slow(sample_s, faults)
        self._stats.checked(declined=slow)
        return sample_s * faults if slow else None

    def _fetch_mode(
        self,
        mode: str,
        f: LocalFile,
        offsets: NDArray[np.int64],
        lengths: NDArray[np.int64],
        end: int,
    ) -> tuple[NDArray[np.uint8], NDArray[np.int64], int, str]:
        """``(buffer, positions, bytes read, engine)``; the engine is "" for mapped reads."""
        cfg = self.config
        if mode == MAPPED:
            view = _mapped_view(f, offsets, lengths, end)
            if view is not None:
                if f.network:  # a failed page there: an error now, not SIGBUS at the copy
                    populate_ranges(f, view, offsets, lengths, cfg.max_gap)
                else:
                    ask_for_runs(view, offsets, lengths)
                return view, offsets, pages_of_ranges(offsets, lengths), ""
            mode = PARALLEL  # the file grew past its mapping
        ring: Ring | None = None
        try:
            # Taken inside the try: a ring (a descriptor and three maps, which no
            # collector closes) dropped by a Ctrl-C before it was lost for good.
            ring = self._ring()
            if ring is None:
                depth, pool = _pool_for(cfg.depth())
            else:
                depth, pool = min(cfg.depth(ring=True), RING_ENTRIES), None
            buf, pos, nread = read_spans(
                f,
                offsets,
                lengths,
                max_gap=cfg.max_gap,
                max_span=cfg.max_span,
                depth=depth,
                pool=pool,
                alignment=cfg.alignment if mode == ODIRECT else 0,
                ring=ring,
            )
        finally:
            if ring is not None:
                ring_pool().release(ring)
        return buf, pos, nread, "threads" if ring is None else "uring"

    def _ring(self) -> Ring | None:
        """A ring for this batch, or ``None`` for the thread engine."""
        engine = self.config.engine
        if engine == "threads":
            return None
        if engine == "auto" and (self.config.depth() <= 1 or not uring_enabled()):
            # One read at a time is one syscall per read either way; the
            # thread engine runs it in the caller with less Python per read.
            return None
        pool = ring_pool()
        ring = pool.acquire()
        if ring is None and engine == "uring":
            raise ConfigError(
                f"io_uring is not available here ({pool.reason or pool.failure}); use "
                "engine='auto' (which falls back to threads) or engine='threads'."
            )
        return ring

    def _choose(self, timed: bool = True) -> tuple[str, bool]:
        """The mode of the next read and whether it probes; ``timed=False`` (a read of
        no bytes): the current mode, without counting the read towards a probe."""
        if self._adaptive is None:
            return self._fixed_mode, False
        with self._policy_lock:
            if not timed:
                return self._adaptive.mode, False
            return self._adaptive.choose()

    def _observe(
        self, mode: str, probe: bool, seconds: float, rows: int, estimate: float | None
    ) -> None:
        """Tell the policy what a read cost; ``estimate``: the mapped read it replaced."""
        if self._adaptive is None:
            return
        with self._policy_lock:
            a = self._adaptive
            switched = 0
            if estimate is not None:
                switched += a.observe(MAPPED, estimate, rows, probe=probe)
                probe_of = False  # the parallel read stood in for the mapped one
            else:
                probe_of = probe
            switched += a.observe(mode, seconds, rows, probe=probe_of)
            current = a.mode
        self._stats.policy(current_mode=current, switched=switched, probe=probe)


def _past_end(
    path: str, offsets: NDArray[np.int64], ends: NDArray[np.int64], size: int, opened: int
) -> ReadEOFError:
    """The error for a read whose ranges end past ``size``, the file's size now: it
    names the first such range, as the caller gave it (``opened``: the size at open)."""
    return ReadEOFError(f"{path}: {_past_end_text(offsets, ends, size, opened)}")


def _past_end_text(
    offsets: NDArray[np.int64], ends: NDArray[np.int64], size: int, opened: int
) -> str:
    i = int(np.argmax(ends > size))
    shrank = f" (it had {opened} bytes when opened: it shrank)" if size < opened else ""
    return (
        f"range {i} = bytes [{int(offsets[i])}, {int(ends[i])}) is past the end of the file, "
        f"which has {size} bytes{shrank}"
    )


def _mapped_view(
    f: LocalFile, offsets: NDArray[np.int64], lengths: NDArray[np.int64], end: int
) -> NDArray[np.uint8] | None:
    """:func:`mapped_view`, whose refusal of a file that shrank under its map names the
    caller's first range past the end (its own names the last byte asked for only)."""
    try:
        return mapped_view(f, end)
    except ReadEOFError as exc:
        size = f.current_size()
        if end <= size:  # grew back meanwhile: the guard's own words
            raise
        raise _past_end(f.path, offsets, offsets + lengths, size, f.size) from exc


def _host_array(obj: Any, what: str) -> NDArray[Any] | None:
    """``obj`` (a tensor, or another array exporting DLPack) as a NumPy array over its
    memory, ``None`` if it exports none; a ConfigError naming ``what`` where it cannot
    (on a GPU, or needing a gradient)."""
    if not hasattr(obj, "__dlpack__"):
        return None
    try:
        return np.from_dlpack(obj)
    except (TypeError, ValueError, RuntimeError, BufferError) as exc:
        raise ConfigError(
            f"{what} ({type(obj).__name__}) cannot be read into: {exc}. Read into host "
            "memory (a CPU array or tensor)."
        ) from exc


def _tensor_bytes(obj: Any) -> Any:
    """A contiguous CPU torch tensor that needs no gradient as a flat uint8 tensor of its
    memory (NumPy has no bfloat16 or float8 to take it as: "Unsupported dtype in
    DLTensor"); anything else as it is, for DLPack to take or refuse."""
    if not (type(obj).__module__.startswith("torch") and hasattr(obj, "is_contiguous")):
        return obj
    if obj.requires_grad or obj.device.type != "cpu":
        return obj
    if not obj.is_contiguous():
        raise TypeError(f"a tensor of strides {tuple(obj.stride())}")
    try:
        uint8 = obj.new_empty(0).byte().dtype  # torch.uint8, without importing torch here
        return obj.reshape(-1).view(uint8)
    except (RuntimeError, TypeError):  # a conjugate or quantized one, say: DLPack's word
        return obj


def _byte_view(buf: Any, nbytes: int, i: int) -> NDArray[np.uint8]:
    try:
        try:
            mv = memoryview(buf)
        except TypeError:
            # A CPU tensor exports no buffer, but its memory through DLPack.
            arr = _host_array(_tensor_bytes(buf), f"Buffer {i}")
            if arr is None:
                raise
            mv = memoryview(cast(Any, arr))
        if mv.nbytes:
            # An empty buffer of any shape holds a range of no bytes: its cast refused
            # a (0, 5) array ("cannot cast view with zeros in shape").
            mv = mv.cast("B")
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"Buffer {i} is not a contiguous buffer ({exc}).") from exc
    if mv.readonly:
        raise ConfigError(f"Buffer {i} is read-only; read_into needs writable buffers.")
    if mv.nbytes != nbytes:
        raise ConfigError(f"Buffer {i} holds {mv.nbytes} bytes; its range asks for {nbytes}.")
    return np.frombuffer(mv, dtype=np.uint8) if nbytes else np.empty(0, dtype=np.uint8)
