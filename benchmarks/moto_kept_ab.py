"""Small reads from the local S3 emulator (moto) of two source trees: A/B/A/B.

    python benchmarks/moto_kept_ab.py --a /tmp/base/src --b src [--rounds 4 --reads 15]

Each child process starts ``LocalS3`` from its own tree (its ``_moto_server`` patches
are the tree's), puts one Parquet object of 20,000 rows of int32 lists (row groups of
2,000) and ``--reads`` times opens it as a ``Table`` and reads 3 rows of 3 row groups:
the open is a connection's first requests, the rows are ranged GETs on connections kept
from it. Reports each side's medians of the open and of the read (ms), the paired B/A
ratios and the SHA-256 of every row each side read (which must agree).

Prediction (2026-12-06, before measuring; A before moto's kept connections sent without
Nagle's delay, B after): a small answer on a kept connection waited ~40 ms for the
client's delayed ACK, so the read of 3 row groups (a few ranged GETs, partly at once)
~50 ms -> ~10 ms; the open (a HEAD and the footer's GETs) likewise ~10x.

Measured (4 rounds, 2c, 2026-12-06; A 357a600a, B 4393ccf5): read 51.2 -> 13.3 ms
(paired B/A 0.259, ~3.9x; predicted ~5x), open 20.3 -> 18.8 ms (paired 0.887: not the
predicted 10x, the open's GETs go out on new connections, whose first answers are not
held), SHA-256 88541a83646be48a on both sides.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import tempfile
import time
from pathlib import Path

from _trees_ab import paired_report, tree_parser

ROWS, GROUP = 20_000, 2_000


def child(root: Path, reads: int) -> dict[str, object]:
    """Runs in a child process with one tree on sys.path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from headrace.emulate import LocalS3
    from headrace.formats import Table
    from headrace.io import ObjectStore

    path = root / "t.parquet"
    rows = pa.array([list(range(i % 50)) for i in range(ROWS)], pa.list_(pa.int32()))
    pq.write_table(pa.table({"x": rows}), path, row_group_size=GROUP)
    with LocalS3() as server:
        server.create_bucket("kept-ab")
        options = server.info.store_options()
        with ObjectStore("s3://kept-ab", **options) as store:
            store.put_file("t.parquet", path)
        opens, gets, digest = [], [], hashlib.sha256()
        for i in range(reads):
            t0 = time.perf_counter()
            with Table.open("s3://kept-ab/t.parquet", store_options=options) as table:
                t1 = time.perf_counter()
                out = table.read_rows([i, ROWS // 4 + i, ROWS - 1 - i], ["x"])
                t2 = time.perf_counter()
            opens.append(t1 - t0)
            gets.append(t2 - t1)
            for key in sorted(out):
                digest.update(repr(out[key]).encode())
    return {
        "open_ms": 1e3 * statistics.median(opens),
        "read_ms": 1e3 * statistics.median(gets),
        "sha256": digest.hexdigest()[:16],
    }


def main() -> None:
    ap = tree_parser(__doc__)
    ap.set_defaults(rounds=4)
    ap.add_argument("--reads", type=int, default=15)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child), args.reads)))
        return
    root = Path(args.root or tempfile.mkdtemp(prefix="moto-kept-ab-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"{args.rounds} rounds of {args.reads} opens and reads")
    paired_report(__file__, args, [str(root), "--reads", str(args.reads)], ["open_ms", "read_ms"])


if __name__ == "__main__":
    main()
