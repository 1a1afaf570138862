"""``headrace probe PATH``: measure a path's storage as a loader would read it.

Sequential rate, then random 4 KiB and row-sized reads, for mapped reads,
positional reads (1 to 64 in flight) and O_DIRECT (1 to 64 in flight), all
through :class:`headrace.io.RangeReader`, the engine the loaders use. Random
positional reads run on both engines, threads and io_uring (where it works).

Fairness rules, because caches lie:

* every measurement reads its own *stripe* of the file (interleaved 1 MiB
  chunks, requests kept clear of chunk edges so the kernel's read-around
  cannot reach a neighbour's stripe), so no mode rides another's cache;
* measurements run in two rounds, the second in reverse order (A B C, C B A),
  so slow drift (other tenants, thermal, a cache warming) hits all modes alike;
* the file's cached pages are dropped before every measurement
  (``POSIX_FADV_DONTNEED``) so buffered reads come from the device, as O_DIRECT
  always does: a mapped read faults in a whole read-around window (8 MiB here), far
  past any guard between stripes, and dropped only once, the second mapped
  measurement read the first one's window (857 MB/s of "random" 4100-byte reads
  against 55 for 4096); what was in memory as each one started is measured
  (``mincore``) and reported as ``cached_before``;
* every result is checked against a plain ``pread`` of the same ranges made
  outside the timed interval.

MB in the output is 10^6 bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import hashlib
import mmap
import os
import stat
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Generic, NoReturn, TypeVar

import numpy as np

from headrace._messages import write_json
from headrace._store_option import add_store_option, store_options
from headrace.bench._probe_stats import probe_stats
from headrace.bench._probe_table import BLOCK, table
from headrace.emulate._mounts import gone_mount
from headrace.errors import ConfigError, HeadraceError
from headrace.io import RangeReader, ReaderConfig
from headrace.io._file import file_url_path, gone_hint, url_typo
from headrace.io._in_flight import Waiting, begin, end, reads_in_flight
from headrace.io._mounts import MEMORY_FS, Mount, mount_of, network_mount_of, network_type
from headrace.io._resident import drop_pages, resident_ranges
from headrace.io._uring import ring_pool

__all__ = ["configure", "run"]

MiB = 1024 * 1024
CHUNK = MiB
SEQ_REQUEST = MiB
#: page runs closer than this are populated as one by a mapped read on a network mount
#: (``headrace.io._mapped``): mapped requests lie further apart, to be one READ each
POPULATE_GAP = 64 * 1024
#: the most bytes one measurement reads in a round (one call, held in memory whole): a
#: sequential one read 1/24 of the file, 42 GiB a round of a 1 TiB dataset file
ROUND_BUDGET = 256 * MiB
#: a read waiting this long is said on stderr (stalled storage?), again as it doubles
STALL_S = 10.0

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True, slots=True)
class Measurement:
    mode: str  # mmap | pread | odirect
    pattern: str  # sequential | random
    request_bytes: int
    in_flight: int
    engine: str = ""  # threads | uring for positional reads; "" for mmap

    def config(self) -> ReaderConfig:
        strategy = {"mmap": "mmap", "pread": "pread", "odirect": "odirect"}[self.mode]
        # max_gap=0: random requests are spaced apart, so each is its own
        # read; sequential ones still merge into max_span spans, as loaders do.
        return ReaderConfig(
            strategy=strategy,  # type: ignore[arg-type]
            in_flight=self.in_flight,
            max_gap=0,
            engine=self.engine or "threads",  # type: ignore[arg-type]
        )


@dataclass(kw_only=True, slots=True)
class Result:
    mode: str
    pattern: str
    request_bytes: int
    in_flight: int
    #: the most requests a round could have in flight: below ``in_flight`` when a
    #: round had fewer requests than the depth (--ops, or a small file's stripes)
    in_flight_reached: int
    engine: str
    ops: int
    seconds: float
    #: ``None`` (null) where the measurement timed 0 s (:func:`rates`)
    ops_per_s: float | None
    mb_per_s: float | None
    verified: bool
    #: the share of its requests whose pages were all in memory as it started (the
    #: rounds' mean): 0 where the drop worked; figures above 0 are partly memory reads
    cached_before: float


@dataclass(kw_only=True, slots=True)
class TimedResult(Result):
    """A row whose requests were timed one by one (an object's GETs, small files)."""

    latency_p50_ms: float


class ProbeInterrupted(BaseException):
    """Ctrl-C or SIGTERM mid-probe, with the report of what was measured before it
    (``report``, marked ``interrupted``) and the interrupt (``cause``) to go on with once
    that is printed and written: a long probe stopped printed nothing of its minutes. A
    BaseException, as the interrupt it carries."""

    def __init__(self, report: dict[str, Any], cause: KeyboardInterrupt | SystemExit) -> None:
        super().__init__("Ctrl-C" if isinstance(cause, KeyboardInterrupt) else "SIGTERM")
        self.report, self.cause = report, cause


def interrupted_skip(stopped: BaseException) -> str:
    """Why a measurement has no figures: the probe was stopped before it ran."""
    how = "Ctrl-C" if isinstance(stopped, KeyboardInterrupt) else "SIGTERM"
    return f"not measured: the probe was interrupted ({how}) before it ran"


def probe_report(
    head: dict[str, Any],
    rounds: int,
    results: Sequence[Result],
    skipped: list[dict[str, Any]],
    stopped: KeyboardInterrupt | SystemExit | None,
) -> dict[str, Any]:
    """``head``, then its rounds' figures; raised in ProbeInterrupted if ``stopped``."""
    out = {
        **head,
        "mb": "10^6 bytes",
        "rounds": rounds,
        #: stopped (Ctrl-C, SIGTERM) before every round was done: figures of those done
        "interrupted": stopped is not None,
        "results": [asdict(x) for x in results],
        "skipped": skipped,
    }
    if stopped is not None:
        raise ProbeInterrupted(out, stopped)
    return out


def rates(ops: int, nbytes: int, seconds: float) -> tuple[float | None, float | None]:
    """Requests and MB a second; ``None`` for a measurement timed at 0 s (quicker than
    the clock ticks), whose rates would be infinite: JSON has no Infinity (Python wrote
    it, and ``jq`` and browsers refuse the file)."""
    if seconds <= 0:
        return None, None
    return round(ops / seconds, 1), round(nbytes / seconds / 1e6, 2)


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(t)
    except (ValueError, OverflowError):  # "infG": float("inf") has no int
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 256M)") from None


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        help="a file to probe, a directory to hold a scratch file, or an object URL "
        "(s3://bucket/key: ranged GETs of that object)",
    )
    parser.add_argument(
        "--size",
        type=_size,
        default=1024 * MiB,
        help="scratch file size when PATH is a directory (default 1G)",
    )
    parser.add_argument(
        "--row-bytes", type=int, default=4100, help="the row-sized request (default 4100)"
    )
    parser.add_argument(
        "--ops", type=int, default=4096, help="random requests per measurement (default 4096)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for offsets and scratch data")
    parser.add_argument(
        "--keep-cache", action="store_true", help="do not drop the file's cached pages first"
    )
    parser.add_argument(
        "--json",
        metavar="PATH",
        default=None,
        help="also write results as JSON here (- for stdout; the table then goes to stderr)",
    )
    parser.add_argument(
        "--endpoint",
        default=None,
        help="object URLs: the store's endpoint (s3://: an S3-compatible one, path-style, "
        "credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY; gs://, az://: an "
        "emulator's or a private endpoint, credentials from the environment or "
        "--store-option config.KEY=VALUE)",
    )
    parser.add_argument("--region", default=None, help="object URLs (s3://): the region")
    add_store_option(parser)


