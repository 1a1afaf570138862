"""``headrace probe s3://bucket/key``: measure an object store as the loaders read it.

Ranged GETs of one object through :class:`headrace.io.ObjectStore` (the
client every object-store reader uses), for request sizes from 4 KiB to
8 MiB and 1 to 64 requests in flight: what a GET costs (latency), how many
in flight it takes to fill the pipe, and the MB/s each request size reaches.
Each measurement draws its own random ranges (independently: on a small
object they can overlap), in two rounds of alternating order, and is
checked against ``get_ranges`` of the same ranges made outside the timed
interval. A measurement makes 4 requests per request in flight (16 at
least), fewer if ``--ops`` or 256 MiB of data says so (the budget never
cuts a round below its depth), split over the rounds: enough to fill the
pipe at that depth, short enough to probe a 50 ms endpoint in seconds.
MB is 10^6 bytes.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from headrace.bench._probe import TimedResult, interrupted_skip, probe_report, rates
from headrace.bench._probe_table import (
    in_flight_cell,
    interrupted_note,
    number_cell,
    shallow_note,
    untimed_note,
)
from headrace.errors import ConfigError
from headrace.formats._object_files import split_object_url
from headrace.io import ObjectStore

__all__ = ["Progress", "probe_object", "table"]

SIZES = (4096, 1 << 20, 8 << 20)
DEPTHS = (1, 8, 32, 64)
_BUDGET = 256 << 20  # bytes per measurement at most
#: the most bytes a round at its depth holds in memory (and as many again to check them)
_DEPTH_BUDGET = 1 << 30


_Result = TimedResult


class Progress:
    """What an object probe has measured so far, for the thread that waits for it: on
    Ctrl-C that thread reports it (:meth:`report`) and closes the store (:meth:`stop`),
    while the probe's own thread may still wait on a request that never ends (an
    endpoint that takes connections and never answers held the probe's main thread
    until its 30 s timeout, then the exit 5 s more). Each round done is appended whole
    (``rounds``), so a report made meanwhile never mixes a round's figures half in."""

    def __init__(self, url: str, store_options: dict[str, Any], rounds: int) -> None:
        self.url, self.store_options, self.n_rounds = url, store_options, rounds
        self.store: ObjectStore | None = None
        self.size = 0
        self.meas: list[tuple[int, int]] = []  # (request bytes, in flight)
        self.skipped: list[dict[str, Any]] = []
        #: (measurement, GETs, seconds, their latencies, verified), one per round done
        self.rounds: list[tuple[int, int, float, list[float], bool]] = []

    def stop(self) -> None:
        """Close the store: its requests in flight are cancelled, and none is retried."""
        if self.store is not None:
            self.store.close()

    def report(self, stopped: KeyboardInterrupt | SystemExit | None) -> dict[str, Any]:
        """The report of the rounds done; raised in ProbeInterrupted if ``stopped``."""
        done: dict[int, list[int]] = {i: [] for i in range(len(self.meas))}
        seconds = dict.fromkeys(range(len(self.meas)), 0.0)
        lat: dict[int, list[float]] = {i: [] for i in range(len(self.meas))}
        ok = dict.fromkeys(range(len(self.meas)), True)
        for i, n, s, took, same in list(self.rounds):
            done[i].append(n)
            seconds[i] += s
            lat[i].extend(took)
            ok[i] = ok[i] and same
        skipped = list(self.skipped)
        results = []
        for i, (req, depth) in enumerate(self.meas):
            if not done[i]:
                if stopped is not None:
                    skipped.append(
                        {
                            "mode": "get",
                            "request_bytes": req,
                            "in_flight": depth,
                            "reason": interrupted_skip(stopped),
                        }
                    )
                continue
            n, s = sum(done[i]), seconds[i]
            ops_per_s, mb_per_s = rates(n, n * req, s)
            results.append(
                _Result(
                    mode="get",
                    pattern="random",
                    request_bytes=req,
                    in_flight=depth,
                    in_flight_reached=min(depth, min(done[i])),
                    engine="obstore",
                    ops=n,
                    seconds=round(s, 6),
                    ops_per_s=ops_per_s,
                    mb_per_s=mb_per_s,
                    latency_p50_ms=round(1e3 * float(np.median(lat[i])), 2) if lat[i] else 0.0,
                    verified=ok[i],
                    cached_before=0.0,  # no local cache: every GET is the store's
                )
            )
        endpoint = str(self.store_options.get("endpoint") or "")
        head = {
            "path": self.url,
            "filesystem": {
                "fstype": urlsplit(self.url).scheme,
                "device": endpoint or "default endpoint",
                "mount": split_object_url(self.url)[0],
                "network": True,  # an object store: every read a round trip
            },
            "file_bytes": self.size,
        }
        return probe_report(head, self.n_rounds, results, skipped, stopped)


