"""A battery of Parquet and Arrow IPC files holding the column types Hugging Face
datasets hold, written by pyarrow, and the check that a TableSource yields, for any
rows it picks, what pyarrow itself reads of those rows (tests/formats/test_table_audit.py
and its S3 twin in tests/integration)."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from headrace.errors import FormatError
from headrace.formats import TableSource

N = 257  # rows: row groups and record batches of uneven sizes end anywhere
#: row groups / record batches, uneven (sum N), some of 0 rows
CHUNKS = (0, 1, 60, 0, 3, 100, 93, 0)
WIDTH = 24  # every list / string of the battery fits
SHUFFLES = ("none", "full", "window")
BATCHES = (1, 7, 64)


def _ints(dtype: str, rng: np.random.Generator) -> pa.Array:
    info = np.iinfo(dtype)
    values = rng.integers(info.min, info.max, N, dtype=dtype, endpoint=True)
    values[:4] = [info.min, info.max, 0, info.max - 1]  # the extremes, in the first chunks
    return pa.array(values)


def _floats(dtype: str, rng: np.random.Generator) -> pa.Array:
    values = (rng.standard_normal(N) * 1e3).astype(dtype)
    values[:6] = [np.nan, np.inf, -np.inf, -0.0, np.finfo(dtype).max, np.finfo(dtype).tiny]
    return pa.array(values)


def _times(dtype: str, rng: np.random.Generator, most: int = 2**62) -> np.ndarray:
    """``N`` times of ``dtype`` (datetime64 or timedelta64), random within ``most`` units
    of the epoch a side, the extremes among them; none is NaT."""
    values = rng.integers(-most, most, N, dtype=np.int64, endpoint=True)
    values[:3] = [-most, most, -1]
    return values.astype(dtype)


def _clock(rng: np.random.Generator, day: int) -> np.ndarray:
    """``N`` times of day in a unit of which ``day`` make a day: 0 and ``day - 1`` first."""
    out = rng.integers(0, day, N, dtype=np.int64)
    out[:2] = 0, day - 1
    return out


def full_table(seed: int = 0) -> pa.Table:
    """Every supported column type, without nulls."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, WIDTH, N)
    text = ["".join(chr(0x61 + (i + j) % 26) for j in range(n)) for i, n in enumerate(lengths)]
    text[5] = "é€😀"  # multi-byte UTF-8 (9 bytes)
    text[6] = ""
    blobs = [bytes(rng.integers(0, 256, n, dtype=np.uint8)) for n in lengths]
    toks = [rng.integers(0, 50_000, n).astype(np.int32) for n in lengths]
    cols: dict[str, Any] = {
        **{f"i{b}": _ints(f"int{b}", rng) for b in (8, 16, 32, 64)},
        **{f"u{b}": _ints(f"uint{b}", rng) for b in (8, 16, 32, 64)},
        **{f"f{b}": _floats(f"float{b}", rng) for b in (16, 32, 64)},
        "flag": pa.array(rng.integers(0, 2, N).astype(bool)),
        # Timestamps (one before 1970, the extremes of ms), dates and durations.
        "ts": pa.array(_times("M8[ms]", rng), pa.timestamp("ms")),
        "ts_tz": pa.array(_times("M8[us]", rng), pa.timestamp("us", tz="Europe/Paris")),
        # Whole microseconds: Parquet 1.0 holds none finer (pyarrow refuses to cut them).
        "ts_ns": pa.array(_times("M8[us]", rng, 2**52).astype("M8[ns]"), pa.timestamp("ns")),
        "day": pa.array(_times("M8[D]", rng, 2**31 - 1), pa.date32()),
        "dur": pa.array(_times("m8[s]", rng), pa.duration("s")),
        "dur_us": pa.array(_times("m8[us]", rng), pa.duration("us")),
        # Times of day (since midnight), with midnight and the day's last instant
        # (time32[s] is in tests/formats/test_table_times.py: Parquet stores it as ms).
        "tod_ms": pa.array(_clock(rng, 86_400_000).astype(np.int32), pa.time32("ms")),
        "tod_us": pa.array(_clock(rng, 86_400_000_000), pa.time64("us")),
        "tod_ns": pa.array(_clock(rng, 86_400_000_000_000) // 1000 * 1000, pa.time64("ns")),
        "text": pa.array(text, pa.string()),
        "large_text": pa.array(text, pa.large_string()),
        "blob": pa.array(blobs, pa.binary()),
        "large_blob": pa.array(blobs, pa.large_binary()),
        "ids": pa.array(toks, pa.list_(pa.int32())),
        "large_ids": pa.array([t.astype(np.int64) for t in toks], pa.large_list(pa.int64())),
        "u16_ids": pa.array([t.astype(np.uint16) for t in toks], pa.list_(pa.uint16())),
        "f16_list": pa.array([t.astype(np.float16) for t in toks], pa.list_(pa.float16())),
        "i8_list": pa.array(
            [np.resize(np.array([-128, 127, 0, -1], np.int8), n) for n in lengths],
            pa.list_(pa.int8()),
        ),
        "f64_list": pa.array(
            [np.resize(np.array([np.nan, -0.0, np.inf, 1e-308]), n) for n in lengths],
            pa.large_list(pa.float64()),
        ),
        "u32_list": pa.array(
            [np.full(n, 2**32 - 1 - i, np.uint32) for i, n in enumerate(lengths)],
            pa.list_(pa.uint32()),
        ),
        "i64_vec": pa.array(
            list(rng.integers(-(2**63), 2**63 - 1, (N, 2), dtype=np.int64, endpoint=True)),
            pa.list_(pa.int64(), 2),
        ),
        "vec": pa.array(
            list(rng.standard_normal((N, 4)).astype(np.float32)), pa.list_(pa.float32(), 4)
        ),
        "u8_vec": pa.array(
            list(rng.integers(0, 256, (N, 3), dtype=np.uint8)), pa.list_(pa.uint8(), 3)
        ),
        # Lists of bools (a mask per token): bit-packed, cut at any bit.
        "bool_list": pa.array(
            [rng.integers(0, 2, n).astype(bool) for n in lengths], pa.list_(pa.bool_())
        ),
        "bool_vec": pa.array(
            list(rng.integers(0, 2, (N, 3)).astype(bool)), pa.list_(pa.bool_(), 3)
        ),
        # Fixed-size binary (a hash, an id): each row's 16 bytes as (B, 16) uint8.
        "digest": pa.array(
            [bytes(r) for r in rng.integers(0, 256, (N, 16), dtype=np.uint8)], pa.binary(16)
        ),
        "cat": pa.array([f"c{i % 5}" for i in range(N)]).dictionary_encode(),
        "num_cat": pa.array((np.arange(N) % 7).astype(np.int16) * 1000).dictionary_encode(),
        "st": pa.array(
            [{"a": int(i) * 3, "b": t, "c": [int(i)] * (i % 4)} for i, t in enumerate(text)],
            pa.struct([("a", pa.int64()), ("b", pa.string()), ("c", pa.list_(pa.int64()))]),
        ),
    }
    return pa.table(cols)


def encoded_table(seed: int = 0, null_item_at: int | None = None) -> pa.Table:
    """Columns of lists, fixed-size lists and fixed-size binary stored dictionary-encoded,
    as Arrow IPC holds them (Parquet does not: pyarrow decodes or refuses them), with an
    id column; ``null_item_at``: that row's list entry (and only it) holds a null item."""
    rng = np.random.default_rng(seed)
    entries = 9
    codes = rng.integers(0, entries, N).astype(np.int32)
    lists: list[list[int | None]] = [
        rng.integers(0, 50_000, e % 5).tolist() for e in range(entries)
    ]
    if null_item_at is not None:  # its entry alone, named by no other row
        bad = int(codes[null_item_at])
        lists[bad] = [None, 7]
        codes[codes == bad] = (bad + 1) % entries
        codes[null_item_at] = bad

    def coded(values: pa.Array) -> pa.Array:
        return pa.DictionaryArray.from_arrays(pa.array(codes), values)

    return pa.table(
        {
            "i": pa.array(np.arange(N, dtype=np.int64)),
            "ids_cat": coded(pa.array(lists, pa.list_(pa.int32()))),
            "vec_cat": coded(
                pa.array(
                    list(rng.standard_normal((entries, 4)).astype(np.float32)),
                    pa.list_(pa.float32(), 4),
                )
            ),
            "digest_cat": coded(
                pa.array(
                    [bytes(r) for r in rng.integers(0, 256, (entries, 16), np.uint8)],
                    pa.binary(16),
                )
            ),
        }
    )


def empty_items_table() -> pa.Table:
    """Strings, binaries and lists whose every row in whole chunks of CHUNKS is empty:
    record batches, row groups and sub-windows with no values at all."""
    empty = np.zeros(N, bool)
    empty[1:64] = empty[164:] = True  # chunks (1, 60, 0, 3) and (93, 0)
    return pa.table(
        {
            "text": pa.array(["" if e else f"x{i}" for i, e in enumerate(empty)]),
            "blob": pa.array([b"" if e else b"\x00\x01" for e in empty], pa.large_binary()),
            "ids": pa.array([[] if e else [i] for i, e in enumerate(empty)], pa.list_(pa.int32())),
            "lids": pa.array(
                [[] if e else [i] for i, e in enumerate(empty)], pa.large_list(pa.uint64())
            ),
            "i": np.arange(N),
        }
    )


def with_views(table: pa.Table) -> pa.Table:
    """``table``'s ``text`` and ``blob`` again as ``text_view`` and ``blob_view``: Arrow's
    view types, which polars writes to IPC files (a Parquet file stores them as string
    and binary). Not in :func:`full_table`: a view makes a record batch on object
    storage be fetched whole, where the battery's are cut by rows."""
    views = {"text_view": pa.string_view(), "blob_view": pa.binary_view()}
    for name, typ in views.items():
        table = table.append_column(name, table.column(name.split("_")[0]).cast(typ))
    return table


#: columns of types headrace refuses to convert (left out, the others read)
REFUSED = {
    "decimal128": pa.array([Decimal(i) / 100 for i in range(N)], pa.decimal128(10, 2)),
    "list-list": pa.array([[[i], [i, i]] for i in range(N)], pa.list_(pa.list_(pa.int32()))),
    "list-string": pa.array([[str(i)] for i in range(N)], pa.list_(pa.string())),
    "all-null": pa.nulls(N),
    "map": pa.array([[("k", i)] for i in range(N)], pa.map_(pa.string(), pa.int64())),
}


#: column read name -> top-level column (struct fields read as ``column.field``)
def read_names(table: pa.Table) -> list[str]:
    out = []
    for f in table.schema:
        if pa.types.is_struct(f.type):
            out.extend(f"{f.name}.{sub.name}" for sub in f.type)
        else:
            out.append(f.name)
    return out


def boundary_rows(n: int, chunks: Sequence[int] = CHUNKS) -> list[int]:
    """The first row, and each chunk's last and the next one's first, of ``n`` rows."""
    ends = [int(e) for e in np.cumsum(chunks) if 0 < e < n]
    return sorted({0, *(e - 1 for e in ends), *ends})


def with_nulls(table: pa.Table, column: str, rows: Sequence[int]) -> pa.Table:
    """``table`` with top-level ``column`` null at ``rows`` (a dictionary column decoded)."""
    col = table.column(column).combine_chunks()
    if pa.types.is_dictionary(col.type):  # (cast() takes no dictionary of lists)
        chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
        col = pa.chunked_array([c.dictionary_decode() for c in chunks], col.type.value_type)
    if pa.types.is_time(col.type):  # pyarrow gives datetime.time objects: time since midnight
        unit = col.type.unit
        col = col.cast(pa.int32() if pa.types.is_time32(col.type) else pa.int64())
        col = col.cast(pa.int64()).cast(pa.duration(unit))
    mask = np.zeros(len(table), bool)
    mask[list(rows)] = True
    nulled = pc.if_else(pa.array(mask), pa.nulls(len(table), col.type), col)
    return table.set_column(table.schema.get_field_index(column), column, nulled)


def refused_rows(path: str | Path, column: str, **kw: Any) -> list[int]:
    """The rows a TableSource refuses, each read alone, naming ``column``."""
    src = TableSource(str(path), columns=[column], width=WIDTH, shuffle="full", **kw)
    rows = src.starts(0, np.arange(len(src), dtype=np.int64))[1]
    refused = []
    for s, r in enumerate(rows.tolist()):
        try:
            src.read(0, np.array([s], np.int64))
        except FormatError as exc:
            assert f"column {column!r}" in str(exc), exc
            refused.append(r)
    src.close()
    return sorted(refused)


def write_parquet(path: Path, table: pa.Table, chunks: Sequence[int] = CHUNKS, **kw: Any) -> Path:
    """``table`` in row groups of ``chunks`` rows."""
    with pq.ParquetWriter(path, table.schema, **kw) as w:
        at = 0
        for n in chunks:
            w.write_table(table.slice(at, n), row_group_size=max(n, 1))
            at += n
        if at < table.num_rows:
            w.write_table(table.slice(at))
    return path


def write_arrow(
    path: Path,
    table: pa.Table,
    chunks: Sequence[int] = CHUNKS,
    *,
    stream: bool = False,
    compression: str | None = None,
) -> Path:
    """``table`` in record batches of ``chunks`` rows (each a slice: non-zero offsets),
    their buffers compressed with ``compression`` (``"lz4"``, ``"zstd"``)."""
    options = ipc.IpcWriteOptions(compression=compression)
    with (ipc.new_stream if stream else ipc.new_file)(path, table.schema, options=options) as w:
        at = 0
        for n in chunks:
            part = table.slice(at, n)
            # A record batch of 0 rows (pyarrow's to_batches gives none for them).
            empty = pa.RecordBatch.from_arrays(
                [c.chunk(0) for c in part.columns], schema=part.schema
            )
            for b in part.to_batches() if n else [empty]:
                w.write_batch(b)
            at += n
        if at < table.num_rows:
            w.write_table(table.slice(at))
    return path


#: the file kinds of the battery: Parquet, Arrow IPC file, Arrow IPC stream
KINDS = ("parquet", "arrow", "stream")


def write(kind: str, path: Path, table: pa.Table, chunks: Sequence[int] = CHUNKS) -> Path:
    """``table`` as a file of ``kind`` (one of KINDS) at ``path`` with its suffix."""
    if kind == "parquet":
        return write_parquet(path.with_suffix(".parquet"), table, chunks)
    return write_arrow(path.with_suffix(".arrow"), table, chunks, stream=kind == "stream")


def read_reference(path: str | Path) -> pa.Table:
    """The file as pyarrow reads it, whatever its format."""
    p = str(path)
    if p.endswith(".parquet"):
        return pq.read_table(p)
    with pa.memory_map(p) as f:
        try:
            return ipc.open_file(f).read_all()
        except pa.ArrowInvalid:
            f.seek(0)
            return ipc.open_stream(f).read_all()


def _column(ref: pa.Table, name: str) -> pa.ChunkedArray:
    top, _, field = name.partition(".")
    col = ref.column(top)
    if field:
        col = pc.struct_field(col, field)
    if pa.types.is_dictionary(col.type):  # (cast() takes no dictionary of lists)
        chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
        col = pa.chunked_array([c.dictionary_decode() for c in chunks], col.type.value_type)
    if pa.types.is_time(col.type):  # pyarrow gives datetime.time objects: time since midnight
        unit = col.type.unit
        col = col.cast(pa.int32() if pa.types.is_time32(col.type) else pa.int64())
        col = col.cast(pa.int64()).cast(pa.duration(unit))
    if str(col.type) in ("string_view", "binary_view"):  # pyarrow cannot take() views
        col = col.cast(pa.large_string() if str(col.type) == "string_view" else pa.large_binary())
    return col


def expected(
    ref: pa.Table,
    name: str,
    rows: np.ndarray,
    *,
    width: int = WIDTH,
    pad_side: str = "right",
    pad: int = 0,
) -> dict[str, np.ndarray]:
    """What the documented conversion makes of column ``name`` at ``rows``: numbers as
    ``(B,)``, fixed-size lists as ``(B, k)``, lists and strings as their first ``width``
    items padded with ``pad`` on ``pad_side``, beside ``name_mask``."""
    col = _column(ref, name).take(pa.array(rows, pa.int64()))
    typ = col.type
    t = pa.types
    if t.is_fixed_size_binary(typ):
        flat = np.frombuffer(b"".join(col.to_pylist()), np.uint8)
        return {name: flat.reshape(len(rows), typ.byte_width)}
    if t.is_fixed_size_list(typ):
        flat = pc.list_flatten(col).to_numpy(zero_copy_only=False)
        return {name: flat.reshape(len(rows), typ.list_size)}
    if (
        t.is_list(typ)
        or t.is_large_list(typ)
        or t.is_string(typ)
        or t.is_large_string(typ)
        or (t.is_binary(typ) or t.is_large_binary(typ))
    ):
        items = col.to_pylist()
        if t.is_list(typ) or t.is_large_list(typ):
            dtype = typ.value_type.to_pandas_dtype()
            arrays = [np.asarray(x, dtype=dtype) for x in items]
        else:
            # A text cut to the width keeps whole characters (TableSource, since
            # 2026-12-07: a cut inside a character's UTF-8 bytes left them undecodable).
            arrays = [
                np.frombuffer(
                    x.encode()[:width].decode("utf-8", "ignore").encode()
                    if isinstance(x, str)
                    else x,
                    np.uint8,
                )
                for x in items
            ]
            dtype = np.uint8
        values = np.full((len(rows), width), pad, dtype)
        mask = np.zeros((len(rows), width), bool)
        for i, a in enumerate(arrays):
            k = min(a.size, width)
            at = slice(0, k) if pad_side == "right" else slice(width - k, width)
            values[i, at] = a[:k]
            mask[i, at] = True
        return {name: values, f"{name}_mask": mask}
    return {name: col.to_numpy()}


def assert_same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal dtype, shape and bits (NaN payloads and -0.0 included)."""
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, pyarrow {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, pyarrow {want.shape}"
    if not np.array_equal(got, want, equal_nan=got.dtype.kind == "f"):
        bad = np.argwhere(got != want)[0] if got.dtype.kind != "f" else "?"
        raise AssertionError(f"{what}: values differ (first at {bad})")
    if got.dtype.kind == "f":
        assert np.array_equal(np.signbit(got), np.signbit(want)), f"{what}: signs differ"


def check_source(
    path: str | Path | Sequence[str | Path],
    ref: pa.Table,
    names: Sequence[str],
    *,
    seeds: Sequence[int] = (0, 3),
    width: int = WIDTH,
    pad_side: str = "right",
    pad_values: dict[str, int] | None = None,
    shuffles: Sequence[str] = SHUFFLES,
    pickled: bool = False,
    **kw: Any,
) -> int:
    """Read every shuffle mode and batch size of a TableSource over ``path`` (reading
    ``names``, ``kw`` to it; ``pickled``: a pickled copy of it) for an epoch's worth of
    samples, and compare each batch with ``ref`` (pyarrow's reading) at the rows the
    source chose (lists and strings padded as ``width``, ``pad_side``, ``pad_values``
    say); returns the rows checked."""
    pads = pad_values or {}

    def expect(c: str, rows: np.ndarray) -> dict[str, np.ndarray]:
        return expected(ref, c, rows, width=width, pad_side=pad_side, pad=pads.get(c, 0))

    checked = 0
    for shuffle in shuffles:
        src = TableSource(
            path if isinstance(path, (str, Path)) else list(map(str, path)),
            columns=list(names),
            width=width,
            pad_side=pad_side,  # type: ignore[arg-type]
            pad_values=pad_values,
            shuffle=shuffle,  # type: ignore[arg-type]
            window_rows=50,
            **kw,
        )
        if pickled:  # as a DataLoader worker gets it
            copy = pickle.loads(pickle.dumps(src))
            src.close()
            src = copy
        try:
            n = len(src)
            assert n == ref.num_rows, f"{shuffle}: {n} rows, pyarrow {ref.num_rows}"
            for seed in seeds:
                for b in BATCHES:
                    start = (seed * 31 + b) % max(n, 1)
                    samples = np.arange(start, start + b, dtype=np.int64) % max(n, 1)
                    samples = samples + n * seed  # epoch ``seed``
                    if not n:
                        continue
                    rows = src.starts(seed, samples)[1]
                    got = src.read(seed, samples)
                    for c in names:
                        for key, want in expect(c, rows).items():
                            assert_same(got[key], want, f"{path}: {shuffle} b={b} {key}")
                    checked += len(rows)
            # Every row once, in batches of 64: all chunk boundaries crossed.
            if n:
                samples = np.arange(n, dtype=np.int64)
                rows = src.starts(1, samples)[1]
                assert sorted(rows.tolist()) == list(range(n)), f"{shuffle}: not a permutation"
                got = src.read(1, samples)
                for c in names:
                    for key, want in expect(c, rows).items():
                        assert_same(got[key], want, f"{path}: {shuffle} epoch {key}")
                checked += n
        finally:
            src.close()
    return checked


#: the size of the fixed-size list column of :func:`fixed_list_file`, spelled nowhere else
#: in its files (4 bytes that :func:`fixed_list_file` finds and forges)
FIXED = 12_345


def fixed_list_file(kind: str, path: Path, size: int) -> Path:
    """Two rows of a ``fixed_size_list<float>[FIXED]`` column ``emb`` and an int column,
    written as ``kind`` (one of KINDS), whose schema then says ``size`` items instead:
    in the Arrow IPC schema message(s), or in the one Parquet keeps base64-encoded under
    its ``ARROW:schema`` key, re-encoded to the same length. Nothing checksums either."""
    import base64
    import re
    import struct

    emb = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(2 * FIXED, dtype=np.float32)), FIXED)
    path = write(kind, path, pa.table({"emb": emb, "label": pa.array([0, 1])}), chunks=(2,))
    data, was, now = path.read_bytes(), struct.pack("<i", FIXED), struct.pack("<i", size)
    if kind == "parquet":
        key = data.index(b"ARROW:schema")
        found = re.compile(rb"[A-Za-z0-9+/]{40,}=*").search(data, key)
        assert found is not None
        schema = base64.b64decode(found.group())
        assert schema.count(was) == 1
        forged = base64.b64encode(schema.replace(was, now))
        data = data[: found.start()] + forged + data[found.end() :]
    else:
        assert data.count(was) == (1 if kind == "stream" else 2)  # a file repeats it at its end
        data = data.replace(was, now)
    path.write_bytes(data)
    return path
