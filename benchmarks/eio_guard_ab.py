"""What the EIO guards cost on the fast path (page-cached local files): two source trees A/B/A/B.

    python benchmarks/eio_guard_ab.py --a /tmp/base/src --b src [--rounds 6 --reads 600]
    python benchmarks/eio_guard_ab.py --a /tmp/base/src --b src --latency-ms 2 --reads 48

The guards (docs/io.md#errors-and-lifetimes) only act on network and FUSE
mounts; on a local disk a mapped read pays a check of a cached flag. This
measures that claim against the tree before them: each round runs a short
child process per tree (A, B, then B, A next round, so neither always goes
first), each timing ``--reads`` batches of 32 random rows from a page-cached
local file through three readers: ``RangeReader("mmap").read_rows`` (a mapped
row read, where the network check sits), ``PaddedRows(reader="adaptive").read``,
and a local Arrow ``Table.read_rows`` (one list and one number column). Child
processes, one tree each, so the two trees' modules never mix; short ones, so
a machine shared with other jobs drifts less within a round. Reports the
median microseconds per batch per side and reader, B/A, and the SHA-256 of
every batch each side read (which must agree).

``--latency-ms N``: where the guards do act. Each child mounts the data folder
through slowfs (N ms per READ, a fresh mount: cold) and reads through it, no
warm-up; the Arrow figure includes opening the table (B walks its headers with
``MADV_POPULATE_READ`` first) and B keeps the map fill on.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from _trees_ab import tree_parser, tree_runs

ROWS, WIDTH, BATCH = 16_384, 1025, 32


def make_data(root: Path) -> None:
    import pyarrow as pa

    rng = np.random.default_rng(0)
    if not (root / "tokens.npy").exists():
        np.save(root / "tokens.npy", rng.integers(0, 50_000, (ROWS, WIDTH), dtype=np.int32))
    if not (root / "t.arrow").exists():
        lens = rng.integers(16, 1025, ROWS)
        offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        ids = pa.ListArray.from_arrays(
            pa.array(offs), pa.array(rng.integers(0, 50_000, int(offs[-1]), dtype=np.int32))
        )
        t = pa.table({"ids": ids, "label": pa.array(rng.integers(0, 9, ROWS))})
        with pa.OSFile(str(root / "t.arrow"), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
            w.write_table(t, max_chunksize=1024)


def child(root: Path, reads: int, latency_ms: float) -> dict[str, object]:
    """Runs in a child process with one tree on sys.path."""
    if latency_ms <= 0:
        return _child(root, reads, warm=50)
    from headrace.emulate import SlowMount

    with (
        tempfile.TemporaryDirectory() as tmp,
        SlowMount(root, Path(tmp) / "mnt", read_latency_ms=latency_ms) as m,
    ):
        return _child(m.mnt, reads, warm=0)


def _child(root: Path, reads: int, warm: int) -> dict[str, object]:
    from headrace.formats import PaddedRows, Table
    from headrace.io import RangeReader

    rng = np.random.default_rng(1)
    batches = [rng.integers(0, ROWS, BATCH) for _ in range(reads)]
    out: dict[str, object] = {}
    tokens = str(root / "tokens.npy")
    header = 128  # np.save's header for this shape

    def timed(name: str, fn, t0: float | None = None) -> None:  # type: ignore[no-untyped-def]
        h = hashlib.sha256()
        for b in batches[:warm]:  # page cache, views, the fill policy's calm
            fn(b)
        t0 = time.perf_counter() if t0 is None else t0
        got = [fn(b) for b in batches]
        dt = time.perf_counter() - t0
        for g in got:
            for v in g if isinstance(g, list) else [g]:
                h.update(np.ascontiguousarray(v).tobytes())
        out[name] = {"us_per_batch": dt / reads * 1e6, "sha256": h.hexdigest()[:16]}

    with RangeReader("mmap") as r:
        timed("mmap read_rows", lambda b: r.read_rows(tokens, b, WIDTH * 4, base=header))
    src = PaddedRows(tokens, context=WIDTH - 1, reader="adaptive", shuffle=False)
    timed("PaddedRows adaptive", lambda b: [src.read(0, b)["x"]])
    src.close()
    t_open = time.perf_counter()
    with Table.open(root / "t.arrow") as tb:

        def arrow(b: np.ndarray) -> list[np.ndarray]:
            got = tb.read_rows(b)
            return [got["ids"].values, got["ids"].offsets, got["label"]]

        timed("Arrow Table.read_rows", arrow, None if warm else t_open)
    return out


def main() -> None:
    ap = tree_parser(__doc__)
    ap.add_argument("--reads", type=int, default=600)
    ap.add_argument("--latency-ms", type=float, default=0.0, help="read through slowfs")
    ap.add_argument("--verbose", action="store_true", help="print every run")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child), args.reads, args.latency_ms)))
        return
    root = Path(args.root or tempfile.mkdtemp(prefix="eio-guard-ab-"))
    root.mkdir(parents=True, exist_ok=True)
    make_data(root)
    runs: dict[str, list[dict[str, dict[str, object]]]] = {"A": [], "B": []}
    child_args = [str(root), "--reads", str(args.reads), "--latency-ms", str(args.latency_ms)]
    for side, got in tree_runs(__file__, args, child_args):
        runs[side].append(got)
        if args.verbose:
            print(side, " ".join(f"{float(v['us_per_batch']):8.1f}" for v in got.values()))
    where = f"slowfs {args.latency_ms:g} ms" if args.latency_ms > 0 else "page-cached local"
    print(
        f"{args.rounds} rounds x {args.reads} batches of {BATCH} rows ({where}), "
        f"A={args.a} B={args.b}"
    )
    for name in runs["A"][0]:
        a = [float(r[name]["us_per_batch"]) for r in runs["A"]]  # type: ignore[arg-type]
        b = [float(r[name]["us_per_batch"]) for r in runs["B"]]  # type: ignore[arg-type]
        digests = {r[name]["sha256"] for r in runs["A"] + runs["B"]}
        ma, mb = statistics.median(a), statistics.median(b)
        print(
            f"{name:22s} A {ma:8.1f} us  B {mb:8.1f} us  B/A {mb / ma:.3f}  "
            f"(A {min(a):.1f}-{max(a):.1f}, B {min(b):.1f}-{max(b):.1f})  "
            f"sha256 {'/'.join(sorted(digests))}"
        )


if __name__ == "__main__":
    main()