def filesystem_of(path: str) -> dict[str, Any]:
    """fstype, device and mount point of the mount holding ``path`` (from /proc/mounts),
    and whether it is a network (or FUSE) file system, where readers keep more in flight."""
    m = mount_of(path)
    if m is None:
        return {"mount": "", "fstype": "unknown", "device": "unknown", "network": False}
    network = network_type(m.fstype)
    return {"mount": m.mount, "fstype": m.fstype, "device": m.device, "network": network}


def _no_room(directory: Path, size: int) -> str | None:
    """Why a scratch file of ``size`` bytes does not fit in ``directory``'s filesystem
    (its free space less the margin ``headrace gen`` keeps), or None. ``--size 30G`` on
    a 24 GiB tmpfs wrote until the filesystem, which is memory, was full."""
    from headrace._messages import byte_size
    from headrace.bench._datagen import _margin

    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    margin = _margin(st.f_blocks * st.f_frsize)
    if size <= free - margin:
        return None
    return (
        f"--size {byte_size(size)} ({size:,} bytes): a scratch file that large does not fit "
        f"in {directory}, whose filesystem has {byte_size(free)} free ({byte_size(margin)} "
        "of it kept free); give a smaller --size (e.g. --size 256M), a folder on a "
        "filesystem with room, or an existing file to probe"
    )


def _unwritable(directory: Path) -> str | None:
    """Why no scratch file can be written in ``directory`` (a read-only mount, or a
    folder this user may not write to), or None. Asked before the free space: a
    read-only filesystem (squashfs, an ISO) reports 0 bytes free, which the probe
    printed as the reason to refuse."""
    if os.statvfs(directory).f_flag & os.ST_RDONLY:
        return "a read-only mount"
    if not os.access(directory, os.W_OK):
        return "no write permission"
    return None


#: the most directory entries the search for an existing file looks at: a dataset
#: folder of a million files is not walked to the end before the probe starts
EXISTING_SCAN = 10_000


def _existing_file(directory: Path) -> Path | None:
    """The largest regular file of at least 1 MiB under ``directory`` (a walk in
    name order, of at most :data:`EXISTING_SCAN` entries), or None."""
    best: tuple[int, Path] | None = None
    seen = 0
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            seen += 1
            if seen > EXISTING_SCAN:
                return None if best is None else best[1]
            p = Path(root, name)
            try:
                st = p.stat(follow_symlinks=False)
            except OSError:  # gone, or not ours to look at: not a candidate
                continue
            if p.is_file() and not p.is_symlink() and st.st_size >= MiB:
                if best is None or st.st_size > best[0]:
                    best = (st.st_size, p)
    return None if best is None else best[1]


#: the depths a folder of small files is read at: whole files, FileSource's in_flight
FILE_DEPTHS = (1, 4, 16, 64)


def _small_files(directory: Path) -> dict[Path, int]:
    """The regular files, of at least one byte, under ``directory`` and their sizes (a
    walk in name order, of at most :data:`EXISTING_SCAN` entries)."""
    out: dict[Path, int] = {}
    for root, dirs, names in os.walk(directory):
        dirs.sort()
        for name in sorted(names):
            if len(out) >= EXISTING_SCAN:
                return out
            p = Path(root, name)
            with contextlib.suppress(OSError):  # gone, or not ours to look at
                st = p.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and st.st_size > 0:
                    out[p] = st.st_size
    return out


def _read_files(
    paths: list[Path], depth: int, sizes: dict[Path, int], drop_cache: bool
) -> tuple[int, list[float], float, bool]:
    """Each file read whole, ``depth`` at once (as FileSource reads a folder's files),
    its pages dropped first: the bytes read, each read's seconds, the seconds all took,
    and whether each matched its size and a second, untimed read."""
    from concurrent.futures import ThreadPoolExecutor

    if drop_cache:
        for p in paths:
            with contextlib.suppress(OSError):
                drop_pages(p)

    def one(p: Path) -> tuple[bytes, float]:
        t0 = time.perf_counter()
        key = begin(str(p), 0, sizes[p])  # named by the stall line and at Ctrl-C
        try:
            data = p.read_bytes()
        finally:
            end(key)
        return data, time.perf_counter() - t0

    with ThreadPoolExecutor(depth, thread_name_prefix="headrace-probe-files") as pool:
        t0 = time.perf_counter()
        got = list(pool.map(one, paths))
        seconds = time.perf_counter() - t0
    same = all(
        len(d) == sizes[p] and d == p.read_bytes() for (d, _), p in zip(got, paths, strict=True)
    )
    return sum(len(d) for d, _ in got), [t for _, t in got], seconds, same


