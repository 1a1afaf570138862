"""Opening 8 Arrow streams at once on a slow mount, with and without the random advice.

Run: PYTHONPATH=src python benchmarks/arrow_readahead_slowfs.py --latency-ms 5
The ``text x8`` shape of ``arrow_walk_slowfs.py`` (8 shards of 300 record batches
of ~1 MiB, walked side by side with header guesses, the default), a fresh slowfs
mount per trial, alternating A (``ADVISE`` and ``TOUCHED_ONLY`` off: pyarrow's
whole-map read and the kernel's read-around, guesses unbounded), B (the map advised
random, guesses unbounded) and C (the default: guesses within ``GUESS_BUDGET``) over
``--rounds`` rounds: open seconds, READs and MiB the mount served, digests.
Prediction (written before measuring): the same MiB for A and B (the guesses read
the shards nearly whole on this shape either way), B's open within 1.3x of A's.
C (2026-12-03, after: one shard read 3.4 MiB, its headers 1.2): ~25-30 MiB for the
8 shards (headers ~10, guesses at most twice that), open ~1.5-2x B's. Measured
(5 ms, 3 rounds, 2c, 2026-12-03): C 29.3 MiB against B's 325.0, open 1.6x B's.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from _out import out
from _slowfs_ab import fuse_missing, parser
from arrow_walk_slowfs import trial, write

import headrace.formats._arrow_local as local
import headrace.io._buffers as buffers


def main() -> int:
    args = parser(__doc__).parse_args()
    if fuse_missing():
        return 0
    got: dict[str, list[dict[str, object]]] = {"A": [], "B": [], "C": []}
    budget = local.GUESS_BUDGET
    with tempfile.TemporaryDirectory(prefix="arrow-readahead-slowfs-") as tmp:
        src = write(Path(tmp))["text x8"]
        mnt = Path(tmp) / "mnt"
        mnt.mkdir()
        for r in range(args.rounds):
            for side in "ABC":
                buffers.ADVISE = local.TOUCHED_ONLY = side != "A"
                local.GUESS_BUDGET = budget if side == "C" else 1 << 40
                res = trial(src, mnt, args, (True, True))
                got[side].append(res)
                out(r, side, f"{res['open_s']:.3f} s", res["reads"], f"{res['mib']:.1f} MiB")
    buffers.ADVISE = local.TOUCHED_ONLY = True
    local.GUESS_BUDGET = budget
    shas = {str(r["sha"]) for rs in got.values() for r in rs}
    if len(shas) != 1:
        out("FAIL: digests differ", shas)
        return 1
    for side, rs in got.items():
        med = {k: statistics.median(float(r[k]) for r in rs) for k in ("open_s", "reads", "mib")}  # type: ignore[arg-type]
        out(side, f"open {med['open_s']:.3f} s, {med['reads']:.0f} READs, {med['mib']:.1f} MiB")
    out("digest:", shas.pop()[:12])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
