"""The ``padded`` and ``table`` workloads: datasets, a naive baseline and headrace, measured.

``padded``: fixed-width token rows plus loss masks (``.npy``), read in
shuffled batches. The naive baseline is the usual map-style dataset: one
``np.memmap`` row per sample, shifted and masked per row in Python, then
stacked. headrace reads the same samples through :class:`PaddedRows` and the
:class:`Loader`. Both use the same plan, so their batch digests must match;
every measurement checks that they do.

``table``: a Parquet file of token lists; ``open_s`` is the time to open it
(metadata only, whatever its size) and ``rows`` the rate of padded rows
read through :class:`TableSource`.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.formats import PaddedRows, Table, TableSource, write_row_file
from headrace.formats._row_plan import sample_rows
from headrace.pipeline import Loader
from headrace.testing import update_digest

__all__ = [
    "headrace_padded_batches",
    "make_padded_dataset",
    "make_table_dataset",
    "measure_padded",
    "measure_table",
    "naive_padded_batches",
]

Batch = dict[str, NDArray[Any]]


def make_padded_dataset(
    root: str | os.PathLike[str], rows: int = 16_384, width: int = 1025, seed: int = 0
) -> tuple[Path, Path]:
    """Write right-padded ``tokens.npy`` (uint16) and ``mask.npy`` (uint8); no row is empty."""
    out = Path(root)
    out.mkdir(parents=True, exist_ok=True)
    tok_path, mask_path = out / "tokens.npy", out / "mask.npy"
    if tok_path.exists() and mask_path.exists():
        t, m = np.load(tok_path, mmap_mode="r"), np.load(mask_path, mmap_mode="r")
        if t.shape == m.shape == (rows, width):
            return tok_path, mask_path
    rng = np.random.default_rng(seed)
    tok = rng.integers(1, 50_000, (rows, width), dtype=np.uint16)
    lengths = rng.integers(width // 8, width + 1, rows)
    prompt = rng.integers(1, np.maximum(lengths // 2, 2))
    cols = np.arange(width)[None, :]
    tok[cols >= lengths[:, None]] = 0
    mask = ((cols >= prompt[:, None]) & (cols < lengths[:, None])).astype(np.uint8)
    write_row_file(tok_path, tok)
    write_row_file(mask_path, mask)
    return tok_path, mask_path


def naive_padded_batches(
    tokens: str | os.PathLike[str],
    mask: str | os.PathLike[str],
    *,
    context: int,
    batch_size: int,
    steps: int,
    seed: int = 0,
    ignore_index: int = -1,
) -> Iterator[Batch]:
    """The baseline: per-row memmap indexing, per-row shift and masking, then stacking."""
    tok_mm = np.load(tokens, mmap_mode="r")
    mask_mm = np.load(mask, mmap_mode="r")
    n = tok_mm.shape[0]
    for t in range(steps):
        samples = np.arange(t * batch_size, (t + 1) * batch_size, dtype=np.int64)
        xs, ys, ms = [], [], []
        for r in sample_rows(seed, samples, n, True).tolist():
            row = np.asarray(tok_mm[r, : context + 1], dtype=np.int32)
            m = np.asarray(mask_mm[r, 1 : context + 1]) != 0
            y = row[1:].copy()
            y[~m] = ignore_index
            xs.append(row[:-1])
            ys.append(y)
            ms.append(m)
        if not all(m.any() for m in ms):
            raise ValueError("the naive baseline expects no empty rows")
        yield {"x": np.stack(xs), "y": np.stack(ys), "loss_mask": np.stack(ms)}


def headrace_padded_batches(
    tokens: str | os.PathLike[str],
    mask: str | os.PathLike[str],
    *,
    context: int,
    batch_size: int,
    steps: int,
    seed: int = 0,
    strategy: str = "adaptive",
    prefetch: int = 0,
) -> Iterator[Batch]:
    """headrace: :class:`PaddedRows` through the :class:`Loader` (synchronous by default)."""
    src = PaddedRows(tokens, mask, context=context, reader=strategy)  # type: ignore[arg-type]
    with Loader(src, batch_size=batch_size, seed=seed, prefetch=prefetch, steps=steps) as ld:
        yield from ld


def _timed(batches: Callable[[], Iterator[Batch]]) -> float:
    t0 = time.perf_counter()
    for _ in batches():
        pass
    return time.perf_counter() - t0


def _digest(batches: Iterator[Batch]) -> str:
    h = hashlib.sha256()
    for b in batches:
        update_digest(h, b)
    return h.hexdigest()


def measure_padded(
    root: str | os.PathLike[str],
    *,
    rows: int = 16_384,
    width: int = 1025,
    batch_size: int = 32,
    steps: int = 512,
    trials: int = 3,
    seed: int = 0,
    strategy: str = "adaptive",
) -> dict[str, Any]:
    """A/B/A/B medians of naive vs headrace over ``steps`` batches; digests must match.

    Digests are computed in a separate pass, outside the timed runs.
    """
    tok, mask = make_padded_dataset(root, rows, width, seed)
    kw: dict[str, Any] = {"context": width - 1, "batch_size": batch_size, "steps": steps}
    variants: dict[str, Callable[[], Iterator[Batch]]] = {
        "naive": lambda: naive_padded_batches(tok, mask, seed=seed, **kw),
        "headrace": lambda: headrace_padded_batches(tok, mask, seed=seed, strategy=strategy, **kw),
    }
    digests = {k: _digest(v()) for k, v in variants.items()}  # also warms the page cache
    if len(set(digests.values())) != 1:
        raise AssertionError(f"padded variants disagree: {digests}")
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(trials):
        for k, v in variants.items():
            times[k].append(_timed(v))
    out: dict[str, Any] = {
        "rows": rows,
        "width": width,
        "batch_size": batch_size,
        "steps": steps,
        "trials": trials,
        "digest": digests["naive"],
    }
    for k, ts in times.items():
        med = statistics.median(ts)
        out[k] = {"median_s": med, "batches_per_s": steps / med, "trials_s": ts}
    out["speedup"] = out["naive"]["median_s"] / out["headrace"]["median_s"]
    return out


def make_table_dataset(
    root: str | os.PathLike[str],
    rows: int = 100_000,
    max_len: int = 512,
    seed: int = 0,
    *,
    fmt: str = "arrow",
) -> Path:
    """A table with a ``list<int32>`` column ``input_ids`` and an ``int64`` column ``label``.

    ``fmt="arrow"``: a ``save_to_disk``-layout directory (Arrow IPC stream
    plus ``state.json``), random access straight from the memory map;
    ``fmt="parquet"``: one Parquet file (random rows decode whole row groups).
    """
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(root)
    out.mkdir(parents=True, exist_ok=True)
    path = out / (f"table-{rows}.parquet" if fmt == "parquet" else f"table-{rows}")
    if path.exists():
        return path
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_len + 1, rows)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
    ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
    table = pa.table({"input_ids": ids, "label": pa.array(np.arange(rows, dtype=np.int64))})
    if fmt == "parquet":
        pq.write_table(table, path, row_group_size=8192)
        return path
    path.mkdir()
    name = "data-00000-of-00001.arrow"
    with pa.OSFile(str(path / name), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table, max_chunksize=8192)
    (path / "state.json").write_text(json.dumps({"_data_files": [{"filename": name}]}))
    return path


def measure_table(
    path: str | os.PathLike[str],
    *,
    width: int = 512,
    batch_size: int = 32,
    steps: int = 200,
    seed: int = 0,
) -> dict[str, Any]:
    """``open_s``: time to open the table; ``rows_per_s``: padded rows read via TableSource."""
    t0 = time.perf_counter()
    table = Table.open(path)
    open_s = time.perf_counter() - t0
    src = TableSource(table, width=width, truncate=True)
    h = hashlib.sha256()
    t0 = time.perf_counter()
    with Loader(src, batch_size=batch_size, seed=seed, prefetch=0, steps=steps) as ld:
        for b in ld:
            update_digest(h, b)
    read_s = time.perf_counter() - t0
    return {
        "rows": len(table),
        "open_s": open_s,
        "rows_per_s": steps * batch_size / read_s,
        "digest": h.hexdigest(),
    }
