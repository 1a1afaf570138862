"""A warm ``cache_dir``'s epoch of block entries: two source trees A/B/A/B.

    python benchmarks/cache_blocks_ab.py --a /tmp/base/src --b src [--rounds 6]
                                         [--format mds|npy|tokens]

Writes 20,000 MDS samples of ~3 KB (``tokens``: 1,000-2,000 uint16 ids; ``id``) in
40 uncompressed shards of 500 (``--format npy``: 4 NPY files of 4,000 float32 rows of
4 KiB, 16 MB each, read by rows under ``shuffle="samples"``; ``--format tokens``: a
64 MiB uint32 token file, 8,000 batches of 32 x 1,025 tokens through 16 MiB windows
of 4 MiB block entries, timed without digesting them), serves them as S3
objects (``_files_s3``, no added
latency), then runs a short child process per tree and round (A, B, then B, A next
round), each reading one epoch (B=64, full shuffle) from the warm cache after one
untimed epoch (its interpreter and the page cache warm). Each tree has a cache of its
own, filled with one epoch by its first child.
Reports each side's median seconds an epoch, the median of the rounds' paired B/A
ratios, the bytes each read from the cache's entries and each side's batch digest
(which must agree).

The figure in docs/files.md ("cache_dir") compares the tree before a change to how
block entries are read (A) with the tree after it (B).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _files_s3 import files_s3, store_options
from _trees_ab import tree_parser, tree_runs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _mds_files import write_mds  # the tests' writer of Streaming's format

SAMPLES, PER_SHARD, BATCH = 20_000, 500, 64
NPY_FILES, NPY_ROWS = 4, 4_000
TOKEN_STEPS = 8_000  # B=32, L=1024 over a 64 MiB uint32 file: 62 windows of 16 MiB


def epoch(endpoint: str, cache: Path, fmt: str) -> tuple[float, str, int]:
    from headrace.formats import FileSource, MDSSource, TokenSource
    from headrace.pipeline import Loader
    from headrace.testing import batch_digest

    options = store_options(endpoint)
    if fmt == "tokens":  # timed bare: hashing 131 KB batches would be most of the time
        src = TokenSource("s3://bench/tokens/t.bin", dtype="uint32", context=1024,
                          window_bytes=16 << 20, block_bytes=4 << 20, store_options=options,
                          cache_dir=cache)  # fmt: skip
        with Loader(src, batch_size=32, seed=1, steps=TOKEN_STEPS) as loader:
            t0 = time.perf_counter()
            for _ in loader:
                pass
            seconds = time.perf_counter() - t0
        with Loader(src, batch_size=32, seed=1, steps=300) as loader:
            digest = batch_digest(loader)
        assert src.cache_stats is not None
        return seconds, digest, src.cache_stats.hit_bytes
    if fmt == "npy":
        kw = {"format": "npy", "samples_per_file": NPY_ROWS, "shuffle": "samples"}
        src: Any = FileSource("s3://bench/npy", store_options=options, cache_dir=cache, **kw)
        steps = NPY_FILES * NPY_ROWS // BATCH
    else:
        src = MDSSource("s3://bench/raw", store_options=options, cache_dir=cache)
        steps = SAMPLES // BATCH
    t0 = time.perf_counter()
    with Loader(src, batch_size=BATCH, seed=1, steps=steps) as loader:
        digest = batch_digest(loader)
    stats = src.cache_stats
    assert stats is not None
    return time.perf_counter() - t0, digest, stats.hit_bytes


def main() -> None:
    ap = tree_parser(__doc__)
    ap.add_argument("--endpoint", default=None, help="(the child's: the server's)")
    ap.add_argument("--format", choices=("mds", "npy", "tokens"), default="mds")
    args = ap.parse_args()
    if args.child:
        # Each tree its own cache, filled by its first child: a tree that changes the
        # entries (joins blocks) must not hand them to the other.
        tree = os.path.abspath(os.environ["PYTHONPATH"])
        cache = Path(f"{args.child}-{'A' if tree == os.path.abspath(args.a) else 'B'}")
        if not cache.exists():
            epoch(args.endpoint, cache, args.format)  # fills it
        epoch(args.endpoint, cache, args.format)  # untimed
        seconds, digest, read = epoch(args.endpoint, cache, args.format)
        print(json.dumps({"s": seconds, "digest": digest, "read": read}))
        return
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory(prefix="headrace-blocks-ab-") as tmp:
        root = Path(tmp)
        if args.format == "tokens":
            (root / "data" / "tokens").mkdir(parents=True)
            ids = rng.integers(0, 50_000, 16 << 20, dtype=np.uint32)
            ids.tofile(root / "data" / "tokens" / "t.bin")
        elif args.format == "npy":
            (root / "data" / "npy").mkdir(parents=True)
            for i in range(NPY_FILES):
                rows = rng.standard_normal((NPY_ROWS, 32, 32), dtype=np.float32)
                np.save(root / "data" / "npy" / f"{i:02d}.npy", rows)
        else:
            lengths = rng.integers(1_000, 2_001, SAMPLES)
            samples = [
                {"id": k, "tokens": rng.integers(0, 50_000, n, dtype=np.uint16)}
                for k, n in enumerate(lengths.tolist())
            ]
            write_mds(root / "data" / "raw", {"id": "int", "tokens": "ndarray:uint16"},
                      samples, per_shard=PER_SHARD)  # fmt: skip
        with files_s3(str(root / "data")) as endpoint:
            s: dict[str, list[float]] = {"A": [], "B": []}
            seen: dict[str, set[tuple[str, int]]] = {"A": set(), "B": set()}
            passed = [str(root / "cache"), "--endpoint", endpoint, "--format", args.format]
            for side, result in tree_runs(__file__, args, passed):
                s[side].append(float(result["s"]))  # type: ignore[arg-type]
                seen[side].add((str(result["digest"]), int(result["read"])))  # type: ignore[call-overload]
    ratios = [b / a for a, b in zip(s["A"], s["B"], strict=True)]
    what = {
        "npy": f"{NPY_FILES * NPY_ROWS:,} NPY rows in {NPY_FILES} files",
        "mds": f"{SAMPLES:,} samples in {SAMPLES // PER_SHARD} shards",
        "tokens": f"{TOKEN_STEPS:,} token batches (B=32, L=1024) of a 64 MiB file",
    }[args.format]
    print(f"{what}, warm cache, {args.rounds} rounds")
    for side in ("A", "B"):
        digests = {d[:12] for d, _ in seen[side]}
        read = {r for _, r in seen[side]}
        print(
            f"{side}: median {statistics.median(s[side]):.3f} s an epoch, "
            f"{sorted(read)} bytes from entries, digest {sorted(digests)}"
        )
    print(f"B/A paired: median {statistics.median(ratios):.3f}")
    same = len({d for d, _ in seen["A"] | seen["B"]}) == 1
    print(f"same batches on both sides: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
