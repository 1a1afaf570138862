"""The storage ceiling of a local run: bare concurrent reads of the dataset, and the
notes that call a variant above it a page-cache read."""

from __future__ import annotations

import math
import os
import time
from typing import Any

from headrace.bench._kind import Kind
from headrace.io import io_threads
from headrace.io._daemon_pool import one_call_pool

__all__ = ["ceiling_notes", "distinct_figures", "storage_ceiling"]


def storage_ceiling(kind: Kind, *, budget: int = 256 << 20, depth: int = 0) -> dict[str, Any]:
    """Bare concurrent reads of the dataset's bytes (4 MiB blocks, up to ``budget`` bytes;
    smaller where that leaves a thread without one).

    Tries O_DIRECT first (the device, not the page cache); falls back to
    buffered reads where the filesystem refuses it, and says which it got.
    Reads at least ``depth`` blocks at once (the deepest variant's in-flight
    requests): on a high-latency mount a shallower ceiling is no ceiling, and
    a variant above it would be called a cache hit when it only read deeper.
    """
    threads = max(io_threads(), depth)  # the shared pool's size (HEADRACE_IO_THREADS)
    # The files the budget reaches (not a stat of each of ImageNet's 1.28 million).
    sizes: list[tuple[str, int]] = []
    total = 0
    for p in kind.files():
        if total >= budget:
            break
        sizes.append((p, os.path.getsize(p)))
        total += sizes[-1][1]
    block = 4 << 20
    held = min(budget, total)
    if held < threads * block:
        # Fewer blocks than threads read shallower than asked: a 54 MB token file in
        # 4 MiB blocks was 13 reads, 24 READs in flight at a slowfs mount whose variants
        # had 64. Smaller blocks (4 KiB-aligned, 128 KiB at least) give each thread one.
        share = -(-held // threads)
        block = max(128 << 10, (share + 4095) // 4096 * 4096)
    # Up to the budget in bytes, not in blocks: cut at budget // block jobs, a dataset of
    # 100 KB files (ImageNet's JPEGs are 110 KB) had 64 of them read, 6.4 MB.
    jobs: list[tuple[str, int, int]] = []
    taken = 0
    for p, size in sizes:
        for off in range(0, size, block):
            if taken >= held:  # the budget is read: the last file's other blocks are not
                break
            jobs.append((p, off, min(block, size - off)))
            taken += jobs[-1][2]
    flags = getattr(os, "O_DIRECT", 0)

    def read(job: tuple[str, int, int], direct: bool) -> int:
        path, off, n = job
        fd = os.open(path, os.O_RDONLY | (flags if direct else 0))
        try:
            if direct:
                import mmap

                buf = mmap.mmap(-1, -(-n // 4096) * 4096)
                try:
                    return os.preadv(fd, [buf], off)
                finally:
                    buf.close()
            return len(os.pread(fd, n, off))
        finally:
            os.close(fd)

    for direct in [True, False] if flags else [False]:
        # Left by a Ctrl-C, a read stuck in a stalled mount is not waited for; a refused
        # O_DIRECT read is caught inside, so its pool's reads end before buffered ones.
        with one_call_pool(threads, thread_name_prefix="bench-ceiling") as pool:
            t0 = time.perf_counter()
            try:
                got = sum(pool.map(lambda j, d=direct: read(j, d), jobs))
            except OSError:
                continue
            dt = time.perf_counter() - t0
        return {
            "gb_per_s": got / dt / 1e9,
            "bytes": got,
            "o_direct": direct,
            "threads": threads,
            "block_bytes": block,
        }
    return {"gb_per_s": None, "bytes": 0, "o_direct": False, "threads": threads}


def _depths(ceiling: dict[str, Any]) -> str:
    """How deep the ceiling read at its mount beside the deepest variant, in READs in
    flight: a variant that read deeper than the ceiling can be above it from depth alone."""
    own, variants = ceiling.get("reads_in_flight"), ceiling.get("variant_reads_in_flight")
    if own is None or variants is None:
        return ""
    return f", {own} READs in flight; the variants up to {variants}"


def _decimals(v: float) -> int:
    """Decimals that show two significant digits of ``v``: at least two, at most six."""
    if v == 0 or abs(v) >= 0.1:
        return 2
    return min(6, max(2, 1 - math.floor(math.log10(abs(v)))))


def distinct_figures(above: float, below: float) -> tuple[str, str]:
    """Each number with the decimals that show two significant digits of it, and up to 3
    more for both as it takes to print them apart: "0.06 GB/s is above the read ceiling
    of 0.06 GB/s" read as a mistake, and so did "0.01 GB/s is above the read ceiling of
    0.00 GB/s" (a DLIO resnet50_a100 run's 0.0014)."""
    da, db = _decimals(above), _decimals(below)
    for extra in range(4):
        a, b = f"{above:,.{da + extra}f}", f"{below:,.{db + extra}f}"
        if a != b:
            return a, b
    return a, b


def ceiling_notes(
    name: str,
    results: list[dict[str, Any]],
    ceiling: dict[str, Any],
    stored_per_payload: float,
    slowfs: bool,
    network: str | None = None,
) -> list[str]:
    """A note for each result above the ``ceiling`` (marking it ``above_storage_ceiling``):
    served from the page cache. Figures the table stars (short trials) are not judged.
    Judged on the bytes the storage gave: stored bytes, and
    of a reader that fetched less than it delivered, what it fetched. ``slowfs``: the
    ceiling is a slowfs mount's; ``network``: the type of the network or FUSE file system
    ``--root`` is on, whose ceiling is that mount's, not a device's."""
    notes: list[str] = []
    if ceiling["gb_per_s"]:
        for res in results:
            # A figure the table stars (short trials that start with batches read ahead)
            # overstates a loader: "served from the page cache" judged such figures as
            # measured (megatron at --steps 50: 5.11 GB/s* over a 1.23 GB/s device).
            if (res.get("table") or {}).get("short_trials"):
                continue
            # Files kinds report the measurement pass (mb_per_s): their timed trials start
            # from a read-ahead queue filled while other variants ran, so their GB/s is not
            # a storage figure and must not be the one compared with the ceiling.
            rate = res["mb_per_s"] / 1e3 if res.get("mb_per_s") is not None else res["gb_per_s"]
            # Other kinds count payload as delivered: decoded rows are ~3x their stored
            # bytes, so the storage had to give at least the stored share of it.
            need, said = rate, ""
            stored = res.get("mb_per_s") is None and stored_per_payload != 1.0
            if stored:
                need = rate * stored_per_payload
            # A reader that fetched less than it delivered (one fetch served samples of
            # several epochs: amplification < 1) took the rest from its own memory: only
            # its fetches came from the storage. A DLIO UNet3D headrace at 3.46 GB/s that
            # fetched 0.27 of it (0.93 GB/s) was "above the 1.07 GB/s device ceiling:
            # served from the page cache", a claim its own figures did not make.
            amp = res.get("amplification")
            fetched = amp is not None and amp < 1.0
            if fetched:
                need *= amp
            if need > ceiling["gb_per_s"]:
                shown, bound = distinct_figures(need, ceiling["gb_per_s"])
                said = f"{shown} GB/s"
                # Not the bytes it read (the `GB/s:` line's, read-ahead past the pass
                # included): hub-images' headrace-raw was "68.14 GB/s stored" in a note and
                # read 75.81 GB/s on that line, both called stored bytes.
                share = "its samples' stored share: " if stored else ""
                if fetched:
                    said = (
                        f"{rate:,.{_decimals(rate)}f} GB/s{' of payload' if stored else ''} "
                        "delivered, of which "
                        f"it fetched {amp:.2f} ({share}{shown} GB/s),"
                    )
                elif stored:
                    said = f"{rate:,.{_decimals(rate)}f} GB/s of payload ({share}{shown} GB/s)"
                res["above_storage_ceiling"] = True
                how = "O_DIRECT" if ceiling["o_direct"] else "buffered"
                # `--root` on an NFS or FUSE mount: O_DIRECT reads go to its server, so
                # "device" named a disk the run never measured.
                where = (
                    f"slowfs mount's ({how}{_depths(ceiling)})"
                    if slowfs
                    else f"{network} mount's ({how})"
                    if network
                    else ("device (O_DIRECT)" if ceiling["o_direct"] else "buffered")
                )
                notes.append(
                    f"{name}/{res['variant']}: {said} is above the {where} read ceiling "
                    f"of {bound} GB/s: served from the page cache"
                )
    return notes
