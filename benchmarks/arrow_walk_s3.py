"""Opening Arrow IPC streams on S3: the header walk, with and without guessed headers.

    PYTHONPATH=src python benchmarks/arrow_walk_s3.py [--latency-ms 50] [--rounds 3]
        [--root DIR]

An IPC stream (a ``save_to_disk`` shard) has no footer: opening it on object
storage walks its message headers, a ranged GET of 64 KiB at each header the
last GET did not cover, one after another: a round trip per record batch
larger than 64 KiB. Shapes (written once under ``--root``): ``text``: one shard
of 300 record batches of 1,000 rows of ~1 KB text (~1 MiB batches whose sizes
vary by ~15 KB); ``tokens``: 64 record batches of 1,000 rows of 2,048 int32
tokens (8 MiB each, all the same size). They are served by ``_files_s3``, not
moto: moto reads a whole object for every ranged GET (with moto the walk took
61 s for the text shard's 302 GETs, ~200 ms each behind 50 ms of latency), reached
through a ``LatencyProxy`` of ``--latency-ms``. (The shards of
``benchmarks/arrow_walk_slowfs.py``.) Sides, alternating, ``--rounds`` each, a
fresh ``Table`` each:

``walk``            ``_arrow_remote.GUESS = False``: each header its own GET.
``walk + guesses``  the default: the next headers' places guessed from the batch
                    sizes seen, their GETs started ahead of the walk.

Reports median open seconds, GETs and MiB fetched by the open, and a digest of
every record batch's row count and 64 random rows read after (all must agree).

Prediction (50 ms, written before the change): without guesses the text
shard opens in ~300 x 50 ms = 15 s and the tokens in ~64 x 50 ms = 3.2 s. With
guesses: tokens ~0.3-0.5 s (16 guesses in flight: ~4 round trips for 64
headers, plus the 3 before guessing starts; 7-10x); text, where windows of
2 sd sqrt(j) under 128 KiB reach ~5 batches ahead, ~5 headers a round trip:
~3-3.5 s (4-5x). GETs: about one per batch on both sides, plus a few percent
of missed guesses on text.

Measured (3 rounds, medians): text 16.28 -> 3.26 s (5.0x), tokens 3.57 -> 0.43 s
(8.4x), as predicted; the same digests. GETs: tokens 66 on both sides; text 302
-> 375 (a miss: each window re-asked from a closer start that reached past the
one asked before was a GET more, 637 in all, until windows whose middle half
was asked for already were left alone: the same 3.3 s). MiB fetched at open:
text 18.8 -> 41.8 (windows up to 128 KiB wide). Later, ``text x8`` (8 such shards in a
save_to_disk folder, walked side by side, up to 16 guesses each on the one 64-request
queue; 2 rounds): 16.93 -> 4.44 s (3.8x), GETs 2,410 -> 2,868, digest db30be0d9fa3 on
both sides: the shared queue costs the guesses some reach (4.44 s against one shard's
3.29 s in the same run), no regression.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _files_s3 import files_s3, store_options
from _out import out as _out
from arrow_walk_slowfs import digest, text_shard, token_shard

import headrace.formats._arrow_remote as remote
from headrace.bench._s3_serve import _proxy
from headrace.formats import Table

URL = "s3://headrace-bench"  # keys: paths under --root
MiB = 1 << 20
SIDES = {"walk": False, "walk + guesses": True}


def write(root: Path) -> dict[str, Path]:
    root.mkdir(parents=True, exist_ok=True)
    shapes = {
        "text": root / "text.arrow",
        "tokens": root / "tokens.arrow",
        "text x8": root / "text8",
    }
    if not shapes["text"].exists():
        text_shard(shapes["text"], 0)
    if not shapes["tokens"].exists():
        token_shard(shapes["tokens"])
    if not (shapes["text x8"] / "state.json").exists():
        # A save_to_disk folder of 8 such shards: walked side by side, their guesses
        # sharing the source's request queue (64 in flight) with the walks' own GETs.
        shapes["text x8"].mkdir(exist_ok=True)
        names = [f"data-{i:05d}-of-00008.arrow" for i in range(8)]
        for i, name in enumerate(names):
            text_shard(shapes["text x8"] / name, i)
        state = {"_data_files": [{"filename": n} for n in names]}
        (shapes["text x8"] / "state.json").write_text(json.dumps(state))
    return shapes


def trial(url: str, store: dict[str, Any], guess: bool, check: bool) -> dict[str, Any]:
    remote.GUESS = guess
    t0 = time.perf_counter()
    t = Table.open(url, store_options=store)
    took = time.perf_counter() - t0
    stats = t.object_stats
    assert stats is not None
    out = {"open_s": took, "gets": stats.requests, "mib": stats.bytes / MiB}
    out["sha"] = digest(t)[:12] if check else ""
    t.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--root", default=os.path.join(tempfile.gettempdir(), "headrace-bench-arrow-walk-s3")
    )
    args = ap.parse_args()
    shapes = write(Path(args.root))
    _out(f"proxy {args.latency_ms:g} ms; {args.rounds} rounds, sides alternating")
    rows = []
    ok = True
    with files_s3(args.root) as upstream, _proxy(upstream, args.latency_ms, None) as endpoint:
        store = store_options(endpoint)
        for shape, path in shapes.items():
            url = f"{URL}/{path.name}"
            res: dict[str, list[dict[str, Any]]] = {s: [] for s in SIDES}
            for r in range(args.rounds):
                for side, guess in SIDES.items():
                    got = trial(url, store, guess, check=r == 0)
                    res[side].append(got)
                    print(f"{shape} round {r} {side}: {got}", file=sys.stderr, flush=True)
            shas = {x["sha"] for xs in res.values() for x in xs if x["sha"]}
            ok = ok and len(shas) == 1
            base = statistics.median(x["open_s"] for x in res["walk"])
            for side, xs in res.items():
                s = statistics.median(x["open_s"] for x in xs)
                rows.append(
                    f"| {shape} | {side} | {s:.3f} ({min(x['open_s'] for x in xs):.3f}-"
                    f"{max(x['open_s'] for x in xs):.3f}) | {base / s:.1f}x | "
                    f"{statistics.median(x['gets'] for x in xs):.0f} | "
                    f"{statistics.median(x['mib'] for x in xs):.2f} | {'/'.join(sorted(shas))} |"
                )
    remote.GUESS = True
    _out("| shape | side | open s, median (min-max) | vs walk | GETs | MiB | digest |")
    _out("|---|---|---|---|---|---|---|")
    for row in rows:
        _out(row)
    if not ok:
        _out("FAIL: the sides read different rows")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
