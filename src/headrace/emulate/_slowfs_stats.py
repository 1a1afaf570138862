"""The counters of a slowfs server, and the JSON file they are written to."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import Counter
from typing import Any

__all__ = ["STATS_VERSION", "SlowFSStats", "size_bucket"]

STATS_VERSION = 1


def size_bucket(nbytes: int) -> int:
    """The histogram bucket of a request: the smallest power of two >= ``nbytes``.

    The kernel picks FUSE request sizes (4 KiB pages, 128 KiB readahead, up to
    1 MiB with direct I/O), so powers of two keep the histogram short while
    still telling those apart.
    """
    return 1 if nbytes <= 1 else 1 << (nbytes - 1).bit_length()


class SlowFSStats:
    """Thread-safe counters, written as JSON every ``interval_s`` and once at the end.

    The file carries ``written_at`` (``time.time()``), so a reader can wait for
    a snapshot taken after its own reads finished, and ``final`` once the server
    has stopped.
    """

    def __init__(self, path: str | None, *, interval_s: float, header: dict[str, Any]) -> None:
        self.path = path
        self.interval_s = interval_s
        self._header = dict(header)
        self._lock = threading.Lock()
        self._started_at = time.time()
        self.opens = 0
        self.open_errors = 0
        self.reads = 0
        self.read_errors = 0
        self.bytes_read = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.latency_wait_s = 0.0
        self.throttle_wait_s = 0.0
        self.stats = 0  # lookups and getattrs: a listing's stat of each file
        self.stats_in_flight = 0
        self.max_stats_in_flight = 0
        self.listings = 0  # READDIRs: a walk's listing of each folder
        self.listings_in_flight = 0
        self.max_listings_in_flight = 0
        self.read_sizes: Counter[int] = Counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # counters ----------------------------------------------------------------
    def open_done(self, *, ok: bool) -> None:
        with self._lock:
            if ok:
                self.opens += 1
            else:
                self.open_errors += 1

    def stat_started(self) -> None:
        with self._lock:
            self.stats += 1
            self.stats_in_flight += 1
            self.max_stats_in_flight = max(self.max_stats_in_flight, self.stats_in_flight)

    def stat_finished(self) -> None:
        with self._lock:
            self.stats_in_flight -= 1

    def listing_started(self) -> None:
        with self._lock:
            self.listings += 1
            self.listings_in_flight += 1
            self.max_listings_in_flight = max(self.max_listings_in_flight, self.listings_in_flight)

    def listing_finished(self) -> None:
        with self._lock:
            self.listings_in_flight -= 1

    def read_started(self, size: int) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.read_sizes[size_bucket(size)] += 1

    def read_finished(self, nbytes: int, *, latency_s: float, throttle_s: float) -> None:
        with self._lock:
            self.in_flight -= 1
            if nbytes < 0:
                self.read_errors += 1
            else:
                self.reads += 1
                self.bytes_read += nbytes
            self.latency_wait_s += latency_s
            self.throttle_wait_s += throttle_s

    def snapshot(self, *, final: bool = False) -> dict[str, Any]:
        with self._lock:
            body: dict[str, Any] = {
                "opens": self.opens,
                "open_errors": self.open_errors,
                "reads": self.reads,
                "read_errors": self.read_errors,
                "bytes_read": self.bytes_read,
                "in_flight": self.in_flight,
                "max_in_flight": self.max_in_flight,
                "latency_wait_s": round(self.latency_wait_s, 6),
                "throttle_wait_s": round(self.throttle_wait_s, 6),
                "stats": self.stats,
                "max_stats_in_flight": self.max_stats_in_flight,
                "listings": self.listings,
                "max_listings_in_flight": self.max_listings_in_flight,
                # JSON keys are strings; sorted numerically for people reading the file.
                "read_size_hist": {str(k): self.read_sizes[k] for k in sorted(self.read_sizes)},
            }
        now = time.time()
        return {
            "version": STATS_VERSION,
            **self._header,
            "started_at": self._started_at,
            "written_at": now,
            "elapsed_s": round(now - self._started_at, 6),
            "final": final,
            **body,
        }

    # file --------------------------------------------------------------------
    def write(self, *, final: bool = False) -> None:
        """Replace the stats file atomically, so readers never see half a file."""
        if self.path is None:
            return
        tmp = f"{self.path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.snapshot(final=final), fh, indent=1)
            fh.write("\n")
        os.replace(tmp, self.path)

    def start(self) -> None:
        """Write the file now and then every ``interval_s`` from a daemon thread."""
        if self.path is None or self._thread is not None:
            return
        self.write()
        self._thread = threading.Thread(target=self._loop, name="slowfs-stats", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the writer thread and write the final snapshot."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.write(final=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            # A full disk must not take the mount down; the next tick retries.
            with contextlib.suppress(OSError):
                self.write()