def probe_files(
    folder: Path, sizes: dict[Path, int], *, ops: int, seed: int, drop_cache: bool, rounds: int = 2
) -> dict[str, Any]:
    """The report of a folder of small files read whole at each of :data:`FILE_DEPTHS`:
    a folder no scratch file can be written in, with no file of 1 MiB to read at random
    (an image dataset), was refused. Each round of each depth reads files not read
    before while there are any (their pages dropped first), each checked against a
    second, untimed read."""
    paths = list(sizes)
    order = [paths[i] for i in np.random.default_rng(seed).permutation(len(paths))]
    typical = int(np.median(list(sizes.values())))
    taken = 0
    done: dict[int, list[tuple[int, int, float, list[float], bool]]] = {d: [] for d in FILE_DEPTHS}
    stopped: KeyboardInterrupt | SystemExit | None = None
    try:
        for r in range(rounds):
            for d in FILE_DEPTHS if r % 2 == 0 else FILE_DEPTHS[::-1]:
                n = max(1, min(ops, max(4 * d, 16)))
                batch = [order[(taken + k) % len(order)] for k in range(n)]
                taken += n
                work = functools.partial(_read_files, batch, d, sizes, drop_cache)
                nbytes, took, seconds, same = _Worker(work, f"{folder}").wait()
                done[d].append((n, nbytes, seconds, took, same))
    except (KeyboardInterrupt, SystemExit) as exc:
        stopped = exc
    results: list[Result] = []
    skipped: list[dict[str, Any]] = []
    for d in FILE_DEPTHS:
        if not done[d]:  # only an interrupt leaves a depth unread
            why = "not measured" if stopped is None else interrupted_skip(stopped)
            skipped.append({"mode": "file", "in_flight": d, "reason": why})
            continue
        n = sum(x[0] for x in done[d])
        s = sum(x[2] for x in done[d])
        ops_per_s, mb_per_s = rates(n, sum(x[1] for x in done[d]), s)
        lat = [t for x in done[d] for t in x[3]]
        results.append(
            TimedResult(
                mode="file",
                pattern="random",
                request_bytes=typical,
                in_flight=d,
                in_flight_reached=min(d, min(x[0] for x in done[d])),
                engine="threads",
                ops=n,
                seconds=round(s, 6),
                ops_per_s=ops_per_s,
                mb_per_s=mb_per_s,
                verified=all(x[4] for x in done[d]),
                cached_before=0.0 if drop_cache else 1.0,
                latency_p50_ms=round(1e3 * float(np.median(lat)), 3),
            )
        )
    head = {
        "path": str(folder),
        "filesystem": filesystem_of(str(folder)),
        "cache": "dropped" if drop_cache else "kept",
        "files": len(paths),
        "file_bytes": sum(sizes.values()),
    }
    return probe_report(head, rounds, results, skipped, stopped)


def files_table(report: dict[str, Any]) -> str:
    fs = report["filesystem"]
    lines = [
        f"folder {report['path']}  ({fs['fstype']} at {fs['mount']})",
        f"{report['files']:,} files, {report['file_bytes']:,} bytes; read whole, as "
        f"FileSource reads them; MB = 10^6 bytes; {report['rounds']} rounds, alternating "
        "order, files not read before while any are left, their pages dropped first",
        f"{'file bytes':>10} {'in flight':>9} {'files':>6} {'seconds':>8} {'files/s':>9} "
        f"{'MB/s':>9} {'read p50 ms':>11}  verified",
    ]
    lines.extend(
        f"{x['request_bytes']:>10} {x['in_flight']:>9} {x['ops']:>6} {x['seconds']:>8.3f} "
        f"{x['ops_per_s'] or 0:>9,.1f} {x['mb_per_s'] or 0:>9.1f} "
        f"{x['latency_p50_ms']:>11.2f}  {'yes' if x['verified'] else 'NO'}"
        for x in report["results"]
    )
    lines.extend(f"skipped in flight {x['in_flight']}: {x['reason']}" for x in report["skipped"])
    return "\n".join(lines)


def _write_scratch(directory: Path, size: int, seed: int) -> Path:
    path = directory / f".headrace-probe-{os.getpid()}.bin"
    rng = np.random.default_rng(seed)
    try:
        with path.open("wb") as fh:
            left = size
            while left:
                n = min(left, 16 * MiB)
                fh.write(rng.bytes(n))
                left -= n
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:  # Ctrl-C or a full disk mid-write: leave no scratch behind
        path.unlink(missing_ok=True)
        raise
    return path


def _cached_share(fd: int, size: int, ranges: list[tuple[int, int]]) -> float:
    """The share of ``ranges`` whose pages all lie in the page cache now (``mincore``
    on a map of the file, made and dropped here; 0 where the file cannot be mapped)."""
    if not ranges:
        return 0.0
    try:
        m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    except (OSError, ValueError):  # a FUSE mount with direct_io refuses maps
        return 0.0
    try:
        view = np.frombuffer(m, dtype=np.uint8)
        where = np.array(ranges, dtype=np.int64)
        resident = resident_ranges(view.ctypes.data, where[:, 0], where[:, 1])
        del view  # the map cannot close while a view of it is alive
    finally:
        m.close()
    return float(resident.mean())


