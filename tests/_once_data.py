"""Small real datasets of every source kind, each row unique, for the "lose nothing,
repeat nothing" battery (tests/pipeline/test_once_battery.py): sizes prime where the
source allows it, several files, row groups and shards of uneven counts."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from _mds_files import write_mds
from _row_files import padded_rows
from _tar_shards import shards
from headrace.formats import (
    FileSource,
    MDSSource,
    PaddedRows,
    PairRows,
    TableSource,
    TokenSource,
    encode_jpeg,
    encode_png,
    table_token_files,
    write_megatron_index,
    write_row_file,
    write_sample_file,
)
from headrace.formats._tfrecord import encode_tfrecord
from headrace.pipeline import Mapped, Mixture

#: Keys a loader or a mixture adds beside what the source read: not part of a row's identity.
MARKS = ("sample", "valid", "source")

#: The mixtures' global batch (a mixture decodes sample numbers with it).
MIX_BATCH = 10


def row_digests(batch: Mapping[str, Any]) -> list[str]:
    """One SHA-256 a row over every key but :data:`MARKS` (object rows element by element)."""
    # A read of ragged samples says each one's shape in ``{key}_shape`` (its object rows
    # say it too); one whose samples agree is dense and has none: not part of the identity.
    keys = sorted(
        k
        for k in batch
        if k not in MARKS and not (k.endswith("_shape") and k[: -len("_shape")] in batch)
    )
    n = len(batch[keys[0]])
    out = []
    for i in range(n):
        h = hashlib.sha256()
        for k in keys:
            el = batch[k][i]
            if isinstance(el, dict):  # (a tar sample's fields, undecoded)
                el = repr(sorted(el.items()))
            e = np.asarray(el)
            if e.dtype == object:
                e = np.asarray(repr(e.tolist()))
            h.update(f"{k}:{e.dtype.str}:{e.shape};".encode())
            h.update(np.ascontiguousarray(e).tobytes())
        out.append(h.hexdigest()[:16])
    return out


def build(root: Path) -> None:
    """Every dataset the battery reads, under ``root``."""
    rng = np.random.default_rng(20261204)
    # Token files: 13 + 17 + 7 = 37 samples of context 8 (tails of 3 and 5 tokens).
    tok = root / "tok"
    tok.mkdir()
    for name, n in (("a", 8 * 13 + 1 + 3), ("b", 8 * 17 + 1), ("c", 8 * 7 + 1 + 5)):
        rng.integers(0, 60_000, n, dtype=np.uint16).tofile(tok / f"{name}.bin")
    # Megatron: one .bin/.idx pair of 9 documents, 41 samples of context 8.
    meg = root / "meg"
    meg.mkdir()
    lengths = np.array([40, 33, 51, 7, 64, 29, 44, 30, 32], dtype=np.int32)  # 330 tokens
    rng.integers(0, 2**31, int(lengths.sum()), dtype=np.int32).tofile(meg / "m.bin")
    write_megatron_index(meg / "m.idx", np.int32, lengths)
    # Padded rows: 53 rows of width 17, no empty row (each row its own).
    for side in ("r", "l"):
        d = root / f"rows_{side}"
        d.mkdir()
        padded_rows(
            d, 53 if side == "r" else 29, 17, seed=7, prompt_mod=3, ext=".npy", empty_every=0
        )
    # Pairs: 41 rows of two members of widths 9 and 6, 0 the padding.
    pairs = root / "pairs"
    pairs.mkdir()
    for name, w in (("chosen", 9), ("rejected", 6)):
        t = rng.integers(1, 2**31, (41, w), dtype=np.uint32)
        t[np.arange(w)[None, :] >= rng.integers(2, w + 1, 41)[:, None]] = 0
        write_row_file(pairs / f"{name}.tok.bin", t)
    _tables(root, rng)
    _files(root, rng)


def _tables(root: Path, rng: np.random.Generator) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pqd = root / "parquet"
    pqd.mkdir()
    first = 0
    for i, (n, group) in enumerate(((23, 5), (19, 19), (17, 4))):  # 59 rows
        ids = [rng.integers(1, 50_000, int(k)).tolist() for k in rng.integers(1, 12, n)]
        t = pa.table({"input_ids": ids, "label": np.arange(first, first + n)})
        pq.write_table(t, pqd / f"part-{i}.parquet", row_group_size=group)
        first += n
    import datasets

    ids = [rng.integers(1, 50_000, int(k)).tolist() for k in rng.integers(1, 12, 43)]
    ds = datasets.Dataset.from_dict({"input_ids": ids, "label": list(range(43))})
    ds.save_to_disk(str(root / "hf"), num_shards=3)


def _files(root: Path, rng: np.random.Generator) -> None:
    one = root / "npy1"
    one.mkdir()
    for i in range(23):
        write_sample_file("npy", one / f"{i:03d}.npy", {"x": np.arange(4, dtype=np.int32) + 7 * i})
    many = root / "npyn"
    many.mkdir()
    first = 0
    for i, n in enumerate((3, 7, 2, 5, 6, 8)):  # 31 samples
        np.save(
            many / f"{i:02d}.npy", np.arange(first, first + n, dtype=np.int64)[:, None] * [1, 3]
        )
        first += n
    npz = root / "npz"
    npz.mkdir()
    for i, n in enumerate((4, 1, 6, 2)):  # 13
        write_sample_file(
            "npz",
            npz / f"{i}.npz",
            {"a": rng.integers(0, 99, (n, 3)), "b": rng.standard_normal((n, 2))},
        )
    for fmt, enc in (("png", encode_png), ("jpeg", encode_jpeg)):
        d = root / fmt
        d.mkdir()
        for i in range(17):
            img = rng.integers(0, 256, (5, 6, 3), dtype=np.uint8)
            (d / f"{i:02d}.{'jpg' if fmt == 'jpeg' else fmt}").write_bytes(enc(img))
    import h5py

    h5 = root / "h5"
    h5.mkdir()
    first = 0
    for i, n in enumerate((5, 2, 9, 3)):  # 19
        with h5py.File(h5 / f"{i}.h5", "w") as f:
            f["x"] = np.arange(first, first + n, dtype=np.float32)[:, None] * np.ones(4, np.float32)
        first += n
    shards(root / "tar")  # 21 samples in 4 shards
    tfr = root / "tfr"
    tfr.mkdir()
    for i, n in enumerate((4, 5, 8)):  # 17
        arrays = {"ids": rng.integers(-(2**40), 2**40, (n, 3)), "w": rng.standard_normal((n, 2))}
        (tfr / f"s{i}.tfrecord").write_bytes(encode_tfrecord(arrays))
    try:
        from array_record.python.array_record_module import ArrayRecordWriter
    except ImportError:
        pass
    else:
        ar = root / "ar"
        ar.mkdir()
        for i, n in enumerate((6, 1, 4)):  # 11
            w = ArrayRecordWriter(str(ar / f"s{i}.array_record"), "group_size:2")
            for _ in range(n):
                w.write(rng.bytes(int(rng.integers(1, 40))))
            w.close()
    samples = [{"id": i, "x": rng.bytes(int(rng.integers(0, 9)))} for i in range(31)]
    write_mds(root / "mds", {"id": "int64", "x": "bytes"}, samples, per_shard=7)


def _add_one(arrays: dict[str, np.ndarray], samples: Any) -> dict[str, np.ndarray]:
    """A Mapped function drawing from each sample's own generator (it must replay)."""
    out = dict(arrays)
    out["r"] = np.array([g.integers(0, 2**31) for g in samples.rngs()], dtype=np.int64)
    return out


