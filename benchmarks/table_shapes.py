"""Lists of lists read with ``shapes=`` against what a user would do without it.

Run: PYTHONPATH=src python benchmarks/table_shapes.py [--rows 2048] [--shape 80,300]
[--batches 60] [--trials 5]

Writes a ``datasets`` ``save_to_disk`` folder under /tmp: ``input_features`` as
``ds.map`` leaves a feature extractor's output, ``Sequence(Sequence(float32))`` (lists
of lists, no shape in the schema), and ``label``. Each side reads the same batches of
B=32 random rows (the same indices) as ``(B, *shape)`` float32:

- ``datasets``: ``ds.with_format("numpy")[idx]["input_features"]``, the dataset's own
  NumPy formatting;
- ``pyarrow``: ``table.take(idx)`` of the mapped Arrow file, the column flattened
  twice and reshaped (a hand-rolled reader);
- ``headrace``: ``TableSource(..., shapes=...)``'s ``read``.

Trials alternate sides (a rotation a trial), each on a fresh reader; the page cache
is warm (the folder is read once first). The digest is of every batch's bytes.

Prediction (written before measuring): headrace copies each row once, straight from the
mapped file into the batch (32 x 96 KB = 3 MB a batch: ~1 ms), after checking the
lengths of each record batch read once; ``pyarrow``'s take copies the rows, then
flatten and reshape are views: ~1-1.5x headrace's time; ``datasets`` turns the
nested lists into NumPy through Python objects (an array a row and a list a row of
lists), then stacks them: 5-10x headrace's time. Digests equal.

Measured (5 trials, 2c, 2026-12-04, 2,048 rows of (80, 300), 60 batches): headrace
1.02 ms a batch on the first pass (0.84-1.09) and 0.47 on the second; datasets 17.8
and 17.9 ms (17x and 38x); pyarrow 23.8 and 23.4 ms (23x and 49x); sha256
3341f9303ee3 on every side. headrace met its prediction (~1 ms, the page faults of a
first touch included). The others missed: ``datasets`` is 17x, not 5-10x; and the
hand-rolled take is slower still, not 1-1.5x: pyarrow's ``take`` of a list of lists
builds both levels' offsets and copies each of the batch's 2,560 inner lists apart
(23 ms for 3 MB), where headrace checks a record batch's lengths once and copies a
row's 96 KB in one piece. (A first version hashed each batch inside the timed loop:
SHA-256 of 3 MB took ~4 ms, hiding the difference; the digest is untimed now.)
Again after rows were checked one by one (a misshapen row refused alone, its lists
found by offsets; 2026-12-05, 00:35): headrace 1.15 and 0.49 ms, datasets 18.6 and
18.0, pyarrow 24.3 and 24.1; the same digest.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
from _out import out
from _timed import compare_sides, two_passes


def write(path: Path, rows: int, shape: tuple[int, int]) -> Path:
    import datasets
    import pyarrow as pa

    if path.exists():
        return path
    values = np.random.default_rng(0).random(rows * shape[0] * shape[1], dtype=np.float32)
    inner = pa.ListArray.from_arrays(
        np.arange(rows * shape[0] + 1, dtype=np.int32) * shape[1], values
    )
    outer = pa.ListArray.from_arrays(np.arange(rows + 1, dtype=np.int32) * shape[0], inner)
    ds = datasets.Dataset(pa.table({"input_features": outer, "label": np.arange(rows)}))
    ds.save_to_disk(str(path))
    return path


def _datasets(path: Path, _shape: tuple[int, int]) -> Any:
    import datasets

    ds = datasets.load_from_disk(str(path)).with_format("numpy")
    return lambda idx: np.asarray(ds[idx]["input_features"], dtype=np.float32)


def _pyarrow(path: Path, shape: tuple[int, int]) -> Any:
    import pyarrow as pa

    shard = next(path.glob("*.arrow"))
    table = pa.ipc.open_stream(pa.memory_map(str(shard))).read_all()

    def read(idx: Any) -> Any:
        col = table.column("input_features").take(idx).combine_chunks()
        flat = col.flatten().flatten().to_numpy()
        return flat.reshape(len(idx), *shape)

    return read


def _headrace(path: Path, shape: tuple[int, int]) -> Any:
    from headrace.formats import TableSource

    src = TableSource(
        path, columns=["input_features"], shapes={"input_features": shape}, shuffle=False
    )
    return lambda idx: src.read(0, idx)["input_features"]


SIDES = {"datasets": _datasets, "pyarrow": _pyarrow, "headrace": _headrace}


def trial(
    side: str, path: Path, shape: tuple[int, int], batches: list[Any]
) -> tuple[float, float, str]:
    """(ms a batch of the first pass, of the second, digest) of one fresh reader reading
    ``batches`` twice (the digest untimed: SHA-256 of 3 MB is ~2 ms)."""

    def check(idx: Any, got: Any) -> None:
        assert got.shape == (len(idx), *shape) and got.dtype == np.float32, (side, got.shape)

    return two_passes(SIDES[side](path, shape), batches, check)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--shape", default="80,300")
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--trials", type=int, default=5)
    a = ap.parse_args()
    shape = tuple(int(d) for d in a.shape.split(","))
    assert len(shape) == 2
    path = write(Path(f"/tmp/headrace-shapes-{a.rows}-{shape[0]}x{shape[1]}"), a.rows, shape)  # type: ignore[arg-type]
    for f in path.glob("*.arrow"):
        f.read_bytes()  # the page cache warm for every side
    rng = np.random.default_rng(1)
    batches = [np.sort(rng.choice(a.rows, 32, replace=False)) for _ in range(a.batches)]
    out(f"{a.rows:,} rows of {shape} float32 (save_to_disk), B=32, {a.batches} batches a trial")
    compare_sides(list(SIDES), a.trials, lambda side: trial(side, path, shape, batches))  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
