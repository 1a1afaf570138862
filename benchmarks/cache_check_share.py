"""What checking a warm ``cache_dir`` costs a process that reads a share of the rows.

    python benchmarks/cache_check_share.py --a /tmp/base/src --b src [--world 64]
                                           [--ranks 6] [--files 16]

Writes ``--files`` NPY files of 4,000 float32 rows of 4 KiB (16 MB each), serves them as S3
objects (``_files_s3``, no added latency), fills a cache of each tree's own with two
epochs (B=64, ``shuffle="samples"``: the second joins each object's blocks into its
whole entry), then runs one fresh process per rank, A then B then B then A..., for
``--ranks`` of ``--world`` ranks, each reading its host slice of one epoch (a
``world``-th of the rows) from the warm cache, with nothing of it checked yet (a new
process: a rank or a DataLoader worker starting its run). Reports each side's median
CPU seconds (user + system) and wall seconds a rank, the paired B/A ratios, and each
side's digests (which must agree rank by rank).

The figure in docs/files.md ("Once every block of an object is there...") compares a
tree whose joined entries are checked whole at a process's first read (A) with one
whose joins keep a table of block checksums (B).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _files_s3 import files_s3, store_options
from _trees_ab import tree_parser

ROWS, BATCH = 4_000, 64


def epoch(endpoint: str, cache: Path, files: int, seed: int, rank: int = 0, world: int = 1) -> str:
    from headrace.formats import FileSource
    from headrace.pipeline import Loader
    from headrace.testing import batch_digest

    kw = {"format": "npy", "samples_per_file": ROWS, "shuffle": "samples"}
    src = FileSource("s3://bench/npy", store_options=store_options(endpoint), cache_dir=cache, **kw)
    steps = files * ROWS // BATCH
    with Loader(src, batch_size=BATCH, seed=seed, steps=steps, rank=rank, world_size=world) as ld:
        return batch_digest(ld)


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = tree_parser(__doc__)
    ap.add_argument("--endpoint", default=None, help="(the child's: the server's)")
    ap.add_argument("--files", type=int, default=16, help="objects of 16 MB")
    ap.add_argument("--world", type=int, default=64)
    ap.add_argument("--ranks", type=int, default=6, help="ranks run a side (0, 1, ...)")
    ap.add_argument("--rank", type=int, default=-1, help="(the child's: -1 fills)")
    args = ap.parse_args()
    if args.child:
        cache = Path(args.child)
        if args.rank < 0:
            for seed in (1, 2):  # fills the blocks, then joins them
                epoch(args.endpoint, cache, args.files, seed)
            return
        c0, t0 = cpu(), time.perf_counter()
        digest = epoch(args.endpoint, cache, args.files, 3, args.rank, args.world)
        print(json.dumps({"cpu": cpu() - c0, "s": time.perf_counter() - t0, "digest": digest}))
        return
    rng = np.random.default_rng(1)
    with tempfile.TemporaryDirectory(prefix="headrace-check-share-") as tmp:
        root = Path(tmp)
        (root / "data" / "npy").mkdir(parents=True)
        for i in range(args.files):
            rows = rng.standard_normal((ROWS, 32, 32), dtype=np.float32)
            np.save(root / "data" / "npy" / f"{i:02d}.npy", rows)
        trees = {"A": os.path.abspath(args.a), "B": os.path.abspath(args.b)}
        with files_s3(str(root / "data")) as endpoint:

            def child(side: str, rank: int) -> dict[str, object]:
                cmd = [sys.executable, __file__, "--a", args.a, "--b", args.b,
                       "--child", str(root / f"cache-{side}"), "--endpoint", endpoint,
                       "--world", str(args.world), "--rank", str(rank),
                       "--files", str(args.files)]  # fmt: skip
                env = dict(os.environ, PYTHONPATH=trees[side])
                res = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if res.returncode != 0:
                    raise SystemExit(f"tree {side} failed:\n{res.stderr[-3000:]}")
                out = res.stdout.strip().splitlines()
                return json.loads(out[-1]) if out else {}

            for side in trees:
                child(side, -1)
            got: dict[str, list[dict[str, object]]] = {"A": [], "B": []}
            for rank in range(args.ranks):
                for side in ("A", "B") if rank % 2 == 0 else ("B", "A"):
                    got[side].append(child(side, rank))
    print(f"{args.files * ROWS:,} rows of 4 KiB in {args.files} objects of 16 MB, warm cache; "
          f"{args.ranks} of {args.world} ranks a side, a fresh process each")  # fmt: skip
    for side in ("A", "B"):
        cpus = [float(r["cpu"]) for r in got[side]]  # type: ignore[arg-type]
        walls = [float(r["s"]) for r in got[side]]  # type: ignore[arg-type]
        print(
            f"{side}: median {statistics.median(cpus):.3f} CPU s, "
            f"{statistics.median(walls):.3f} s a rank"
        )
    ratios = [
        float(b["cpu"]) / float(a["cpu"])  # type: ignore[arg-type]
        for a, b in zip(got["A"], got["B"], strict=True)
    ]
    print(f"B/A CPU paired: median {statistics.median(ratios):.3f}")
    same = all(a["digest"] == b["digest"] for a, b in zip(got["A"], got["B"], strict=True))
    print(f"same batches on both sides, rank by rank: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
