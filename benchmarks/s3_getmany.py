"""Serial GETs vs ObjectStore.get_many vs bare obstore, against moto behind a latency proxy.

    PYTHONPATH=src python benchmarks/s3_getmany.py [--latencies 20 50] [--rounds 3]

256 objects x 300 KB (RetinaNet-sized) are written to a local moto server; a
proxy subprocess adds a per-request delay. Each round runs every side once, in
the same order (A/B/C/D, A/B/C/D, ...), so drift hits all sides alike; the
table reports medians. Every side's fetched bytes are hashed in request order
and must match: speed is only reported for identical outputs.

Sides:
  serial    ObjectStore.get, one object at a time
  get_many  ObjectStore.get_many, 64 in flight (private event loop + obstore async)
  threads   ObjectStore.get on 64 Python threads (the alternative to get_many's design)
  bare      obstore.get_async x 64 under an asyncio.Semaphore, no retries or checks
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import obstore as obs
from _out import out as _out
from obstore.store import S3Store

from headrace.emulate import LocalS3
from headrace.io import ObjectStats, ObjectStore

BUCKET = "bench"
N_OBJECTS = 256
OBJECT_BYTES = 300_000
IN_FLIGHT = 64
_GET_MANY_STATS: list[ObjectStats] = []


def _digest(parts: Sequence[object]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(memoryview(p))  # type: ignore[arg-type]
    return h.hexdigest()


def _setup(server: LocalS3) -> list[str]:
    server.create_bucket(BUCKET)
    client = server.info.boto3_client()
    rng = random.Random(0)
    keys = [f"obj/{i:04d}.bin" for i in range(N_OBJECTS)]
    bodies = [rng.randbytes(OBJECT_BYTES) for _ in keys]
    with ThreadPoolExecutor(16) as pool:
        list(
            pool.map(
                lambda kb: client.put_object(Bucket=BUCKET, Key=kb[0], Body=kb[1]),
                zip(keys, bodies, strict=True),
            )
        )
    return keys


def _start_proxy(upstream: str, latency_ms: float) -> tuple[subprocess.Popen[str], str]:
    # A separate process, so the proxy's Python does not compete with the client for the GIL.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from headrace.emulate._proxy import main; sys.exit(main())",
            "--upstream",
            upstream,
            "--latency-ms",
            str(latency_ms),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def _sides(endpoint: str, keys: list[str]) -> dict[str, Callable[[], list[object]]]:
    store = ObjectStore(
        f"s3://{BUCKET}",
        endpoint=endpoint,
        region="us-east-1",
        access_key_id="testing",
        secret_access_key="testing",
        path_style=True,
        allow_http=True,
    )
    bare = S3Store(
        BUCKET,
        endpoint=endpoint,
        region="us-east-1",
        access_key_id="testing",
        secret_access_key="testing",
        virtual_hosted_style_request=False,
        client_options={"allow_http": True},
    )
    threads = ThreadPoolExecutor(IN_FLIGHT)

    def serial() -> list[object]:
        return [store.get(k) for k in keys]

    def get_many() -> list[object]:
        store.reset_stats()
        out = list(store.get_many(keys, max_in_flight=IN_FLIGHT))
        _GET_MANY_STATS.append(store.stats)
        return out

    def threaded() -> list[object]:
        return list(threads.map(store.get, keys))

    def bare_async() -> list[object]:
        async def run() -> list[object]:
            sem = asyncio.Semaphore(IN_FLIGHT)

            async def one(k: str) -> object:
                async with sem:
                    return await (await obs.get_async(bare, k)).bytes_async()

            return list(await asyncio.gather(*(one(k) for k in keys)))

        return asyncio.run(run())

    _sides.store = store  # type: ignore[attr-defined]
    _sides.threads = threads  # type: ignore[attr-defined]
    return {"serial": serial, "get_many": get_many, "threads": threaded, "bare": bare_async}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latencies", type=float, nargs="+", default=[20.0, 50.0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    total_mb = N_OBJECTS * OBJECT_BYTES / 1e6
    _out(
        f"{N_OBJECTS} objects x {OBJECT_BYTES} B = {total_mb:.1f} MB per pass; "
        f"{args.rounds} rounds; {IN_FLIGHT} in flight; {os.cpu_count()} CPUs"
    )
    rows = []
    with LocalS3() as server:
        keys = _setup(server)
        for latency in args.latencies:
            proc, endpoint = _start_proxy(server.endpoint, latency)
            try:
                sides = _sides(endpoint, keys)
                times: dict[str, list[float]] = {name: [] for name in sides}
                digests: dict[str, set[str]] = {name: set() for name in sides}
                for _ in range(args.rounds):
                    for name, fn in sides.items():
                        t0 = time.perf_counter()
                        out = fn()
                        times[name].append(time.perf_counter() - t0)
                        digests[name].add(_digest(out))
                        del out
                store = _sides.store  # type: ignore[attr-defined]
                stats = _GET_MANY_STATS[-1]
                _GET_MANY_STATS.clear()
                _sides.threads.shutdown()  # type: ignore[attr-defined]
                store.close()
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait()
            all_digests = set().union(*digests.values())
            if len(all_digests) != 1:
                raise SystemExit(f"digests differ at {latency} ms: {digests}")
            digest = next(iter(all_digests))[:16]
            serial_s = statistics.median(times["serial"])
            lat = sorted(stats.latencies_s)
            for name, ts in times.items():
                med = statistics.median(ts)
                rows.append(
                    (
                        latency,
                        name,
                        med,
                        total_mb / med,
                        1000 * med / N_OBJECTS,
                        serial_s / med,
                        digest,
                    )
                )
            _out(
                f"  latency {latency:g} ms: get_many max in flight {stats.max_in_flight_observed}, "
                f"request latency p50 {1000 * lat[len(lat) // 2]:.1f} ms, "
                f"p99 {1000 * lat[int(len(lat) * 0.99)]:.1f} ms, retries {stats.retries}"
            )
    _out()
    _out("| latency | side | median s | MB/s | ms/object | vs serial | sha256 (16) |")
    _out("|---|---|---|---|---|---|---|")
    for latency, name, med, mbs, ms, speedup, digest in rows:
        _out(
            f"| {latency:g} ms | {name} | {med:.2f} | {mbs:.1f} | {ms:.2f} | "
            f"{speedup:.1f}x | {digest} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
