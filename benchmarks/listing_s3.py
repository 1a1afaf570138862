"""Listing a large S3 prefix: one listing (a page of 1,000 keys after another) against
the fanned one (``headrace.io._object_listing``: its folders found a level at a time,
then 32 ranges of keys listed at once), side by side.

    PYTHONPATH=src python benchmarks/listing_s3.py [--folders 1000] [--per-folder 100]
        [--latency-ms 30,100] [--rounds 3] [--root DIR] [--what list|filesource]
        [--layout imagenet|flat]

An ImageNet-like tree (``train/nXXXXXXXX/nXXXXXXXX_I.JPEG``, a few bytes each) is
written once under ``--root`` and served by ``benchmarks/_files_s3.py`` (S3's paging:
1,000 keys a page, ``start-after``, ``delimiter``) behind a ``LatencyProxy`` of each
``--latency-ms``. Each trial is a fresh process listing ``s3://b/train`` twice (the
first a cold client, the second its warm store), sides alternating (A/B, then B/A).
``one`` is the same code with the first page made larger than the prefix, so it is
the plain listing, every page in turn. Reported per side: the medians of both
listings, the requests each took (the proxy's count), the process's CPU seconds,
and the sha256 of every key, size and tag listed, which both sides must agree on.
``--what filesource`` times a ``FileSource``'s open of the prefix instead (its
listing, filtered and packed), the digest of the keys, sizes and tags it holds.

Prediction (written before measuring): the listing's time is its pages' round trips
plus each side's CPU (this server, the proxy and the client share 2 cores: ~24 ms a
page of 1,000 keys, measured with no latency). 20,000 keys in 100 folders at 30 ms:
20 pages one after another ~0.95 s; fanned, 1 + 1 + 32 requests in ~3 round trips
plus the CPU: ~0.35 s (2.5-3x). 100,000 keys in 1,000 folders: 100 pages, ~5.5 s at 30
ms and ~12 s at 100 ms; fanned ~2 s both (the CPU): 2.5-3.5x and ~6x.

Measured (2c, 2026-12-06, 3 rounds, medians of the cold listings): at 30 ms, one 4.08 s,
fanned 0.95 s (4.3x); at 100 ms, 11.26 s and 1.34 s (8.4x); 100 against 130 requests;
sha256 e32856486cd371bd on both sides. Both beat the prediction: the server's cost a page
was less than the 24 ms first measured (that included its first reading of the files).
``--what filesource`` (no prediction written): 4.15 s and 0.99 s at 30 ms (4.2x), 11.09 s
and 1.22 s at 100 ms (9.1x), the same sha256.
``--layout flat`` (COCO's ``train2017/``: ``train/%012d.jpg``, ids spread over 0-582k, no
folders), cut by name. Prediction: 1.2 s at 30 ms (3.5-4x), 1.8 s at 100 ms (~6x), 150-200
requests. Measured (2c, 2026-12-06, 3 rounds): 4.46 s and 1.36 s (3.3x), 11.29 s and 1.73 s
(6.5x), 100 against 164-171 requests, sha256 3ff65d29467935c1 on both sides; before the cut
by name the fanned side took 4.99 s and 11.62 s.
docs/objects.md ("A large prefix: listed in ranges at once") has the rest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _children import alternate
from _files_s3 import files_s3, store_options
from _out import out

HERE = Path(__file__).resolve()


def write(root: Path, folders: int, per: int, layout: str) -> Path:
    """The tree under ``root`` (once: kept between runs)."""
    done = root / f".done-{folders}x{per}"
    if not done.exists() and layout == "flat":  # COCO's train2017/: ids spread over 0-582k
        (root / "train").mkdir(parents=True, exist_ok=True)
        ids = random.Random(0).sample(range(582_000), folders * per)
        for i in ids:
            (root / "train" / f"{i:012d}.jpg").write_bytes(b"x" * (i % 7 + 1))
        done.touch()
    if not done.exists():
        for c in range(folders):
            d = root / "train" / f"n{1440764 + c:08d}"
            d.mkdir(parents=True, exist_ok=True)
            for i in range(per):
                (d / f"n{1440764 + c:08d}_{i}.JPEG").write_bytes(b"x" * (i % 7 + 1))
        done.touch()
    return root


def child(side: str, endpoint: str, what: str) -> None:
    from headrace.formats import FileSource
    from headrace.io import ObjectStore, _object_listing

    if side == "one":
        _object_listing.PAGE = 10**12  # the first page is the whole listing
    options = store_options(endpoint)
    store = ObjectStore("s3://b/train", **options)  # type: ignore[arg-type]
    runs = []
    for _ in range(2):
        t = time.perf_counter()
        if what == "filesource":  # a file dataset's open: its listing, kept packed
            src = FileSource("s3://b/train", format="raw", store_options=options)
            dt = time.perf_counter() - t
            listed = list(zip(src.files.keys, src.files.sizes, src.files.etags, strict=True))
            src.close()
        else:
            listed = [(k, i.size, i.etag) for k, i in store.list_info()]
            dt = time.perf_counter() - t
        text = "".join(f"{k}\0{size}\0{tag}\n" for k, size, tag in listed)
        runs.append((dt, len(listed), hashlib.sha256(text.encode()).hexdigest()[:16]))
    store.close()
    use = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"runs": runs, "cpu_s": use.ru_utime + use.ru_stime}))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--folders", type=int, default=1000)
    ap.add_argument("--per-folder", type=int, default=100)
    ap.add_argument("--latency-ms", default="30,100")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--what",
        choices=["list", "filesource"],
        default="list",
        help="time list_info() or a FileSource's open",
    )
    ap.add_argument(
        "--layout",
        choices=["imagenet", "flat"],
        default="imagenet",
        help="folders of keys (ImageNet's) or every key in one folder (COCO's)",
    )
    ap.add_argument("--root", default="/tmp/headrace-listing-s3")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--endpoint", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.endpoint, args.what)
        return
    from headrace.emulate import LatencyProxy

    where = Path(args.root) / f"{args.layout}-{args.folders}x{args.per_folder}"
    root = write(where, args.folders, args.per_folder, args.layout)
    env = {**os.environ, "PYTHONPATH": str(HERE.parent.parent / "src")}
    with files_s3(str(root)) as upstream:
        for latency in (float(x) for x in args.latency_ms.split(",")):
            with LatencyProxy(upstream, latency_ms=latency) as proxy:
                alternate(
                    str(HERE), ["one"], 1, ["--endpoint", proxy.endpoint, "--what", args.what], env
                )  # warm
                requests: dict[str, list[int]] = {"one": [], "fanned": []}
                got: dict[str, list[dict[str, Any]]] = {"one": [], "fanned": []}
                for r in range(args.rounds):
                    for side in ("one", "fanned") if r % 2 == 0 else ("fanned", "one"):
                        proxy.reset_stats()
                        trial = alternate(
                            str(HERE),
                            [side],
                            1,
                            ["--endpoint", proxy.endpoint, "--what", args.what],
                            env,
                        )
                        got[side] += trial[side]
                        requests[side].append(proxy.stats.requests // 2)
            keys = args.folders * args.per_folder
            for side, trials in got.items():
                first = statistics.median(t["runs"][0][0] for t in trials)
                second = statistics.median(t["runs"][1][0] for t in trials)
                cpu = statistics.median(t["cpu_s"] for t in trials)
                digests = {r[2] for t in trials for r in t["runs"]}
                out(
                    f"{keys:,} keys, {latency:g} ms, {side}: {first:.3f} s / {second:.3f} s a "
                    f"listing (cold / warm store), {statistics.median(requests[side])} requests, "
                    f"{cpu:.2f} CPU s a process, sha256 {sorted(digests)}"
                )
            cold = {s: statistics.median(t["runs"][0][0] for t in got[s]) for s in got}
            ratio = cold["one"] / cold["fanned"]
            out(f"{keys:,} keys, {latency:g} ms: fanned {ratio:.2f}x faster (cold)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
