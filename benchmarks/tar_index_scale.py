"""What tar shards' indexes cost at scale: held by a source, and sent to each worker.

    PYTHONPATH=src python benchmarks/tar_index_scale.py [--shards 1000] [--members 1000]
        [--src TREE ...] [--rounds N]

Each trial is a fresh process per ``--src`` tree (sides alternating round by round). A
shard of ``--members`` members is written as ``webdataset.TarWriter`` writes one
(Python's ``tarfile``, PAX): samples of two fields (``bin``, ``cls``) keyed as
ImageNet's (``n01440764_10026``: 13 to 15 bytes). Its headers are walked 10 times
(``walk_us``: the walk's cost a member), and its index copied (as pickled) into
``--shards`` shards' places of one :class:`~headrace.formats._tar_ranges.TarIndexes`
(the source's, bounded by ``INDEX_BYTES``; ``kept`` says how many fit). Reported:

- ``held_mb``: what the kept indexes hold (``tracemalloc``, which counts NumPy's
  buffers), and ``per_member_b``;
- ``kept``: the shards' indexes kept (of ``--shards``);
- ``pickle_mb``, ``pickle_s``, ``unpickle_s``: what a worker copy of the source is sent
  for them (``TarIndexes.held()``, pickled as ``multiprocessing`` does), and its time;
- ``sha256``: of every kept index's keys, fields and spans, and of the batches of a
  ``FileSource`` over 8 such shards on disk (``shuffle="samples"``): both sides agree.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import io
import json
import pickle
import sys
import tarfile
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def shard(members: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for i in range(members // 2):
            key = f"n{1440764 + i % 7:08d}_{(i * 7919) % 13000 + 1}"
            for field, data in (("bin", bytes([i % 251]) * 3), ("cls", str(i % 1000).encode())):
                info = tarfile.TarInfo(f"{key}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def trial(shards: int, members: int) -> dict[str, Any]:
    import numpy as np

    from headrace.formats import FileSource
    from headrace.formats._tar import tar_index
    from headrace.formats._tar_ranges import INDEX_BYTES, TarIndexes

    data = shard(members)
    view = memoryview(data)
    t0 = time.perf_counter()
    for _ in range(10):
        one = tar_index(lambda a, n: view[a : a + n], len(data), "s.tar")
    walked = (time.perf_counter() - t0) / 10
    raw = pickle.dumps(one)
    gc.collect()
    tracemalloc.start()
    indexes = TarIndexes()
    for f in range(shards):
        indexes.keep(f, pickle.loads(raw))
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    kept = indexes.held()
    t0 = time.perf_counter()
    blob = pickle.dumps(kept)
    pickled = time.perf_counter() - t0
    t0 = time.perf_counter()
    pickle.loads(blob)
    unpickled = time.perf_counter() - t0
    h = hashlib.sha256()
    for f, index in kept:
        h.update(f"{f}:{len(index)}".encode())
        if f % 97 == 0:  # a sample of them whole (all are the same shard)
            for i in range(len(index)):
                h.update(f"{index.key(i)}{sorted(index.fields(i).items())}".encode())
    with tempfile.TemporaryDirectory() as d:
        for f in range(8):
            (Path(d) / f"s{f:05d}.tar").write_bytes(data)
        src = FileSource(d, format="tar", shuffle="samples", decode_threads=0)
        for step in range(4):
            batch = src.read(3, np.arange(step * 64, step * 64 + 64))
            for k in sorted(batch):
                for x in batch[k]:
                    h.update(np.ascontiguousarray(x).tobytes())
        src.close()
    return {
        "walk_us": round(walked / members * 1e6, 2),
        "held_mb": round(held / 2**20, 1),
        "per_member_b": round(held / (len(kept) * members), 1),
        "kept": len(kept),
        "bound_mb": INDEX_BYTES >> 20,
        "pickle_mb": round(len(blob) / 2**20, 1),
        "pickle_s": round(pickled, 4),
        "unpickle_s": round(unpickled, 4),
        "sha256": h.hexdigest()[:12],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, default=1000)
    ap.add_argument("--members", type=int, default=1000)
    ap.add_argument("--src", action="append", help="a source tree (repeat for an A/B)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        sys.path.insert(0, str(Path(a.child) / "src"))
        print(json.dumps(trial(a.shards, a.members)))
        return
    sys.path.insert(0, str(HERE))
    from _children import alternate
    from _out import out

    sides = a.src or [str(HERE.parent)]
    args = ["--shards", str(a.shards), "--members", str(a.members)]
    got = alternate(__file__, sides, a.rounds, args)
    import statistics

    for s in sides:
        med = {k: statistics.median(t[k] for t in got[s]) for k in got[s][0] if k != "sha256"}
        out(f"{s}: medians of {a.rounds}: {med}; sha256 {sorted({t['sha256'] for t in got[s]})}")


if __name__ == "__main__":
    main()
