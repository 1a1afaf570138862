"""What a local folder's listing costs a FileSource: two source trees A/B/A/B.

    python benchmarks/listing_ab.py --a /tmp/base/src --b src [--rounds 40 --opens 5]
    python benchmarks/listing_ab.py --a /tmp/base/src --b src --root MNT --settle-s 1.5
        # MNT: a slowfs mount of the data (headrace emulate slowfs --stat-latency-ms 1)

The figure in docs/files.md ("Hidden files are left out": 20,000 files in 20
folders, page cache warm, 84.4 vs 82.0 ms) compares the tree before a change
to the listing (A) with the tree after it (B). Each round runs a short child
process per tree (A, B, then B, A next round, so neither always goes first),
each opening ``FileSource(root, format="npy", samples_per_file=1)`` ``--opens``
times after one untimed open (the page cache and the interpreter warm), which
lists the folder and reads no file. Reports each side's median milliseconds per
open, the median of the rounds' paired B/A ratios, and the SHA-256 of the keys
each side listed (which must agree: the same files, in the same order).
"""

from __future__ import annotations

import hashlib
import json
import statistics
import tempfile
import time
from pathlib import Path

from _trees_ab import tree_parser, tree_runs

FOLDERS, PER_FOLDER = 20, 1_000
BODY = b"\x93NUMPY"  # never read: a listing looks at names and stat() only


def make_data(root: Path, folders: int, per_folder: int) -> None:
    for d in range(folders):
        sub = root / f"d{d:02d}"
        sub.mkdir(parents=True, exist_ok=True)
        for i in range(per_folder):
            p = sub / f"{i:05d}.npy"
            if not p.exists():
                p.write_bytes(BODY)


def child(root: Path, opens: int, settle_s: float = 0.0) -> dict[str, object]:
    """Runs in a child process with one tree on sys.path. ``settle_s``: a wait before each
    timed open, so that a FUSE or network mount's name and attribute cache (1 s on
    FUSE) has let go, and each open stats every file anew."""
    from headrace.formats import FileSource

    def open_once() -> list[str]:
        src = FileSource(root, format="npy", samples_per_file=1)
        keys = list(src.files.keys)
        src.close()
        return keys

    keys = open_once()
    times = []
    for _ in range(opens):
        time.sleep(settle_s)
        t0 = time.perf_counter()
        open_once()
        times.append(time.perf_counter() - t0)
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]
    return {"ms": 1e3 * statistics.median(times), "files": len(keys), "keys_sha256": digest}


def main() -> None:
    ap = tree_parser(__doc__)
    ap.add_argument("--opens", type=int, default=5)
    ap.add_argument("--folders", type=int, default=FOLDERS)
    ap.add_argument("--per-folder", type=int, default=PER_FOLDER)
    ap.add_argument(
        "--settle-s",
        type=float,
        default=0.0,
        help="wait before each timed open (1.5 on a FUSE mount: its caches let go)",
    )
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child), args.opens, args.settle_s)))
        return
    root = Path(args.root or tempfile.mkdtemp(prefix="listing-ab-"))
    make_data(root, args.folders, args.per_folder)
    ms: dict[str, list[float]] = {"A": [], "B": []}
    digests: dict[str, set[str]] = {"A": set(), "B": set()}
    files = set()
    passed = [str(root), "--opens", str(args.opens), "--settle-s", str(args.settle_s)]
    for side, result in tree_runs(__file__, args, passed):
        ms[side].append(float(result["ms"]))  # type: ignore[arg-type]
        digests[side].add(str(result["keys_sha256"]))
        files.add(result["files"])
    ratios = [b / a for a, b in zip(ms["A"], ms["B"], strict=True)]
    n = args.folders * args.per_folder
    print(f"{n:,} files in {args.folders} folders, {args.rounds} rounds")
    for side in ("A", "B"):
        print(f"{side}: median {statistics.median(ms[side]):.1f} ms an open, keys {digests[side]}")
    print(f"B/A paired: median {statistics.median(ratios):.3f}")
    same = len(digests["A"] | digests["B"]) == 1 and len(files) == 1
    print(f"same keys on both sides: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
