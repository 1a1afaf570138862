"""Shared builders for the resume/determinism audit: small real files of every kind.

Every sample carries its identity, so coverage can be checked:
tokens are their own global position (file k adds k * 10**6), row ``i`` starts
with ``i + 1``, tables have an ``id`` column, files carry ``index``.

Run scripts from the worktree root with ``PYTHONPATH=src``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from headrace.formats import (
    FileSource,
    PaddedRows,
    PairRows,
    TableSource,
    TokenSource,
    synthetic_arrays,
    write_row_file,
    write_sample_file,
)
from headrace.pipeline import Mixture

ROOT = Path(os.environ.get("AUDIT_ROOT", "/tmp/headrace-audit-resume"))

TOKENS_A = 7001
TOKENS_B = 5003
ROWS = 301
TABLE_ROWS = 293


def build(root: Path = ROOT) -> Path:
    """Write every dataset once (idempotent: a marker file says it is done)."""
    marker = root / "DONE"
    if marker.exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    # tokens: two uint32 files, values = position (+ 10**6 for the second)
    np.arange(TOKENS_A, dtype=np.uint32).tofile(root / "a.bin")
    (np.arange(TOKENS_B, dtype=np.uint32) + 1_000_000).tofile(root / "b.bin")
    for name in ("a.bin", "b.bin"):
        (root / f"{name}.json").write_text(json.dumps({"dtype": "uint32"}))
    # padded rows: row i = [i+1, ...], right-padded with 0, mask 1 on content
    rng = np.random.default_rng(0)
    for tag, n, width, off in (
        ("r1", ROWS, 17, 0),
        ("r2", 113, 17, 100_000),
        ("r3", 59, 17, 200_000),
    ):
        tok = np.zeros((n, width), dtype=np.int32)
        mask = np.zeros((n, width), dtype=np.uint8)
        for i in range(n):
            k = int(rng.integers(2, width + 1))
            tok[i, :k] = off + i * 1000 + np.arange(1, k + 1)
            mask[i, 1:k] = 1
        write_row_file(root / f"{tag}.tok.npy", tok)
        write_row_file(root / f"{tag}.mask.npy", mask)
    # pairs: anchor width 8, positive width 12 (raw .bin + sidecar)
    anc = (np.arange(ROWS)[:, None] * 100 + np.arange(1, 9)[None, :]).astype(np.uint16)
    pos = (np.arange(ROWS)[:, None] * 100 + np.arange(1, 13)[None, :] + 50).astype(np.uint32)
    write_row_file(root / "anchor.npy", anc)
    write_row_file(root / "positive.bin", pos)
    # tables: parquet in row groups of 20, and a real datasets.save_to_disk directory
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = np.arange(TABLE_ROWS, dtype=np.int64)
    lists = [list(range(i, i + 1 + (i % 7))) for i in range(TABLE_ROWS)]
    table = pa.table({"id": ids, "ids": pa.array(lists, type=pa.list_(pa.int32()))})
    (root / "pq").mkdir(exist_ok=True)
    pq.write_table(table.slice(0, 150), root / "pq" / "part-0.parquet", row_group_size=20)
    pq.write_table(table.slice(150), root / "pq" / "part-1.parquet", row_group_size=20)
    import datasets

    ds = datasets.Dataset.from_dict({"id": ids.tolist(), "ids": lists})
    ds.save_to_disk(str(root / "hf"), num_shards=3)
    # files
    for fmt, n, spf, shape in (
        ("npy", 41, 1, (4, 3)),
        ("npz", 23, 4, (4, 3)),
        ("jpeg", 37, 1, (8, 8, 3)),
        ("png", 31, 1, (8, 8, 3)),
        ("hdf5", 19, 3, (4, 3)),
        ("npy2", 29, 1, (4, 3)),
    ):
        d = root / fmt
        d.mkdir(exist_ok=True)
        real = fmt.rstrip("2")
        ext = {"jpeg": "jpg", "hdf5": "h5"}.get(real, real)
        for i in range(n):
            arrays = synthetic_arrays(
                real, seed=i + (1000 if fmt == "npy2" else 0), shape=shape, samples_per_file=spf
            )
            write_sample_file(real, d / f"f{i:03d}.{ext}", arrays)
    marker.write_text("ok")
    return root


# -- sources -------------------------------------------------------------------
# Each factory returns a fresh source (a resumed run opens its own), and an
# identity function mapping a batch to one int per sample.

Factory = Callable[[], Any]


def tokens(shuffle: bool = True, context: int = 16) -> Any:
    r = build()
    # 20 starts per window: many windows, partial windows at each file's end
    return TokenSource(
        [r / "a.bin", r / "b.bin"],
        context=context,
        window_bytes=(20 * context + 1) * 4,
        block_bytes=4096,
        shuffle=shuffle,
    )


def rows(
    shuffle: Any = True, mask: bool = True, tag: str = "r1", window_rows: int | None = None
) -> Any:
    r = build()
    kw: dict[str, Any] = {}
    if shuffle == "window":
        kw["window_rows"] = window_rows or 37
    return PaddedRows(
        r / f"{tag}.tok.npy",
        (r / f"{tag}.mask.npy") if mask else None,
        context=16,
        ignore_index=-100,
        shuffle=shuffle,
        **kw,
    )


def pairs(shuffle: Any = True) -> Any:
    r = build()
    kw: dict[str, Any] = {"window_rows": 41} if shuffle == "window" else {}
    return PairRows(
        {"anchor": str(r / "anchor.npy"), "positive": str(r / "positive.bin")},
        shuffle=shuffle,
        **kw,
    )


def table(layout: str = "pq", shuffle: Any = True) -> Any:
    r = build()
    return TableSource(
        str(r / layout), columns=["id", "ids"], width=8, shuffle=shuffle, window_rows=50
    )


def files(fmt: str, shuffle: str = "files") -> Any:
    r = build()
    real = fmt.rstrip("2")
    spf = {"npz": 4, "hdf5": 3}.get(real, 1)
    kw: dict[str, Any] = {"datasets": ("x", "y")} if real == "hdf5" else {}
    return FileSource(
        str(r / fmt), format=real, samples_per_file=spf, shuffle=shuffle, decode_threads=1, **kw
    )


def mixture_rows(batch_size: int) -> Any:
    return Mixture(
        {"r1": rows(), "r2": rows(tag="r2"), "r3": rows("window", tag="r3", window_rows=13)},
        [0.5, 0.3, 0.2],
        batch_size=batch_size,
    )


def mixture_files(batch_size: int) -> Any:
    return Mixture(
        {"a": files("npy"), "b": files("npy2", "samples")}, [0.7, 0.3], batch_size=batch_size
    )


def mixture_tokens(batch_size: int) -> Any:
    r = build()
    a = TokenSource(r / "a.bin", context=16, window_bytes=(20 * 16 + 1) * 4, block_bytes=4096)
    b = TokenSource(r / "b.bin", context=16, window_bytes=(13 * 16 + 1) * 4, block_bytes=4096)
    return Mixture([a, b], [0.6, 0.4], batch_size=batch_size)


def ident(batch: dict[str, np.ndarray]) -> np.ndarray:
    """One integer per sample that names it (source id in the high bits for mixtures)."""
    if "index" in batch:
        v = batch["index"].astype(np.int64)
    elif "id" in batch:
        v = batch["id"].astype(np.int64)
    elif "anchor_x" in batch:
        v = batch["anchor_x"][:, 0].astype(np.int64) // 100
    elif "loss_mask" in batch:  # padded rows: first token = off + i*1000 + 1
        v = (batch["x"][:, 0].astype(np.int64) - 1) // 1000
    else:  # tokens: x[:, 0] is the start's position (+10**6 for file b)
        v = batch["x"][:, 0].astype(np.int64)
    if "source" in batch:
        v = v + (batch["source"].astype(np.int64) << 40)
    return v


def digest(batch: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for k in sorted(batch):
        a = batch[k]
        if a.dtype == object:
            for e in a:
                e = np.ascontiguousarray(e)
                h.update(f"{k}{e.dtype.str}{e.shape}".encode())
                h.update(e.tobytes())
        else:
            a = np.ascontiguousarray(a)
            h.update(f"{k}{a.dtype.str}{a.shape}".encode())
            h.update(a.tobytes())
    return h.hexdigest()[:16]