def _window(shuffle: Any, rows: int) -> dict[str, int]:
    """``window_rows=rows`` where the shuffle takes it (``"window"``), else nothing."""
    return {"window_rows": rows} if shuffle == "window" else {}


def _mds_source(root: Path, shuffle: Any) -> MDSSource:
    return MDSSource(root / "mds", shuffle=shuffle)


#: name -> (make(root, shuffle), the shuffles to audit, the unshuffled reference's shuffle).
SOURCES: dict[str, tuple[Callable[[Path, Any], Any], tuple[Any, ...], Any]] = {
    "tokens": (
        lambda r, s: TokenSource(
            sorted((r / "tok").glob("*.bin")), context=8, dtype="uint16", window_bytes=64, shuffle=s
        ),
        (True,),
        False,
    ),
    "tokens_tail": (
        lambda r, s: TokenSource(
            sorted((r / "tok").glob("*.bin")),
            context=8,
            dtype="uint16",
            window_bytes=128,
            shuffle=s,
            tail=True,
            pad_id=0,
        ),
        (False,),  # (tail=True needs shuffle=False)
        False,
    ),
    "megatron": (
        lambda r, s: TokenSource(r / "meg" / "m.bin", context=8, shuffle=s, window_bytes=256),
        (True,),
        False,
    ),
    "padded": (
        lambda r, s: PaddedRows(
            r / "rows_r" / "tok.npy",
            r / "rows_r" / "mask.npy",
            context=16,
            shuffle=s,
            empty_rows="keep",
            **_window(s, 8),
        ),
        (True, "window"),
        False,
    ),
    "padded_left": (
        lambda r, s: PaddedRows(
            r / "rows_l" / "tok.npy",
            r / "rows_l" / "mask.npy",
            context=16,
            shuffle=s,
            pad_side="left",
            empty_rows="keep",
        ),
        (True,),
        False,
    ),
    "pairs": (
        lambda r, s: PairRows(
            {
                "chosen": r / "pairs" / "chosen.tok.bin",
                "rejected": r / "pairs" / "rejected.tok.bin",
            },
            shuffle=s,
            empty_rows="keep",
            **_window(s, 6),
        ),
        (True, "window"),
        False,
    ),
    "parquet": (
        lambda r, s: TableSource(
            sorted((r / "parquet").glob("*.parquet")), width=12, shuffle=s, **_window(s, 8)
        ),
        (True, "window"),
        False,
    ),
    "arrow": (
        lambda r, s: TableSource(r / "hf", width=12, shuffle=s, **_window(s, 9)),
        (True, "window"),
        False,
    ),
    "packed": (
        lambda r, s: TokenSource(
            table_token_files(r / "hf"), context=4, shuffle=s, window_bytes=64
        ),
        (True,),
        False,
    ),
    "npy_one": (
        lambda r, s: FileSource(r / "npy1", format="npy", shuffle=s),
        ("files", "samples"),
        "none",
    ),
    "npy_many": (
        lambda r, s: FileSource(r / "npyn", format="npy", samples_per_file="header", shuffle=s),
        ("files", "samples"),
        "none",
    ),
    "npz": (
        lambda r, s: FileSource(r / "npz", format="npz", samples_per_file="header", shuffle=s),
        ("files", "samples"),
        "none",
    ),
    "png": (lambda r, s: FileSource(r / "png", format="png", shuffle=s), ("files",), "none"),
    "jpeg": (lambda r, s: FileSource(r / "jpeg", format="jpeg", shuffle=s), ("files",), "none"),
    "hdf5": (
        lambda r, s: FileSource(
            r / "h5", format="hdf5", samples_per_file="header", shuffle=s, datasets=("x",)
        ),
        ("files", "samples"),
        "none",
    ),
    "tar": (
        lambda r, s: FileSource(r / "tar", format="tar", shuffle=s),
        ("files", "samples"),
        "none",
    ),
    "tfrecord": (
        lambda r, s: FileSource(r / "tfr", format="tfrecord", shuffle=s),
        ("files", "samples"),
        "none",
    ),
    "array_record": (
        lambda r, s: FileSource(r / "ar", format="array_record", shuffle=s, decode=False),
        ("files", "samples"),
        "none",
    ),
    # The same files read by rows (their headers, then the rows a read asks), not whole.
    "npy_rows": (
        lambda r, s: FileSource(
            r / "npyn", format="npy", samples_per_file="header", shuffle=s, npy_ranges_above=1
        ),
        ("samples",),
        "none",
    ),
    "npz_rows": (
        lambda r, s: FileSource(
            r / "npz", format="npz", samples_per_file="header", shuffle=s, npz_ranges_above=1
        ),
        ("samples",),
        "none",
    ),
    "hdf5_rows": (
        lambda r, s: FileSource(
            r / "h5",
            format="hdf5",
            samples_per_file="header",
            shuffle=s,
            datasets=("x",),
            hdf5_local_ranges_above=1,
        ),
        ("samples",),
        "none",
    ),
    "tfrecord_rows": (
        lambda r, s: FileSource(r / "tfr", format="tfrecord", shuffle=s, tfrecord_ranges_above=1),
        ("samples",),
        "none",
    ),
    "map_style": (
        lambda r, s: FileSource(
            r / "npyn", format="npy", samples_per_file="header", shuffle=s, mode="map-style"
        ),
        ("files", "samples"),
        "none",
    ),
    "mds": (_mds_source, (True, "window"), False),
    "mapped": (
        lambda r, s: Mapped(
            PaddedRows(r / "rows_l" / "tok.npy", context=16, shuffle=s, empty_rows="keep"), _add_one
        ),
        (True,),
        False,
    ),
}


def mixture(root: Path, kind: str, shuffle: Any = True, batch_size: int = MIX_BATCH) -> Mixture:
    """Two token sources, or three row sources (padded right, left, and again right)."""
    if kind == "mix_tokens":
        a = TokenSource(root / "tok" / "a.bin", context=8, dtype="uint16", shuffle=shuffle)
        b = TokenSource(
            sorted((root / "tok").glob("[bc].bin")),
            context=8,
            dtype="uint16",
            shuffle=shuffle,
            window_bytes=64,
        )
        return Mixture({"a": a, "b": b}, [0.3, 0.7], batch_size=batch_size)
    r = root / "rows_r"
    el = root / "rows_l"
    kw: dict[str, Any] = {"context": 16, "empty_rows": "keep"}
    return Mixture(
        {
            "right": PaddedRows(r / "tok.npy", r / "mask.npy", shuffle=shuffle, **kw),
            "left": PaddedRows(
                el / "tok.npy",
                el / "mask.npy",
                shuffle="window",
                window_rows=5,
                pad_side="left",
                **kw,
            ),
            "again": PaddedRows(r / "tok.npy", r / "mask.npy", shuffle=False, **kw),
        },
        [0.5, 0.2, 0.3],
        batch_size=batch_size,
    )
