"""File workloads side by side: map-style, iterable, headrace, headrace-raw, ceiling.

    PYTHONPATH=src python benchmarks/files.py --storage s3 --latency-ms 50 --workload jpeg
    PYTHONPATH=src python benchmarks/files.py --storage s3 --latency-ms 50 --workload npz

Prints one row per variant (throughput, requests in flight, peak RSS, digests)
and the checks: headrace vs map-style speed-up, headrace-raw vs ceiling, and
that the digests agree.
"""

from __future__ import annotations

import argparse
import json
import sys

from headrace.bench import FILE_VARIANTS, FILE_WORKLOADS, run_files_bench


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--storage", choices=("local", "s3"), default="local")
    p.add_argument("--latency-ms", type=float, default=None)
    p.add_argument("--workload", choices=sorted(FILE_WORKLOADS), default="jpeg")
    p.add_argument("--variants", default=",".join(FILE_VARIANTS))
    p.add_argument("--files", type=int, default=None, help="scale the dataset down")
    p.add_argument("--in-flight", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the rows here")
    a = p.parse_args(argv)
    rows = run_files_bench(
        a.workload,
        a.storage,
        latency_ms=a.latency_ms,
        variants=a.variants.split(","),
        files=a.files,
        in_flight=a.in_flight,
        seed=a.seed,
    )
    cols = ("variant", "samples_per_s", "mb_per_s", "in_flight_observed", "peak_rss_bytes")
    print(f"{a.workload} on {a.storage}, latency {a.latency_ms} ms")
    print(" ".join(f"{c:>18}" for c in (*cols, "digest", "canonical")))
    for r in rows:
        vals = [*(r[c] for c in cols[:-1]), f"{r['peak_rss_bytes'] / 2**20:.0f} MiB"]
        print(" ".join(f"{v!s:>18}" for v in vals), r["digest"][:10], r["canonical_digest"][:10])
    by = {r["variant"]: r for r in rows}
    if "headrace" in by and "map-style" in by:
        h, m = by["headrace"], by["map-style"]
        agree = "agree" if h["digest"] == m["digest"] else "DIFFER"
        print(
            f"headrace / map-style: {h['samples_per_s'] / m['samples_per_s']:.1f}x, digests {agree}"
        )
    if "iterable" in by and "headrace" in by:
        same = by["iterable"]["canonical_digest"] == by["headrace"]["canonical_digest"]
        print(f"iterable vs headrace canonical digests {'agree' if same else 'DIFFER'}")
    if "headrace-raw" in by and "ceiling" in by:
        ratio = by["headrace-raw"]["mb_per_s"] / by["ceiling"]["mb_per_s"]
        r, c = by["headrace-raw"], by["ceiling"]
        agree = "agree" if r["canonical_digest"] == c["canonical_digest"] else "DIFFER"
        print(f"headrace-raw / ceiling: {ratio:.0%} (canonical digests {agree})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
