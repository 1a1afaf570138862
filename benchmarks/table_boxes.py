"""Rows of as many items as each holds (boxes, frames), padded to a width, against what
a user would do.

Run: PYTHONPATH=src python benchmarks/table_boxes.py [--kind boxes|objects|frames|lists]
[--rows N]
[--width W] [--batches 200] [--trials 5]

Writes a ``datasets`` ``save_to_disk`` folder under /tmp laid out as a detection
dataset on the Hub: ``objects``, a ``Sequence`` of ``{"bbox": Sequence(float32,
length=4), "category": int64}`` (a struct of lists; the boxes
``list<fixed_size_list<float>[4]>``), 0 to 12 boxes a row (6 on average), and ``id``;
with ``--kind objects``, the same objects as ``datasets``' newer ``List({...})`` stores
them (a list of structs, ``list<struct<bbox: fixed_size_list<float>[4], category>>``);
with ``--kind frames``, ``frames`` as ``ds.map`` leaves a feature extractor's output of
varying length, ``Sequence(Sequence(float32))`` (lists of lists, read with
``shapes={"frames": (None, 128)}``), 50 to 299 frames of 128 a row (90 KB on average);
with ``--kind lists``, ``negs``, 0 to 7 token lists of 16 to 127 int32 ids a row
(``Sequence(Sequence(Value("int32")))``, read with ``shapes={"negs": (None, None)}``,
padded to ``(B, 8, 128)``).
Each side reads the same batches of B=32 random rows as ``(B, width, 4)`` float32 boxes
padded with -1, ``(B, width)`` int64 categories padded with -1, and a ``(B, width)``
mask:

- ``datasets``: ``ds[idx]["objects"]`` (Python lists, as a DETR-style ``collate_fn``
  gets them) padded row by row into preallocated arrays;
- ``pyarrow``: ``table.take(idx)`` of the mapped Arrow files (concatenated), the
  struct's fields flattened to NumPy and padded with one vectorised scatter each (a
  hand-rolled reader that knows the layout);
- ``headrace``: ``TableSource(..., columns=["objects.bbox", "objects.category"],
  width=...)``'s ``read``.

Trials alternate sides (a rotation a trial), each on a fresh reader reading the batches
twice (the first pass maps pages and, for headrace, checks each record batch's lists
once; the second finds both done); the page cache is warm. The digest is of every
batch's bytes, untimed.

Prediction (written before measuring): the bytes are few (32 rows x 6 boxes x 16 B = 3
KB), so each side's cost is its per-batch work. headrace: a gather of 32 rows' items
per column and one scatter into the padded arrays, ~0.2-0.3 ms a batch on the second
pass, more on the first (each record batch's lists checked once); ``datasets``: 32
rows turned into Python dicts of lists, then a loop: 5-10x headrace; ``pyarrow``:
``take`` of a struct of lists rebuilds offsets and copies, then the same scatter:
1-2x headrace. Digests equal.

Measured (5 trials, 2c, 2026-12-05, 20,000 rows, width 16, 200 batches): the prediction
missed. headrace 0.625 ms a batch on the first pass and 0.533 on the second, against
``datasets`` 0.481 and 0.475 (0.77x and 0.89x headrace's time: it is faster) and
pyarrow 0.367 and 0.335 (0.59x, 0.63x); sha256 252c8cc47779 on every side. With 3 KB a
batch, the time is per-record-batch Python: 32 random rows of 20 record batches of
1,000 touch ~16 of them, and headrace gathers each column span by span (null and
shape checks, offsets, the copy) where ``take`` works on the concatenated table in C++.
Its first version built index arrays for each span's rows (~14 us a span): 1.0 ms a
batch; copying a span's rows as slices when it has at most 16 (0.6 us a row) took it
to 0.51-0.53 (the token-list ``table`` workload of ``headrace bench``, whose rows are
longer, unchanged: 9,316 and 9,797 batches/s before, 8,897 and 9,630 after, A/B/A/B,
digest ca83a2ac93f7). Then a span's few rows' offsets were taken a row at a time
(~0.4 us a row against ~4 us a span of index arrays; predicted 0.43 ms, measured 0.47)
and the rows grouped by span with slices instead of ``np.split``: headrace 0.550 and
0.448 ms, ``datasets`` 0.486 and 0.485 (0.88x, 1.08x), pyarrow 0.372 and 0.355 (0.68x,
0.79x), the same digest (the ``table`` workload again unchanged within the noise: 10,333
and 9,453 before, 8,447 and 9,977 after; ``padded``, whose code did not change, 8,136 to
10,420).

``--kind objects`` (the same objects as a list of structs; no prediction written before
its first trial; 5 trials, 20,000 rows, width 16): headrace 0.551 and 0.442 ms,
``datasets`` 0.501 and 0.494 (0.91x, 1.12x), pyarrow 0.399 and 0.390 (0.72x, 0.88x);
sha256 252c8cc47779 on every side, the boxes layout's: the same batches from either.

``--kind lists`` prediction (written before its first trial): 32 rows of ~3.5 lists of
~72 ids (32 KB a batch): headrace ~0.5 ms a batch (a row's lists copied in one piece,
one vectorised scatter into (32, 8, 128), the per-record-batch work as for boxes);
``datasets`` ~1.5 ms (8,000 ids made Python ints, then a list at a time: 3x);
pyarrow ~0.35 ms (``take`` and the same scatter by hand: 0.7x). Measured (5 trials,
20,000 rows, widths (8, 128), 2c, 2026-12-05): headrace 0.800 and 0.646 ms; ``datasets``
0.712 and 0.716 (0.89x, 1.11x); pyarrow 2.048 and 1.783 (2.6x, 2.8x slower); sha256
f108519a9e4d on every side. All three missed: headrace's per-record-batch work again
(0.65, not 0.5; a first version, a row's offsets read one by one with NumPy scalars,
took ~2 ms); ``datasets``' Python ints cost less than thought (0.72, not 1.5); and
pyarrow's ``take`` of lists of lists, then flattened twice, is the slowest (1.8, not
0.35), as for frames. Again once the gather's bounds checks were found to repeat what
pyarrow's validation and the rise check of each record batch's offsets already do, and
were dropped: headrace 0.644 and 0.540, ``datasets`` 0.886 and 0.750 (1.38x, 1.39x),
pyarrow 2.423 and 2.359; the same digest.

``--kind frames`` (no prediction written before its first trial; 5 trials, 2,000 rows,
width 300, 2.9 MB of frames a batch): headrace 1.865 and 1.447 ms; ``datasets`` 40.4
and 39.5 (21.6x and 27.3x); pyarrow 21.6 and 21.5 (11.6x and 14.9x); sha256
b03342f15f06 on every side. There the bytes dominate: headrace copies each row's frames
in one piece from the mapped file; ``datasets`` builds an array a row through Python
objects, and ``take`` copies each of the batch's ~5,600 inner lists apart.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
from _out import out
from _timed import compare_sides, two_passes

Read = Any  # idx -> (items (B, W, *shape), [categories (B, W),] mask (B, W))
FRAME = 128  # numbers a frame


def write(path: Path, rows: int, kind: str) -> Path:
    import datasets
    import pyarrow as pa

    if path.exists():
        return path
    rng = np.random.default_rng(0)
    counts = {"frames": (50, 300), "lists": (0, 8)}.get(kind, (0, 13))
    counts = rng.integers(*counts, rows)
    offsets = np.zeros(rows + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    n = int(offsets[-1])
    if kind == "lists":
        sizes = rng.integers(16, 128, n)
        ends = np.zeros(n + 1, np.int32)
        np.cumsum(sizes, out=ends[1:])
        ids = rng.integers(0, 32_000, int(ends[-1]), dtype=np.int32)
        negs = pa.ListArray.from_arrays(offsets, pa.ListArray.from_arrays(ends, ids))
        datasets.Dataset(pa.table({"negs": negs, "id": np.arange(rows)})).save_to_disk(
            str(path), num_shards=4
        )
        return path
    if kind == "frames":
        inner = pa.ListArray.from_arrays(
            np.arange(n + 1, dtype=np.int32) * FRAME, rng.random(n * FRAME, dtype=np.float32)
        )
        frames = pa.ListArray.from_arrays(offsets, inner)
        datasets.Dataset(pa.table({"frames": frames, "id": np.arange(rows)})).save_to_disk(
            str(path), num_shards=4
        )
        return path
    boxes = pa.FixedSizeListArray.from_arrays(rng.random(n * 4, dtype=np.float32), 4)
    if kind == "objects":
        items = pa.StructArray.from_arrays(
            [boxes, pa.array(rng.integers(0, 80, n))], names=["bbox", "category"]
        )
        table = pa.table({"objects": pa.ListArray.from_arrays(offsets, items), "id": range(rows)})
        datasets.Dataset(table).save_to_disk(str(path), num_shards=4)
        return path
    objects = pa.StructArray.from_arrays(
        [
            pa.ListArray.from_arrays(offsets, boxes),
            pa.ListArray.from_arrays(offsets, rng.integers(0, 80, n)),
        ],
        names=["bbox", "category"],
    )
    features = datasets.Features(
        {
            "objects": datasets.Sequence(
                {
                    "bbox": datasets.Sequence(datasets.Value("float32"), length=4),
                    "category": datasets.Value("int64"),
                }
            ),
            "id": datasets.Value("int64"),
        }
    )
    table = pa.table({"objects": objects, "id": np.arange(rows)}).cast(features.arrow_schema)
    datasets.Dataset(table, info=datasets.DatasetInfo(features=features)).save_to_disk(
        str(path), num_shards=4
    )
    return path


def _datasets(path: Path, width: int, kind: str) -> Read:
    import datasets

    ds = datasets.load_from_disk(str(path))
    if kind == "frames":
        ds = ds.with_format("numpy")  # a row's frames as one (T, 128) array

    def read(idx: Any) -> Any:
        b = len(idx)
        mask = np.zeros((b, width), bool)
        if kind == "lists":
            negs = np.zeros((b, width, 128), np.int32)
            lmask = np.zeros((b, width, 128), bool)
            for i, row in enumerate(ds[idx]["negs"]):
                for j, ids in enumerate(row):
                    negs[i, j, : len(ids)] = ids
                    lmask[i, j, : len(ids)] = True
            return negs, lmask
        if kind == "frames":
            frames = np.zeros((b, width, FRAME), np.float32)
            for i, f in enumerate(ds[idx]["frames"]):
                frames[i, : len(f)] = f
                mask[i, : len(f)] = True
            return frames, mask
        boxes = np.full((b, width, 4), -1, np.float32)
        cats = np.full((b, width), -1, np.int64)
        for i, o in enumerate(ds[idx]["objects"]):
            if kind == "objects":  # a list of {"bbox": ..., "category": ...}
                o = {"bbox": [x["bbox"] for x in o], "category": [x["category"] for x in o]}
            k = len(o["bbox"])
            if k:
                boxes[i, :k] = o["bbox"]
                cats[i, :k] = o["category"]
                mask[i, :k] = True
        return boxes, cats, mask

    return read


def _pyarrow(path: Path, width: int, kind: str) -> Read:
    import pyarrow as pa

    shards = sorted(path.glob("*.arrow"))
    table = pa.concat_tables(pa.ipc.open_stream(pa.memory_map(str(s))).read_all() for s in shards)

    def read(idx: Any) -> Any:
        if kind == "lists":  # the lists' rows and places, then one scatter
            col = table.column("negs").take(idx).combine_chunks()
            counts = np.diff(col.offsets.to_numpy())
            lists = col.flatten()
            sizes = np.diff(lists.offsets.to_numpy())
            row = np.repeat(np.arange(len(idx)), counts)
            place = np.arange(sizes.size) - np.repeat(np.cumsum(counts) - counts, counts)
            lmask = np.zeros((len(idx), width, 128), bool)
            lmask[row, place] = np.arange(128) < sizes[:, None]
            negs = np.zeros((len(idx), width, 128), np.int32)
            negs[lmask] = lists.flatten().to_numpy()
            return negs, lmask
        col = table.column("frames" if kind == "frames" else "objects").take(idx).combine_chunks()
        if kind == "objects":  # each row's structs, their fields as lists of the same offsets
            structs = col.flatten()
            col = pa.StructArray.from_arrays(
                [
                    pa.ListArray.from_arrays(col.offsets, structs.field(f))
                    for f in ("bbox", "category")
                ],
                names=["bbox", "category"],
            )
        items = col if kind == "frames" else col.field("bbox")
        offsets = items.offsets.to_numpy().astype(np.int64)
        mask = np.arange(width) < np.diff(offsets)[:, None]
        shape = (FRAME,) if kind == "frames" else (4,)
        out = np.full((len(idx), width, *shape), 0 if kind == "frames" else -1, np.float32)
        out[mask] = items.values.flatten().to_numpy().reshape(-1, *shape)
        if kind == "frames":
            return out, mask
        cats = np.full((len(idx), width), -1, np.int64)
        cats[mask] = col.field("category").flatten().to_numpy()
        return out, cats, mask

    return read


def _headrace(path: Path, width: int, kind: str) -> Read:
    from headrace.formats import TableSource

    if kind == "lists":
        src = TableSource(
            path,
            columns=["negs"],
            shapes={"negs": (None, None)},
            widths={"negs": (width, 128)},
            shuffle=False,
        )
        return lambda idx: (lambda g: (g["negs"], g["negs_mask"]))(src.read(0, idx))
    if kind == "frames":
        src = TableSource(
            path, columns=["frames"], shapes={"frames": (None, FRAME)}, width=width, shuffle=False
        )
        return lambda idx: (lambda g: (g["frames"], g["frames_mask"]))(src.read(0, idx))
    src = TableSource(
        path,
        columns=["objects.bbox", "objects.category"],
        width=width,
        pad_values={"objects.bbox": -1.0, "objects.category": -1},
        shuffle=False,
    )

    def read(idx: Any) -> Any:
        got = src.read(0, idx)
        return got["objects.bbox"], got["objects.category"], got["objects.bbox_mask"]

    return read


SIDES = {"datasets": _datasets, "pyarrow": _pyarrow, "headrace": _headrace}


def trial(
    side: str, path: Path, width: int, kind: str, batches: list[Any]
) -> tuple[float, float, str]:
    """(ms a batch of the first pass, of the second, digest) of one fresh reader."""

    def check(idx: Any, got: Any) -> None:
        assert got[0].shape[:2] == (len(idx), width), (side, got[0].shape)

    return two_passes(SIDES[side](path, width, kind), batches, check)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kind", choices=["boxes", "objects", "frames", "lists"], default="boxes")
    ap.add_argument("--rows", type=int, help="default: 20,000 boxes, 2,000 frames")
    ap.add_argument("--width", type=int, help="default: 16 boxes, 300 frames")
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--trials", type=int, default=5)
    a = ap.parse_args()
    rows = a.rows or (2_000 if a.kind == "frames" else 20_000)
    width = a.width or {"frames": 300, "lists": 8}.get(a.kind, 16)
    path = write(Path(f"/tmp/headrace-{a.kind}-{rows}"), rows, a.kind)
    for f in path.glob("*.arrow"):
        f.read_bytes()  # the page cache warm for every side
    rng = np.random.default_rng(1)
    batches = [rng.choice(rows, 32, replace=False) for _ in range(a.batches)]
    out(
        f"{rows:,} rows of {a.kind} (save_to_disk, 4 shards), B=32, width {width}, "
        f"{a.batches} batches a trial"
    )
    compare_sides(list(SIDES), a.trials, lambda side: trial(side, path, width, a.kind, batches))  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