def probe_object(
    url: str,
    *,
    row_bytes: int,
    ops: int,
    seed: int,
    store_options: dict[str, Any],
    rounds: int = 2,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The probe's report; what it measures goes into ``progress`` as it goes."""
    at = progress if progress is not None else Progress(url, store_options, rounds)
    base, key = split_object_url(url)
    with ObjectStore(base, **store_options) as store:
        at.store = store
        # On the store's loop, as every request of a store: stop()'s close() ends it.
        size = at.size = store.stat(key).size
        sizes = sorted({s for s in (*SIZES, row_bytes) if s <= size})
        if not sizes:
            raise ConfigError(
                f"{url}: {size:,} bytes is too small to probe: its smallest request is "
                f"{min(*SIZES, row_bytes):,} bytes; give a larger object"
                + (f", or rows that fit (e.g. --row-bytes {size})" if size else "")
            )
        at.skipped = [
            {
                "mode": "get",
                "request_bytes": s,
                "reason": f"the object has {size:,} bytes, fewer than one request",
            }
            for s in sorted({*SIZES, row_bytes} - set(sizes))
        ]
        meas = [(s, d) for s in sizes for d in DEPTHS]
        rng = np.random.default_rng(seed)
        plan: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for i, (req, depth) in enumerate(meas):
            # The byte budget never cuts a round below its depth (8 MiB requests got 16
            # a round, so their "64 in flight" rows had 16 at most); only --ops does.
            n = max(1, min(ops, max(4 * depth, 16), _BUDGET // req) // rounds)
            # Nor past _DEPTH_BUDGET: --row-bytes 1G asked for 64 GETs of 1 GiB at once
            # at depth 64 (and as many again to check them), 128 GiB in memory.
            n = max(n, min(depth, ops // rounds, max(1, _DEPTH_BUDGET // req)))
            for r in range(rounds):
                plan[i, r] = [(int(o), req) for o in rng.integers(0, size - req + 1, n)]
        at.meas = meas
        stopped: KeyboardInterrupt | SystemExit | None = None
        try:
            for r in range(rounds):
                order = list(range(len(meas)))
                for i in order if r % 2 == 0 else reversed(order):
                    ranges = plan[i, r]
                    before = len(store.stats.latencies_s)
                    t0 = time.perf_counter()
                    got = store.get_many([(key, o, n) for o, n in ranges], max_in_flight=meas[i][1])
                    seconds = time.perf_counter() - t0
                    took = list(store.stats.latencies_s)[before:]
                    want = store.get_ranges(key, ranges, coalesce=0)
                    same = _digest(got) == _digest(want)
                    at.rounds.append((i, len(ranges), seconds, took, same))
        except (KeyboardInterrupt, SystemExit) as exc:
            # What was measured so far is reported (marked interrupted), then the
            # interrupt goes on: a probe stopped after minutes printed nothing.
            stopped = exc
    return at.report(stopped)


def _digest(parts: list[memoryview]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.hexdigest()


def table(report: dict[str, Any]) -> str:
    fs = report["filesystem"]
    lines = [
        f"object {report['path']}  ({fs['fstype']} at {fs['device']})",
        f"{report['file_bytes']:,} bytes; MB = 10^6 bytes; {report['rounds']} rounds, "
        "alternating order, fresh random ranges each; every result verified by get_ranges",
        f"{'request':>8} {'in flight':>9} {'ops':>5} {'seconds':>8} {'ops/s':>9} {'MB/s':>9} "
        f"{'GET p50 ms':>10}  verified",
    ]
    lines.extend(
        f"{x['request_bytes']:>8} {in_flight_cell(x)} {x['ops']:>5} {x['seconds']:>8.3f} "
        f"{number_cell(x['ops_per_s'], '>9,.1f')} {number_cell(x['mb_per_s'], '>9.1f')} "
        f"{x['latency_p50_ms']:>10.1f}  "
        f"{'yes' if x['verified'] else 'NO'}"
        for x in report["results"]
    )
    by = {(x["request_bytes"], x["in_flight"]): x for x in report["results"]}
    for req in sorted({x["request_bytes"] for x in report["results"]}):
        one, deep = (
            by.get((req, 1)),
            max(
                (x for x in report["results"] if x["request_bytes"] == req),
                key=lambda x: x["mb_per_s"] or 0.0,
            ),
        )
        if one and one["ops_per_s"] and deep["ops_per_s"]:
            lines.append(
                f"{req:>8} B requests: best {deep['mb_per_s']:.1f} MB/s at "
                f"{deep['in_flight_reached']} in flight = "
                f"{deep['ops_per_s'] / one['ops_per_s']:.1f}x one at a time"
            )
    lines.extend(interrupted_note(report))
    lines.extend(shallow_note(report["results"]))
    lines.extend(untimed_note(report["results"]))
    lines.extend(
        f"skipped {x['request_bytes']}-byte requests"
        + (f" x{x['in_flight']}" if "in_flight" in x else "")
        + f": {x['reason']}"
        for x in report.get("skipped", [])
    )
    return "\n".join(lines)
