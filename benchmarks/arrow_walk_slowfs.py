"""Opening local Arrow streams on a slow mount: pyarrow's walk vs headrace's, and the
reopen a pickled table pays in a worker.

An Arrow IPC stream (a ``save_to_disk`` shard) has no footer: opening reads every
record batch header in turn, one page fault of the map each, a round trip each on
a network mount; a pickled ``Table`` reopened in a DataLoader worker walked again.
Sides (fresh slowfs mount per trial, A/B/C/A/B/C):

* ``pyarrow reader``: ``pa.ipc.open_stream`` over the map, ``list(reader)``; a
  worker walks again (how every release up to this one opened streams);
* ``walk``: headrace's header walk, no guesses; a worker reuses the index;
* ``walk + guesses``: the default: headers guessed ahead (``MADV_WILLNEED``).

Shapes: ``text``: one shard of 300 record batches of 1,000 rows of ~1 KB text
(lengths uniform in 200..1800 bytes: ~1 MiB batches, sizes varying by ~15 KB);
``text x8``: 8 such shards (a save_to_disk folder); ``tokens``: 64 record batches
of 1,000 rows of 2,048 int32 tokens (``fixed_size_list``, 8 MiB each);
``text, IPC file``: the text shard as an IPC file, whose footer says where the
batches are (pyarrow's ``get_batch`` faults their headers in one by one; now
they are asked for at once; the two walk sides are the same here); and
``text x8, page cache``: the same 8 shards read from the source folder, no
mount (what the walk costs in CPU where every page is in memory). Reports
median open seconds in this process, the seconds ``pickle.loads`` takes in a
fresh child process on the same mount (what each torch worker pays), READs and
MiB read by the parent's open. Every side digests the same 64 random rows
(parent and child) and the record batch sizes; all must agree.

    PYTHONPATH=src python benchmarks/arrow_walk_slowfs.py --latency-ms 20

Predictions (20 ms READs, 30 ms opens), written before measuring the change: a 300-batch
shard opens in ~6.1 s with pyarrow's reader (a header fault = a READ, 300 in a
row) and a child pays the same (FUSE drops the page cache at open); 8 shards side
by side ~6.1 s too; 64 token batches ~1.3 s. Carried index: a child pays an open,
a READ for the schema and the header pages at once: ~0.1-0.2 s (30x+). Guesses:
tokens (every batch the same size) ~0.1-0.2 s (8x); text, where a window of
2 sd sqrt(j) must stay under 128 KiB, only ~4 guesses ahead: ~1.5-2 s (3-4x).

Measured (3 rounds, medians; docs/formats.md has the table): pyarrow's reader
6.32 s / worker 6.35 s for one text shard, 6.39 / 6.36 s for 8, 1.42 / 1.43 s for
tokens, as predicted. Now: text 1.21 s (5.2x; better than predicted: windows
re-centred at every batch find headers the first guess missed) / worker 0.22 s
(29.1x); tokens 0.19 s (7.4x) / 0.13 s (10.9x); 8 text shards 1.67 s (3.8x) /
worker 0.95 s (6.7x, a miss: 2,400 header pages at 64 READs in flight, the
mount's max_background, cost 0.75 s at least); the IPC file 6.26 -> 0.24 s.
Page cache: open 0.039 vs 0.029 s, worker 0.061 vs 0.030 s (system calls that
find every page in memory).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from _slowfs_ab import alternate, fuse_missing, median, mount, one_digest, parser, table

import headrace.formats._arrow_local as local
from headrace.formats import Table

TEXT_BATCHES, TOKEN_BATCHES, ROWS, TOKENS = 300, 64, 1000, 2048
SIDES = {"pyarrow reader": (False, False), "walk": (True, False), "walk + guesses": (True, True)}

CHILD = """
import hashlib, pickle, sys, time
import pyarrow, pyarrow.ipc  # imported before the clock starts: a worker has them
import headrace.formats._arrow_local as local
import headrace.formats._tables
local.WALK, local.GUESS = sys.argv[1] == "1", sys.argv[2] == "1"
blob = sys.stdin.buffer.read()
t0 = time.perf_counter()
t = pickle.loads(blob)
took = time.perf_counter() - t0
sys.path.insert(0, sys.argv[3])
from arrow_walk_slowfs import digest
print(took, digest(t))
t.close()
"""


def text_shard(path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    pool = rng.integers(32, 127, 4 << 20, dtype=np.uint8)
    schema = pa.schema([("text", pa.string()), ("id", pa.int64())])
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, schema) as w:
        for b in range(TEXT_BATCHES):
            lens = rng.integers(200, 1800, ROWS)
            offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
            at = int(rng.integers(0, pool.size - int(offs[-1])))
            text = pa.StringArray.from_buffers(
                ROWS, pa.py_buffer(offs), pa.py_buffer(pool[at : at + int(offs[-1])])
            )
            ids = pa.array(np.arange(b * ROWS, (b + 1) * ROWS) + seed * 10**6)
            w.write_batch(pa.record_batch([text, ids], schema=schema))


def token_shard(path: Path) -> None:
    rng = np.random.default_rng(7)
    schema = pa.schema([("input_ids", pa.list_(pa.int32(), TOKENS))])
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, schema) as w:
        for _ in range(TOKEN_BATCHES):
            v = pa.array(rng.integers(0, 50_000, ROWS * TOKENS, dtype=np.int32))
            w.write_batch(
                pa.record_batch([pa.FixedSizeListArray.from_arrays(v, TOKENS)], schema=schema)
            )


def write(root: Path) -> dict[str, Path]:
    shapes = {"text": root / "text", "text x8": root / "text8", "tokens": root / "tokens"}
    for d in shapes.values():
        d.mkdir()
    text_shard(shapes["text"] / "data-00000-of-00001.arrow", 0)
    names = [f"data-{i:05d}-of-00008.arrow" for i in range(8)]
    for i, name in enumerate(names):
        text_shard(shapes["text x8"] / name, i)
    state = {"_data_files": [{"filename": n} for n in names]}
    (shapes["text x8"] / "state.json").write_text(json.dumps(state))
    token_shard(shapes["tokens"] / "data-00000-of-00001.arrow")
    # The text shard as an IPC *file*: its footer says where the batches are.
    shapes["text, IPC file"] = root / "ipcfile"
    shapes["text, IPC file"].mkdir()
    stream = pa.ipc.open_stream(pa.memory_map(str(shapes["text"] / "data-00000-of-00001.arrow")))
    with (
        pa.OSFile(str(shapes["text, IPC file"] / "data.arrow"), "wb") as f,
        pa.ipc.new_file(f, stream.schema) as w,
    ):
        for batch in stream:
            w.write_batch(batch)
    return shapes


def digest(t: Table) -> str:
    h = hashlib.sha256(np.asarray(t.group_rows).tobytes())
    rows = np.random.default_rng(1).integers(0, t.num_rows, 64)
    for name, col in sorted(t.read_rows(rows).items()):
        h.update(name.encode())
        for a in (col.values, col.offsets) if hasattr(col, "offsets") else (col,):
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


class _PageCache:
    """No mount: the files straight from the source folder, in the page cache."""

    def __init__(self, src: Path) -> None:
        self.mnt = src

    def __enter__(self) -> _PageCache:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def stats(self) -> dict[str, int]:
        return {"reads": 0, "bytes_read": 0, "max_in_flight": 0}


def trial(src: Path, mnt: Path, args: Any, side: tuple[bool, bool]) -> dict[str, Any]:
    local.WALK, local.GUESS = side
    with mount(src, mnt, args) if mnt != src else _PageCache(src) as m:
        t0 = time.perf_counter()
        t = Table.open(m.mnt)
        took = time.perf_counter() - t0
        st = m.stats()
        sha = digest(t)
        blob = pickle.dumps(t)
        env = dict(os.environ)
        src = str(Path(local.__file__).parents[2])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
        flags = [str(int(x)) for x in side]
        here = str(Path(__file__).parent)
        out = subprocess.run(
            [sys.executable, "-c", CHILD, *flags, here],
            input=blob,
            capture_output=True,
            env=env,
            check=True,
        )
        child_s, child_sha = out.stdout.decode().split()
        t.close()
    if child_sha != sha:
        raise SystemExit(f"FAIL: the child read other rows: {child_sha} vs {sha}")
    return {
        "open_s": took,
        "child_s": float(child_s),
        "reads": int(st["reads"]),
        "mib": st["bytes_read"] / 2**20,
        "mif": int(st["max_in_flight"]),
        "pickle_kib": len(blob) / 1024,
        "sha": sha,
    }


def main() -> int:
    args = parser(__doc__).parse_args()
    if fuse_missing():
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="arrow-walk-slowfs-") as tmp:
        shapes = write(Path(tmp))
        mnt = Path(tmp) / "mnt"
        mnt.mkdir()
        runs = [(shape, src, mnt) for shape, src in shapes.items()]
        # The CPU the walk costs where pages are in memory (local disk, page cache).
        runs.append(("text x8, page cache", shapes["text x8"], shapes["text x8"]))
        for shape, src, at in runs:
            res = alternate(SIDES, args.rounds, lambda s, r=src, m=at: trial(r, m, args, s))
            sha = one_digest(res)
            if sha is None:
                return 1
            base = median(res["pyarrow reader"], "open_s"), median(res["pyarrow reader"], "child_s")
            for side, rs in res.items():
                o, c = median(rs, "open_s"), median(rs, "child_s")
                rows.append(
                    [
                        shape,
                        side,
                        f"{o:.3f} ({base[0] / o:.1f}x)",
                        f"{c:.3f} ({base[1] / c:.1f}x)",
                        f"{median(rs, 'reads'):.0f}",
                        f"{median(rs, 'mib'):.1f}",
                        max(r["mif"] for r in rs),
                        f"{median(rs, 'pickle_kib'):.0f}",
                        sha[:12],
                    ]
                )
    table(
        [
            "shape",
            "side",
            "open s",
            "worker reopen s",
            "READs",
            "MiB read",
            "max in flight",
            "pickle KiB",
            "digest",
        ],
        rows,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
