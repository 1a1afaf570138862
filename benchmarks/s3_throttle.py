"""Reads from a store that throttles: adapting the requests in flight vs not, A/B/A/B.

    python benchmarks/s3_throttle.py [--latency-ms 50 --max-concurrent 8 --requests 400
                                      --in-flight 64 --trials 4 --json OUT]

Starts moto on 127.0.0.1 with one 4 MiB object, and a proxy in front of it
that waits ``--latency-ms`` per request and answers ``503 SlowDown`` to any
request that arrives while ``--max-concurrent`` are being served (an S3 prefix
over its request rate). Each trial reads the same ``--requests`` ranged GETs
of 64 KiB through ``ObjectStore.get_many(max_in_flight=--in-flight)`` on each
side, in alternating order:

``adaptive``  the default ``RetryPolicy`` (halve the tries in flight on a throttle)
``fixed``     ``adapt_in_flight=False``: every retry at the same concurrency
``oracle``    ``adapt_in_flight=False`` with ``max_in_flight=--max-concurrent``:
              what a caller who knew the store's limit would get

Reports per side the median requests/s of the trials that finished, how many
trials gave up, throttled tries (the store's and the proxy's counts), the
lowest limit the store set, and the SHA-256 digest of what each side read,
which must equal the object's own bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from headrace.emulate import LatencyProxy, LocalS3
from headrace.errors import StorageError
from headrace.io import ObjectStore, RetryPolicy

BUCKET = "throttle-bench"
OBJECT_BYTES = 4 << 20
RANGE = 64 << 10


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--max-concurrent", type=int, default=8)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    data = bytes(range(256)) * (OBJECT_BYTES // 256)
    reqs = [("obj", (i * 99_991) % (OBJECT_BYTES - RANGE), RANGE) for i in range(a.requests)]
    want = hashlib.sha256(b"".join(data[o : o + n] for _, o, n in reqs)).hexdigest()
    sides: dict[str, tuple[bool, int]] = {
        "adaptive": (True, a.in_flight),
        "fixed": (False, a.in_flight),
        "oracle": (False, a.max_concurrent),
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    with LocalS3() as s3:
        s3.create_bucket(BUCKET)
        s3.info.boto3_client().put_object(Bucket=BUCKET, Key="obj", Body=data)
        with LatencyProxy(
            s3.endpoint, latency_ms=a.latency_ms, max_concurrent=a.max_concurrent
        ) as proxy:
            opts = {**s3.info.store_options(), "endpoint": proxy.endpoint}
            for t in range(a.trials):
                names = list(sides) if t % 2 == 0 else list(sides)[::-1]
                for name in names:
                    adapt, in_flight = sides[name]
                    runs[name].append(_trial(opts, proxy, reqs, adapt, in_flight))
    report: dict[str, Any] = {
        "latency_ms": a.latency_ms,
        "max_concurrent": a.max_concurrent,
        "requests": a.requests,
        "range_bytes": RANGE,
        "in_flight": a.in_flight,
        "trials": a.trials,
        "expected_digest": want,
        "sides": {},
    }
    ok = True
    print(
        f"store: {a.max_concurrent} requests at once, {a.latency_ms:g} ms each way; "
        f"{a.requests} GETs of {RANGE // 1024} KiB per trial, {a.trials} trials, A/B/C/C/B/A"
    )
    print(
        f"{'side':9} {'in flight':>9} {'req/s (median)':>15} {'gave up':>8} "
        f"{'throttled':>10} {'lowest limit':>13}  digest"
    )
    for name, trials in runs.items():
        done = [r for r in trials if r["digest"] is not None]
        rate = statistics.median(r["requests_per_s"] for r in done) if done else None
        digests = {r["digest"] for r in done}
        right = digests <= {want}
        ok = ok and right
        lowest = [r["lowest_limit"] for r in trials if r["lowest_limit"] is not None]
        side = {
            "in_flight": sides[name][1],
            "adapt_in_flight": sides[name][0],
            "median_requests_per_s": rate,
            "gave_up": len(trials) - len(done),
            "throttled_median": statistics.median(r["throttled"] for r in trials),
            "lowest_limit": min(lowest) if lowest else None,
            "digests_equal_object": right,
            "trials": trials,
        }
        report["sides"][name] = side
        rate_s = "-" if rate is None else f"{rate:,.0f}"
        low_s = "-" if side["lowest_limit"] is None else f"{side['lowest_limit']:.1f}"
        digest_s = next(iter(digests))[:12] if digests else "-"
        print(
            f"{name:9} {side['in_flight']:>9} {rate_s:>15} "
            f"{side['gave_up']:>5}/{len(trials):<2} {side['throttled_median']:>10.0f} "
            f"{low_s:>13}  {digest_s}"
        )
    adaptive = report["sides"]["adaptive"]["median_requests_per_s"]
    oracle = report["sides"]["oracle"]["median_requests_per_s"]
    if adaptive and oracle:
        print(f"adaptive / oracle: {adaptive / oracle:.2f}")
        report["adaptive_over_oracle"] = adaptive / oracle
    if a.json:
        a.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if ok else 1


def _trial(
    opts: dict[str, Any],
    proxy: LatencyProxy,
    reqs: list[tuple[str, int, int]],
    adapt: bool,
    in_flight: int,
) -> dict[str, Any]:
    store = ObjectStore(f"s3://{BUCKET}", retry=RetryPolicy(adapt_in_flight=adapt), **opts)
    proxy.reset_stats()
    t0 = time.perf_counter()
    digest: str | None = None
    error = None
    try:
        out = store.get_many(reqs, max_in_flight=in_flight)
        h = hashlib.sha256()
        for view in out:
            h.update(view)
        digest = h.hexdigest()
    except StorageError as exc:
        error = str(exc).split(" (", 1)[0]
    seconds = time.perf_counter() - t0
    s = store.stats
    store.close()
    return {
        "seconds": seconds,
        "requests_per_s": len(reqs) / seconds if digest else None,
        "digest": digest,
        "error": error,
        "attempts": s.attempts,
        "throttled": s.throttled,
        "proxy_throttled": proxy.stats.throttled,
        "lowest_limit": s.lowest_in_flight_limit,
    }


if __name__ == "__main__":
    sys.exit(main())
