"""A dictionary-encoded column (a pandas ``category``) against the same strings plain,
in an Arrow IPC file on S3: the bytes fetched and the time a batch.

Run: PYTHONPATH=src python benchmarks/table_dictionary_s3.py [--rows 200000] [--batches 300]
    [--trials 5] [--latency-ms 0]

Writes two Arrow IPC files under /tmp (the same labels: one of 1,000 strings of ~24
bytes a row, in record batches of --group rows, and an int64 id): ``plain``
(``string``) and ``dictionary`` (``dictionary<int16, string>``), and serves them
from moto on 127.0.0.1 (``LocalS3``; ``--latency-ms``: through a ``LatencyProxy``).
A fresh TableSource per trial reads the label column, B=32 rows a batch (width 32),
under the windowed shuffle; trials alternate sides (A B A B ...). Bytes are the
object store's (``Table.object_stats``), the walk at open included.

Prediction (written before measuring): a dictionary column is fetched as its int16
indices (2 bytes a row) and, once, its dictionary (~28 KB), where plain strings are
~28 bytes a row (values and offsets): 8-14x fewer bytes fetched for the batches;
the time a batch within 0.9-1.1x (on moto at 0 ms a GET costs about the same for 2
or 28 KB; the dictionary side decodes each record batch's labels, a copy).

Measured (5 trials, 2c, 2026-12-04, 200,000 rows in 1,000-row record batches, 300
batches, 0 ms): objects 7.05 / 2.07 MB (plain / dictionary); open fetched 8.43 /
1.97 MB (the header walk's 64 KiB GETs cover these ~10-36 KB messages whole); the
batches 2.47 / 0.74 MB (3.3x fewer); 1,601 / 1,835 us a batch (1.15x, spreads
1,567-2,457 and 1,481-2,420 overlap); sha256 22bc72547e57 on both sides. The bytes
missed the 8-14x: each record batch's GET runs from its header through the label
column's buffers, and the int64 ``i`` column's 8 KB lie between (gaps under 64 KiB
are fetched, one GET rather than two), so a batch is ~10.5 KB against ~36.5 KB.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
from _out import out

from headrace.emulate import LatencyProxy, LocalS3
from headrace.formats import TableSource

BUCKET = "bench-dictionary"


def write(path: Path, rows: int, group: int, coded: bool) -> Path:
    if path.exists():
        return path
    rng = np.random.default_rng(0)
    names = np.array([f"category-{i:05d}-{'x' * (i % 17)}" for i in range(1000)])
    labels = pa.array(names[rng.integers(0, len(names), rows)])
    if coded:
        labels = labels.dictionary_encode().cast(pa.dictionary(pa.int16(), pa.string()))
    table = pa.table({"i": np.arange(rows), "label": labels})
    with ipc.new_file(path, table.schema) as w:
        w.write_table(table, max_chunksize=group)
    return path


def trial(url: str, options: dict[str, str], batches: int) -> tuple[float, int, int, str]:
    """(us a batch, bytes fetched at open, by the batches, digest) of one fresh source."""
    src = TableSource(url, columns=["label"], width=32, shuffle="window", store_options=options)
    stats = src.table.object_stats
    assert stats is not None
    opened = stats.bytes
    h = hashlib.sha256()
    t0 = time.perf_counter()
    for b in range(batches):
        got = src.read(0, np.arange(b * 32, (b + 1) * 32, dtype=np.int64))
        h.update(got["label"].tobytes())
    took = time.perf_counter() - t0
    stats = src.table.object_stats
    assert stats is not None
    src.close()
    return took / batches * 1e6, opened, stats.bytes - opened, h.hexdigest()[:12]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--group", type=int, default=1000)
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--latency-ms", type=float, default=0.0)
    a = ap.parse_args()
    files = {
        side: write(Path(f"/tmp/headrace-dict-{a.rows}-{a.group}-{side}.arrow"), a.rows, a.group,
                    side == "dictionary")
        for side in ("plain", "dictionary")
    }  # fmt: skip
    with ExitStack() as stack:
        s3 = stack.enter_context(LocalS3())
        s3.create_bucket(BUCKET)
        client = s3.info.boto3_client()
        for path in files.values():
            client.put_object(Bucket=BUCKET, Key=path.name, Body=path.read_bytes())
        options = s3.info.store_options()
        if a.latency_ms:
            proxy = stack.enter_context(LatencyProxy(s3.endpoint, latency_ms=a.latency_ms))
            options = {**options, "endpoint": proxy.endpoint}
        out(f"{a.rows:,} rows in record batches of {a.group:,}; B=32, {a.batches} batches a "
            f"trial, windowed shuffle, {a.latency_ms:g} ms")  # fmt: skip
        out("| side | object MB | open MB | batches' MB | us a batch (min-max) | ratio | sha256 |")
        out("|---|---|---|---|---|---|---|")
        res: dict[str, list[tuple[float, int, int, str]]] = {s: [] for s in files}
        for t in range(a.trials):
            for side in list(files) if t % 2 == 0 else list(files)[::-1]:
                res[side].append(trial(f"s3://{BUCKET}/{files[side].name}", options, a.batches))
        base = statistics.median(r[0] for r in res["plain"])
        for side, rs in res.items():
            per = [r[0] for r in rs]
            med = statistics.median(per)
            out(
                f"| {side} | {files[side].stat().st_size / 1e6:.2f} | "
                f"{statistics.median(r[1] for r in rs) / 1e6:.2f} | "
                f"{statistics.median(r[2] for r in rs) / 1e6:.2f} | {med:,.0f} "
                f"({min(per):,.0f}-{max(per):,.0f}) | {med / base:.2f}x | "
                f"{','.join(sorted({r[3] for r in rs}))} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
