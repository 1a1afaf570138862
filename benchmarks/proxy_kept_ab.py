"""GETs through the latency proxy in front of the local S3 emulator, of two source trees: A/B/A/B.

    python benchmarks/proxy_kept_ab.py --a /tmp/base/src --b src [--rounds 4 --passes 6]

Each child process starts ``LocalS3`` and a ``LatencyProxy`` (no added latency, so the
proxy's and moto's own costs are what is timed) from its own tree, puts 64 objects of
4 KiB and 16 of 300 KB, and ``--passes`` times fetches them all through the proxy with
``ObjectStore.get_many`` (16 in flight). Reports each side's medians of the time a pass
takes and of moto's CPU per GET (its process's user + system time, from /proc), the
paired B/A ratios, and the SHA-256 of every byte each side fetched (which must agree).

Prediction (2026-12-06, before measuring; A forwards each request on a new upstream
connection, B keeps the upstream connection of a client connection for its next
bodiless request): moto's CPU per GET 1.25 -> 0.94 ms as measured for kept connections
straight to it (2026-12-05), so ~0.75x; a pass, bound by moto's CPU and the proxy's on
2 cores, ~0.8x.

Measured (4 rounds of 6 passes, 2c, 2026-12-06; A 08c20e96's proxy, B keeping them):
a pass 181.9 -> 116.4 ms (paired B/A 0.633), moto's CPU a GET 1.906 -> 1.250 ms (paired
0.656; predicted 0.75: a new connection cost moto more than the 0.3 ms that kept
connections saved straight to it on 2026-12-05), SHA-256 29b0003e5ac88688 on both sides.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import statistics
import time
from pathlib import Path

from _trees_ab import paired_report, tree_parser

SMALL, BIG = 64, 16


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child(passes: int) -> dict[str, object]:
    """Runs in a child process with one tree on sys.path."""
    from headrace.emulate import LatencyProxy, LocalS3
    from headrace.io import ObjectStore

    sizes = {f"s/{i:03d}": 4096 for i in range(SMALL)} | {f"b/{i:02d}": 300_000 for i in range(BIG)}
    with LocalS3() as server:
        server.create_bucket("proxy-ab")
        client = server.info.boto3_client()
        for i, (key, size) in enumerate(sizes.items()):
            client.put_object(Bucket="proxy-ab", Key=key, Body=random.Random(i).randbytes(size))
        pid = server.pid
        assert pid is not None
        with LatencyProxy(server.endpoint) as proxy:
            options = {**server.info.store_options(), "endpoint": proxy.endpoint}
            with ObjectStore("s3://proxy-ab", **options) as store:
                keys = sorted(sizes)
                store.get_many(keys, max_in_flight=16)  # warm-up: connections, moto's paths
                walls, cpus, digest = [], [], hashlib.sha256()
                for _ in range(passes):
                    c0, t0 = cpu_s(pid), time.perf_counter()
                    got = store.get_many(keys, max_in_flight=16)
                    walls.append(time.perf_counter() - t0)
                    cpus.append((cpu_s(pid) - c0) / len(keys))
                    for view in got:
                        digest.update(view)
    return {
        "pass_ms": 1e3 * statistics.median(walls),
        "moto_ms_per_get": 1e3 * statistics.median(cpus),
        "sha256": digest.hexdigest()[:16],
    }


def main() -> None:
    ap = tree_parser(__doc__)
    ap.set_defaults(rounds=4)
    ap.add_argument("--passes", type=int, default=6)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.passes)))
        return
    print(f"{args.rounds} rounds of {args.passes} passes of {SMALL + BIG} GETs")
    names = ["pass_ms", "moto_ms_per_get"]
    paired_report(__file__, args, ["-", "--passes", str(args.passes)], names)


if __name__ == "__main__":
    main()