def _plan(
    meas: list[Measurement], rounds: int, file_bytes: int, ops: int, seed: int
) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """Ranges for each (measurement, round), on disjoint stripes of the file."""
    rng = np.random.default_rng(seed + 1)
    seq = [i for i, m in enumerate(meas) if m.pattern == "sequential"]
    rnd = [i for i, m in enumerate(meas) if m.pattern == "random"]
    seq_bytes = file_bytes // 4 if seq else 0
    plan: dict[tuple[int, int], list[tuple[int, int]]] = {}
    # Whole requests only: a region of 341 KiB read as one "1 MiB" request made
    # MB/s disagree with ops/s x the request size shown. A region too small for
    # one request leaves the measurement unmade (reported as skipped).
    region = min(seq_bytes // max(1, len(seq) * rounds), ROUND_BUDGET)
    region = region // SEQ_REQUEST * SEQ_REQUEST
    for k, (i, r) in enumerate((i, r) for r in range(rounds) for i in seq):
        start = k * region
        plan[i, r] = [(o, SEQ_REQUEST) for o in range(start, start + region, SEQ_REQUEST)]
    # Mapped reads fault in a whole read-around window (read_ahead_kb, often
    # several MiB) per miss, which would warm every stripe near it; so mapped
    # measurements get their own region, a guard gap away from the rest.
    area = file_bytes - seq_bytes
    mapped = [i for i in rnd if meas[i].mode == "mmap"]
    others = [i for i in rnd if meas[i].mode != "mmap"]
    guard = min(16 * MiB, area // 8)
    split = seq_bytes + (area - guard) * len(others) // max(1, len(rnd))
    groups = ((others, seq_bytes, split), (mapped, split + guard, file_bytes))
    for members, lo, hi in groups:
        keys = [(i, r) for r in range(rounds) for i in members]
        n_stripes = max(1, len(keys))
        chunk = CHUNK if (hi - lo) // n_stripes >= 2 * CHUNK else 64 * 1024

        def clearance(chunk: int, spills: bool = members is mapped) -> int:
            # Only mapped reads need clear chunk edges (their read-around spills).
            return min(128 * 1024, chunk // 8) if spills else 0

        # A chunk holds whole requests: --row-bytes 1000000 (an image a row) fitted in
        # no 1 MiB chunk, and was "skipped: too few bytes" on a file of any size. Wider
        # chunks where every stripe gets one; else the wide requests go unmade, and the
        # rest keep their chunks.
        widest = max((meas[i].request_bytes for i in members), default=0)
        wide = chunk
        while wide - 2 * clearance(wide) - widest - 100 <= 0:
            wide *= 2
        if (hi - lo) // n_stripes >= wide:
            chunk = wide
        edge = clearance(chunk)
        first_chunk = -(-lo // chunk)
        last_chunk = hi // chunk
        for k, (i, r) in enumerate(keys):
            req = meas[i].request_bytes
            # Neighbours stay 16 KiB apart: beyond a random buffered read's
            # initial readahead, and aligned O_DIRECT supersets never touch. Mapped
            # ones further: on a network mount a mapped read populates its pages
            # first, page runs under 64 KiB apart as one, and requests 16 KiB apart
            # went two to a READ (5.4 ms a "random" request on a 10 ms mount).
            apart = POPULATE_GAP + 4 * BLOCK if members is mapped else 4 * BLOCK
            spacing = -(-(req + BLOCK) // BLOCK) * BLOCK + apart
            shift = 0 if req % BLOCK == 0 else 100  # rows sit at unaligned offsets
            in_chunk = np.arange(edge, chunk - edge - req - shift, spacing)
            chunks = np.arange(first_chunk + k, last_chunk, n_stripes)
            slots = (chunks[:, None] * chunk + in_chunk[None, :]).ravel() + shift
            n = min(len(slots), max(1, ops // rounds), max(1, ROUND_BUDGET // req))
            picked = rng.choice(slots, size=n, replace=False) if len(slots) else slots
            plan[i, r] = [(int(o), req) for o in picked]
    return plan


#: the most data extents :func:`hole_bytes` walks (a fragmented sparse file has many)
HOLE_EXTENTS = 100_000


def hole_bytes(fd: int, size: int) -> int:
    """Bytes of the file's first ``size`` that are holes (``SEEK_DATA`` / ``SEEK_HOLE``;
    at least that many after :data:`HOLE_EXTENTS` extents; 0 where the filesystem does
    not say). A hole reads as zeros the filesystem makes up: no device read."""
    holes = pos = 0
    try:
        for _ in range(HOLE_EXTENTS):
            data = os.lseek(fd, pos, os.SEEK_DATA)
            holes += min(data, size) - pos
            pos = os.lseek(fd, data, os.SEEK_HOLE)
            if pos >= size:
                break
    except OSError as exc:
        if exc.errno != errno.ENXIO:  # EINVAL and the like: holes not reported here
            return 0
        holes += size - pos  # ENXIO: no data from pos to the end
    return max(0, holes)


def _reference_digest(fd: int, ranges: list[tuple[int, int]], path: str = "") -> str:
    h = hashlib.sha256()
    for o, n in ranges:
        key = begin(path, o, o + n)  # a stalled mount names this read too
        try:
            h.update(os.pread(fd, n, o))
        finally:
            end(key)
    return h.hexdigest()


class _Worker(Generic[T]):
    """``work`` on a daemon thread, waited for by :meth:`wait` where Ctrl-C and SIGTERM
    are handled. A read stuck in a stalled mount (a hung NFS server, a FUSE remote that
    stopped answering) holds its thread in the kernel, past signals: run on the main
    thread, the probe waited for it (10 min at a 600 s FUSE READ) before Ctrl-C could
    stop it, without a word. A read waiting :data:`STALL_S` is said on stderr."""

    def __init__(self, work: Callable[[], T], doing: str) -> None:
        self._doing = doing
        self._out: list[tuple[bool, Any]] = []
        self.thread = threading.Thread(target=self._run, args=(work,), daemon=True)
        self.thread.name = "headrace-probe"
        self.thread.start()

    def _run(self, work: Callable[[], T]) -> None:
        try:
            self._out.append((True, work()))
        except BaseException as exc:  # handed to the waiter, raised there
            self._out.append((False, exc))

    def wait(self) -> T:
        said = STALL_S
        while True:
            self.thread.join(timeout=1.0)  # a signal's exception comes out of here
            if not self.thread.is_alive():
                break
            reads = [r for r in reads_in_flight() if r.age_s >= said]
            if reads:
                said = 2 * reads[0].age_s
                shown = ", ".join(str(r) for r in reads[:4])
                _say(
                    f"{self._doing}: {len(reads)} read(s) waiting on storage, the oldest for "
                    f"{reads[0].age_s:.1f} s: {shown}; stalled storage? (Ctrl-C stops the "
                    "probe and prints what it has measured)"
                )
        done, value = self._out[0]
        if not done:
            raise value
        return value  # type: ignore[no-any-return]


def _timed_read(
    m: Measurement, path: str, ranges: list[tuple[int, int]]
) -> tuple[list[Any], float, str]:
    """The bytes of ``ranges`` read as ``m`` says, the seconds the reads took, and the
    engine that ran (``""`` for mmap). Mapped random reads go ``m.in_flight`` requests a
    call: on a network mount a mapped read asks for all its pages at once, and one call
    of a round's requests had them all in flight (11 READs at once in the row "mmap
    random, 1 in flight": 513 requests/s against pread's 40 at 20 ms a READ)."""
    with RangeReader(m.config()) as reader:
        f = reader.file(path)
        # Map or open before the clock starts: probes time reads only.
        if m.mode == "mmap":
            _ = f.mapped
        elif m.mode == "odirect":
            _ = f.direct_fd
        calls = [ranges]
        if m.mode == "mmap" and m.pattern == "random":
            calls = [ranges[k : k + m.in_flight] for k in range(0, len(ranges), m.in_flight)]
        got: list[Any] = []
        t0 = time.perf_counter()
        for call in calls:
            got.extend(reader.read(path, call))
        seconds = time.perf_counter() - t0
        return got, seconds, reader.stats.engine


class _Refused(Exception):
    """An O_DIRECT read the filesystem refused, though it took the open."""


def _measure(
    m: Measurement,
    path: str,
    ranges: list[tuple[int, int]],
    ref_fd: int,
    file_bytes: int,
    drop_cache: bool,
) -> tuple[float, float, str, bool]:
    """One round of ``m``: the share of its requests cached as it began, its seconds,
    the engine that ran, and whether its bytes are a plain ``pread``'s."""
    if drop_cache:  # before each one: no measurement reads another's pages
        drop_pages(path)
    cached = _cached_share(ref_fd, file_bytes, ranges)
    try:
        got, seconds, engine = _timed_read(m, path, ranges)
    except (HeadraceError, OSError) as exc:
        if m.mode != "odirect":
            raise
        raise _Refused(str(exc)) from exc
    h = hashlib.sha256()
    for g in got:
        h.update(g.tobytes())
    return cached, seconds, engine, h.hexdigest() == _reference_digest(ref_fd, ranges, path)


def measurements(
    row_bytes: int, odirect: bool, engines: tuple[str, ...] = ("threads",), *, mapped: bool = True
) -> list[Measurement]:
    seq = SEQ_REQUEST
    m = [
        Measurement(mode="mmap", pattern="sequential", request_bytes=seq, in_flight=1),
        Measurement(
            mode="pread", pattern="sequential", request_bytes=seq, in_flight=1, engine="threads"
        ),
    ]
    if not mapped:
        del m[0]
    if odirect:
        m.append(
            Measurement(
                mode="odirect",
                pattern="sequential",
                request_bytes=seq,
                in_flight=1,
                engine="threads",
            )
        )
    for req in dict.fromkeys((BLOCK, row_bytes)):  # --row-bytes 4096: once, not twice
        if mapped:
            m.append(Measurement(mode="mmap", pattern="random", request_bytes=req, in_flight=1))
        depths = {"pread": (1, 8, 32, 64), "odirect": (1, 32, 64) if odirect else ()}
        m.extend(
            Measurement(mode=mode, pattern="random", request_bytes=req, in_flight=q, engine=e)
            for mode, qs in depths.items()
            for e in engines
            for q in qs
        )
    return m


def probe(
    path: str, *, row_bytes: int, ops: int, seed: int, drop_cache: bool, rounds: int = 2
) -> dict[str, Any]:
    file_bytes = os.stat(path).st_size
    skipped: list[dict[str, Any]] = []
    try:
        with RangeReader("odirect") as check:
            odirect = check.file(path).direct_fd >= 0
    except ConfigError as exc:
        odirect = False
        skipped.append({"mode": "odirect", "reason": str(exc)})
    with RangeReader("mmap") as check:
        # A FUSE mount with direct_io refuses maps (ENODEV): measure the rest.
        mapped = check.file(path).mappable
    if not mapped:
        skipped.append(
            {
                "mode": "mmap",
                "reason": f"{path}: the filesystem does not support memory mapping (mmap "
                "answered ENODEV)",
            }
        )
    engines: tuple[str, ...] = ("threads",)
    if ring_pool().available():
        engines = ("threads", "uring")
    else:
        skipped.append({"mode": "pread, odirect", "engine": "uring", "reason": ring_pool().reason})
    meas = measurements(row_bytes, odirect, engines, mapped=mapped)
    plan = _plan(meas, rounds, file_bytes, ops, seed)
    # requests, seconds and bytes of the rounds done (an interrupt leaves some undone)
    acc: dict[int, list[float]] = {i: [0, 0.0, 0] for i in range(len(meas))}
    done: dict[int, list[int]] = {i: [] for i in range(len(meas))}  # each round's requests
    cached: dict[int, list[float]] = {i: [] for i in range(len(meas))}
    ok = dict.fromkeys(range(len(meas)), True)
    ran: dict[int, set[str]] = {i: set() for i in range(len(meas))}
    # Engines whose O_DIRECT reads the filesystem refused, though it took the open (some
    # FUSE mounts answer EINVAL): the read's error, which stopped the whole probe.
    refused: dict[str, str] = {}
    stopped: KeyboardInterrupt | SystemExit | None = None
    ref_fd = os.open(path, os.O_RDONLY)
    worker: _Worker[tuple[float, float, str, bool]] | None = None
    try:
        holes = hole_bytes(ref_fd, file_bytes)
        try:
            for r in range(rounds):
                order = range(len(meas)) if r % 2 == 0 else reversed(range(len(meas)))
                for i in order:
                    ranges = plan[i, r]
                    m = meas[i]
                    if not ranges or (m.mode == "odirect" and m.engine in refused):
                        continue
                    work = functools.partial(
                        _measure, m, path, ranges, ref_fd, file_bytes, drop_cache
                    )
                    doing = (
                        f"{m.mode} {m.engine or '-'} {m.pattern} {m.request_bytes} "
                        f"x{m.in_flight}, round {r + 1} of {rounds}"
                    )
                    worker = _Worker(work, doing)
                    try:
                        share, seconds, engine, same = worker.wait()
                    except _Refused as exc:
                        refused[m.engine] = str(exc)
                        continue
                    cached[i].append(share)
                    ran[i].add(engine)
                    ok[i] = ok[i] and same
                    acc[i][0] += len(ranges)
                    acc[i][1] += seconds
                    acc[i][2] += sum(n for _, n in ranges)
                    done[i].append(len(ranges))
        except (KeyboardInterrupt, SystemExit) as exc:
            # What was measured so far is reported (marked interrupted), then the
            # interrupt goes on: a probe stopped after minutes printed nothing.
            stopped = exc
    finally:
        # A measurement left waiting on a stalled read may still read through it.
        if worker is None or not worker.thread.is_alive():
            os.close(ref_fd)
    skipped.extend(
        {
            "mode": "odirect",
            "engine": engine,
            "reason": f"the filesystem took the O_DIRECT open but refused a read ({why}): "
            "no O_DIRECT figures on this engine",
        }
        for engine, why in refused.items()
    )
    results = []
    for i, m in enumerate(meas):
        n, s = int(acc[i][0]), acc[i][1]
        if m.mode == "odirect" and m.engine in refused:
            continue  # said above, once: not "no stripe", nor a first round's figure alone
        if n == 0:
            planned = any(plan[i, r] for r in range(rounds))
            skipped.append(
                {
                    "mode": m.mode,
                    **({"engine": m.engine} if m.engine else {}),
                    "pattern": m.pattern,
                    "request_bytes": m.request_bytes,
                    "in_flight": m.in_flight,
                    "reason": interrupted_skip(stopped)
                    if stopped is not None and planned
                    else f"no stripe of the file for it: {file_bytes:,} bytes is too few "
                    "to give every measurement its own",
                }
            )
            continue
        # Of the rounds done: an interrupt can leave a measurement's second undone.
        ops_per_s, mb_per_s = rates(n, int(acc[i][2]), s)
        shortest = min(done[i])
        results.append(
            Result(
                mode=m.mode,
                pattern=m.pattern,
                request_bytes=m.request_bytes,
                in_flight=m.in_flight,
                in_flight_reached=min(m.in_flight, shortest),
                # What ran ("" for mmap); always the engine asked for, since
                # an explicit engine never falls back.
                engine=",".join(sorted(ran[i])),
                ops=n,
                seconds=round(s, 6),
                ops_per_s=ops_per_s,
                mb_per_s=mb_per_s,
                verified=ok[i],
                cached_before=round(float(np.mean(cached[i][: len(done[i])])), 4),
            )
        )
    fs = filesystem_of(path)
    # tmpfs and ramfs pages are the file itself: DONTNEED cannot drop them.
    memory = fs["fstype"] in MEMORY_FS
    head = {
        "path": path,
        "filesystem": fs,
        "cache": "memory" if memory else ("dropped" if drop_cache else "kept"),
        "file_bytes": file_bytes,
        #: bytes in holes (a sparse file), which read as zeros no device is asked for
        "hole_bytes": holes,
    }
    return probe_report(head, rounds, results, skipped, stopped)


def _store_options(args: argparse.Namespace) -> dict[str, Any]:
    """``--endpoint``, ``--region`` and ``--store-option`` as store options; S3's defaults
    (path-style, the AWS_* variables) for s3:// only: any other URL with an endpoint was
    refused, "path_style applies to s3:// URLs only" (AWS_REGION set: "region ...")."""
    env = os.environ
    s3 = args.path.partition("://")[0].lower() in ("s3", "s3a")
    options: dict[str, Any] = {"region": args.region}
    if s3:
        options["region"] = args.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if args.endpoint:
        options["endpoint"] = args.endpoint
    if args.endpoint and s3:
        options.update(
            path_style=True,
            allow_http=args.endpoint.startswith("http://"),
            access_key_id=env.get("AWS_ACCESS_KEY_ID"),
            secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
        )
    options = {k: v for k, v in options.items() if v is not None}
    return {**options, **store_options(args.store_option)}


def _run_object(args: argparse.Namespace) -> int:
    from headrace.bench._probe_objects import Progress, probe_object
    from headrace.bench._probe_objects import table as object_table

    progress = Progress(args.path, _store_options(args), rounds=2)
    work = functools.partial(
        probe_object,
        args.path,
        row_bytes=args.row_bytes,
        ops=args.ops,
        seed=args.seed,
        store_options=progress.store_options,
        progress=progress,
    )
    try:
        # Off the main thread, as a file's reads: Ctrl-C is taken here at once, where a
        # request to an endpoint that never answers held it ~33 s (its 30 s timeout,
        # then 5 s at exit for the request still in flight).
        report = _Worker(work, args.path).wait()
    except ProbeInterrupted as part:  # the interrupt came in the probe's own thread
        _interrupted(args.json, part, object_table)
    except (KeyboardInterrupt, SystemExit) as exc:
        progress.stop()  # its requests in flight cancelled, none retried
        try:
            progress.report(exc)
        except ProbeInterrupted as part:
            _interrupted(args.json, part, object_table)
        raise  # (report() raises when given an interrupt)
    return _output(args.json, report, object_table(report))


def _interrupted(
    json_path: str | None, part: ProbeInterrupted, render: Callable[[dict[str, Any]], str]
) -> NoReturn:
    """Print and write what was measured before Ctrl-C or SIGTERM (marked interrupted),
    then go on with the interrupt (exit 130 or 143): a long probe stopped printed nothing
    of what it had measured."""
    if part.report["results"]:
        _output(json_path, part.report, render(part.report))
    else:  # a bare "interrupted" left a script looking for the --json file
        wrote = f"; no report written to {json_path}" if json_path else ""
        _say(f"interrupted ({part}) before any measurement was done{wrote}")
    raise part.cause


def _output(json_path: str | None, report: dict[str, Any], text: str) -> int:
    """Print the table and write ``--json``: to stdout for ``-`` (a file named ``-`` was
    written, and `probe F --json - | jq` read the table), the table then to stderr. A
    report that cannot be written is said after the table (it was a traceback, and the
    figures measured were lost with it). The time the probe took ends both: it was
    nowhere, and a probe of a slow mount takes minutes."""
    report["elapsed_s"] = round(time.perf_counter() - _STARTED[0], 3)
    report["advice"] = recommend(report)
    text += f"\n{recommend_line(report['advice'])}\nthe probe took {report['elapsed_s']:.1f} s"
    lost: ConfigError | None = None
    if json_path is not None and json_path != "-":
        try:
            write_json(json_path, report)
        except ConfigError as exc:
            lost = exc
    print(text, file=sys.stderr if json_path == "-" else sys.stdout)
    if json_path == "-":
        write_json("-", report)
    if lost is not None:
        _say(str(lost))
        return 2
    return 0 if all(x["verified"] for x in report["results"]) else 1


def _stats(folder: str) -> dict[str, Any]:
    """:func:`probe_stats` of ``folder``, or why there is none where it cannot be listed
    (a folder that may be entered, not read: its scandir's PermissionError was a
    traceback before anything was measured)."""
    try:
        return probe_stats(folder)
    except OSError as exc:
        return {"folder": folder, "skipped": f"cannot list {folder} ({exc.strerror})"}


def _cannot_look(target: Path) -> str | None:
    """Why ``target`` cannot even be stat'ed, where ``Path.is_dir`` would raise (a mount
    whose FUSE server was killed answers ENOTCONN: a traceback until 2026-12-07)."""
    try:
        with Waiting("stat", str(target)):
            target.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None  # said below, with what to give instead
    except PermissionError:
        return _denied(target, "looking it up", "probe a path this user may reach")
    except OSError as exc:
        why = f"{target}: cannot look at it ({exc.strerror or exc})"
        gone = gone_mount(target)
        if gone is None:
            return why
        return (
            f"{why}; the mount it is on is gone (its FUSE server or network file system "
            f"driver stopped): unmount it (fusermount3 -u {gone}, or umount -l {gone}) and "
            "mount it again"
        )
    return None


def _denied(path: Path, doing: str, fix: str) -> str:
    """Why ``path`` is refused this process (permission denied ``doing``), and ``fix``:
    the folder on the way that may not be entered where one may not, else ``path``'s
    own mode and owner, and who this process is. "permission denied" alone named no
    mode, no owner and nothing to do; a folder that could not be listed was said to
    hold "no file of at least 1 MiB"."""
    me = f"this process runs as uid {os.geteuid()}, gid {os.getegid()}"
    shut = next((p for p in reversed(path.absolute().parents) if not os.access(p, os.X_OK)), None)
    if shut is not None:
        return (
            f"{path}: permission denied: the folder {shut} ({_owner(shut)}) may not be "
            f"entered (no x permission; {me}); let this user in (e.g. chmod a+x {shut}, "
            "or ask its owner), or probe a path it may reach"
        )
    return f"{path}: permission denied {doing} ({_owner(path)}; {me}); {fix}"


def _owner(path: Path) -> str:
    """``path``'s mode (as ``ls -l`` shows it) and owner, for a message."""
    try:
        st = path.stat()
    except OSError as exc:
        return f"its mode unknown: {exc.strerror}"
    return f"mode {stat.filemode(st.st_mode)}, owner uid {st.st_uid}, gid {st.st_gid}"


def _unreadable(path: Path) -> str | None:
    """Why ``path``, a file to probe, may not be read (permission denied), or None:
    asked before the probe starts, which refused it as "permission denied" alone."""
    try:
        os.close(os.open(path, os.O_RDONLY))
    except PermissionError:
        return _denied(
            path,
            "reading it",
            f"let this user read it (e.g. chmod a+r {path}, or ask its owner), or probe a "
            "file it may read",
        )
    except OSError:
        return None  # said by the probe, as before
    return None


def _failed_mid_probe(path: str, held: Mount | None, exc: OSError) -> str:
    """Why the probe of ``path`` stopped at a failed read, and what to do. ``held`` is
    the network or FUSE mount that held it as the probe began: gone from the mount table
    now (its server stopped, or it was unmounted), the probe said so nowhere, a traceback
    ending in "Transport endpoint is not connected", or "No such file" of the file the
    mount point's bare folder no longer holds."""
    now = network_mount_of(path)
    if held is not None and (now is None or now.mount != held.mount):
        return (
            f"{path}: a read failed mid-probe ({exc.strerror or exc}): the mount it was on "
            f"({held.mount}, {held.fstype}) went away while the probe read (unmounted, or "
            "its FUSE server or network file system driver stopped); mount it again, then "
            "probe again"
        )
    if isinstance(exc, HeadraceError):
        return f"a read failed mid-probe: {exc}"  # it names the file, and the fix
    return f"{path}: a read failed mid-probe ({exc.strerror or exc}){gone_hint(exc, path)}"


def _say(message: str) -> None:
    """A refusal, on stderr, named as the other commands name theirs."""
    print(f"headrace probe: {message}", file=sys.stderr)


#: a depth whose rate is within this share of the best one measured does as well: the
#: least such depth is the one advised (a deeper one buys noise, and holds more memory)
GOOD_ENOUGH = 0.8


def recommend(report: dict[str, Any]) -> dict[str, Any] | None:
    """The ``in_flight`` to give the readers, from the random 4 KiB positional reads (an
    object's smallest GETs): the least depth within :data:`GOOD_ENOUGH` of the best rate
    measured, on the better engine at each depth. ``None`` where no depth or no
    one-at-a-time rate was measured. The probe printed figures only, and a user was
    left to work out which depth to set, or that a mapped read on a mount was not one
    at a time (see :func:`_timed_read`)."""
    results = report["results"]
    gets = [x for x in results if x["mode"] == "get"]
    files = [x for x in results if x["mode"] == "file"]
    if files:
        rows = files
        what = f"whole files of about {files[0]['request_bytes']:,} bytes"
    elif gets:
        size = min(x["request_bytes"] for x in gets)
        rows = [x for x in gets if x["request_bytes"] == size]
        what = f"GETs of {size:,} bytes"
    else:
        rows = [
            x
            for x in results
            if (x["mode"], x["pattern"], x["request_bytes"]) == ("pread", "random", BLOCK)
        ]
        what = "random 4 KiB preads"
    rate: dict[int, dict[str, Any]] = {}
    for x in rows:
        best = rate.get(x["in_flight"])
        if x["ops_per_s"] and (best is None or x["ops_per_s"] > best["ops_per_s"]):
            rate[x["in_flight"]] = x
    if 1 not in rate:
        return None
    top = max(x["ops_per_s"] for x in rate.values())
    depth = min(d for d, x in rate.items() if x["ops_per_s"] >= GOOD_ENOUGH * top)
    return {
        "in_flight": depth,
        "of": what,
        "engine": rate[depth]["engine"],
        "ops_per_s": rate[depth]["ops_per_s"],
        "one_at_a_time_ops_per_s": rate[1]["ops_per_s"],
        "in_flight_reached": rate[depth]["in_flight_reached"],
        "deepest_measured": max(rate),
    }


def recommend_line(advice: dict[str, Any] | None) -> str:
    if advice is None:
        return "no in_flight advised: no one-at-a-time rate was measured (see skipped)"
    d = advice["in_flight"]
    gain = advice["ops_per_s"] / advice["one_at_a_time_ops_per_s"]
    line = (
        f"advice: in_flight={d} (FileSource, ReaderConfig; TokenSource on object stores): "
        f"{advice['of']} ran {advice['ops_per_s']:,.0f}/s at {d} in flight "
        f"({advice['engine']}), {gain:.1f}x one at a time; the least depth within "
        f"{GOOD_ENOUGH:.0%} of the best measured"
    )
    if d == advice["deepest_measured"] and d > 1:
        line += f"; deeper than {d} was not measured, and may do better"
    if advice["in_flight_reached"] < d:
        line += (
            f"; a round held only {advice['in_flight_reached']} requests: raise --ops, or "
            "probe a larger file"
        )
    return line


#: when this process's probe began (:func:`run`), for ``elapsed_s``
_STARTED = [time.perf_counter()]


def run(args: argparse.Namespace) -> int:
    _STARTED[0] = time.perf_counter()
    try:
        return _run(args)
    except (KeyboardInterrupt, SystemExit):
        from headrace.formats._file_list import is_object_url

        # Calls on local paths (file:// URLs too) alone: an object request is on no mount
        # (it was said so, "unmount it", of a stalled s3:// GET), and the store closed on
        # Ctrl-C has cancelled it.
        stuck = [
            r
            for r in reads_in_flight()
            if r.age_s >= 1.0 and (not is_object_url(r.where) or r.where.startswith("file://"))
        ]
        if stuck:
            # A stat or an O_DIRECT read already with a FUSE server (or a hard NFS
            # mount) cannot be cut short, not even by SIGKILL: the process lingered on,
            # after "interrupted", with nothing said of why.
            _say(
                f"{len(stuck)} call(s) still wait on storage ({stuck[0]}): this process "
                "ends once the kernel gives them back; a mount that never answers: "
                "unmount it (fusermount3 -u MNT, or umount -f -l MNT)"
            )
        raise


def _run(args: argparse.Namespace) -> int:
    from headrace.formats._file_list import is_object_url

    target = Path(args.path)
    if args.row_bytes < 1 or args.ops < 1:
        _say(
            f"--row-bytes and --ops must be positive (got --row-bytes {args.row_bytes}, "
            f"--ops {args.ops}); e.g. --row-bytes 4100 --ops 4096"
        )
        return 2
    if args.seed < 0:  # (NumPy's generators take none: a traceback)
        _say(f"--seed must be >= 0 (got --seed {args.seed}); e.g. --seed 1")
        return 2
    if args.json is not None and args.json != "-":
        from headrace._output_path import check_output_path, refuse_output_over_input

        check_output_path("--json", args.json)  # before minutes of probing, not after
        # file:///d/x.bin --json /d/x.bin: the file the URL names, not the URL, compared
        data = file_url_path(args.path) if args.path.startswith("file://") else args.path
        refuse_output_over_input("--json", args.json, data, ())
    if args.path.startswith("file://"):
        local = Path(file_url_path(args.path))
        if local.exists() and not local.is_file() and not local.is_dir():
            # A FIFO named by its file:// URL: the object store's open waited for a
            # writer forever (Ctrl-C, SIGTERM and `timeout` did not stop it).
            _say(
                f"{args.path}: not a regular file (a FIFO, a device?); give a file on the "
                "storage to probe, or a folder there to write a scratch file in",
            )
            return 2
    if is_object_url(args.path):
        return _run_object(args)
    scratch: Path | None = None
    read_only: str | None = None
    # Timed first, before anything here looks the folder's names up: a mount caches names
    # and attributes (1 s on FUSE), and stats answered from there say nothing of it.
    stats: dict[str, Any] = {}
    # Off the main thread: a stalled mount's stat held it past Ctrl-C.
    unreadable = _Worker(functools.partial(_cannot_look, target), f"{target}").wait()
    if unreadable is not None:
        _say(unreadable)
        return 2
    if target.is_dir():
        stats = _stats(str(target))
        read_only = _unwritable(target)
        if read_only is None:
            # Checked here, where the scratch file is written: a file or an object
            # probed has no use for --size (it was refused all the same).
            if args.size < 4 * MiB:
                _say(
                    f"--size must be at least 4M for the scratch file written in {target} "
                    f"(got --size {args.size:,} bytes); e.g. --size 256M"
                )
                return 2
            why = _no_room(target, args.size)
            if why is not None:
                _say(why)
                return 2
            try:
                scratch = _write_scratch(target, args.size, args.seed)
            except OSError as exc:
                # statvfs and access() can say yes where the write says no (a mount
                # remounted read-only, an overlay, a policy): read what is there.
                if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                    _say(
                        f"{target}: cannot write a {args.size:,}-byte scratch file to probe "
                        f"({exc.strerror}); give a folder with room, or an existing file",
                    )
                    return 2
                read_only = exc.strerror or errno.errorcode[exc.errno]
        if scratch is None:
            try:
                with os.scandir(target) as names:
                    next(names, None)
            except PermissionError:
                _say(
                    _denied(
                        target,
                        "listing it",
                        f"nor may a scratch file be written there ({read_only}): let this "
                        f"user list it (e.g. chmod a+rx {target}, or ask its owner), or give "
                        f"a file in it by name (headrace probe {target}/FILE)",
                    )
                )
                return 2
            found = _existing_file(target)
            if found is None:
                # All its files are small (an image dataset): read them whole, as FileSource
                # does. This was refused, and each of its files refused as too small.
                small = _small_files(target)
                if not small:
                    _say(
                        f"{target}: cannot write a scratch file here ({read_only}), and no "
                        "file is there to read instead; give a file to probe (headrace "
                        "probe FILE) or a writable folder",
                    )
                    return 2
                try:
                    report = probe_files(
                        target,
                        small,
                        ops=args.ops,
                        seed=args.seed,
                        drop_cache=not args.keep_cache,
                    )
                except ProbeInterrupted as part:
                    part.report["stats"] = stats
                    part.report["read_only"] = f"{target}: {read_only}"
                    _interrupted(args.json, part, files_table)
                report["stats"] = stats
                report["read_only"] = f"{target}: {read_only}"
                return _output(args.json, report, files_table(report))
            path = str(found)
        else:
            path = str(scratch)
    elif target.is_file():
        stats = _stats(str(target.parent.absolute()))
        path = str(target)
        if target.stat().st_size < MiB:
            _say(
                f"{target}: {target.stat().st_size:,} bytes is too small to probe (at least "
                "1 MiB); give a larger file, a folder to write a scratch file in, or the "
                f"folder of such files (headrace probe {target.parent.absolute()}): where no "
                "scratch file can be written, its files are read whole, as FileSource does",
            )
            return 2
    elif "://" in args.path:
        meant = url_typo(args.path)  # S3://b/k: schemes are matched in lower case
        _say(
            f"{args.path}: not a URL headrace probes (s3://, gs://, az://, http(s)://, "
            "file://), nor a local path" + (f"; did you mean {meant!r}?" if meant else ""),
        )
        return 2
    elif target.exists():
        _say(
            f"{target}: not a regular file or a folder (a device?); give a file on the "
            "storage to probe, or a folder there to write a scratch file in",
        )
        return 2
    else:
        # s3:/b/k (one slash) was read as a local path and said "no such file" alone.
        meant = url_typo(args.path)
        _say(
            f"{args.path}: no such file or directory"
            + (f" (read as a local path: did you mean {meant!r}?)" if meant else "")
            + "; give a file to probe, a folder to write a scratch file in (--size), or an "
            "object URL (s3://bucket/key)",
        )
        return 2
    denied = _unreadable(Path(path))
    if denied is not None:
        if scratch is not None:
            scratch.unlink(missing_ok=True)
        _say(denied)
        return 2
    stopped: ProbeInterrupted | None = None
    held = network_mount_of(path)
    try:
        try:
            report = probe(
                path,
                row_bytes=args.row_bytes,
                ops=args.ops,
                seed=args.seed,
                drop_cache=not args.keep_cache,
            )
        except ProbeInterrupted as part:
            report, stopped = part.report, part
        except OSError as exc:  # StorageError too
            _say(_failed_mid_probe(path, held, exc))
            return 2
        report["scratch"] = scratch is not None
        report["stats"] = stats
        if read_only is not None:
            report["read_only"] = f"{target}: {read_only}"
    finally:
        if scratch is not None:
            with contextlib.suppress(OSError):  # on a mount gone meanwhile: said above
                scratch.unlink(missing_ok=True)
    if stopped is not None:
        _interrupted(args.json, stopped, table)
    return _output(args.json, report, table(report))
