"""Parquet and Arrow files as other writers make them: rows read as pyarrow reads them,
or the file and column are refused by name, saying what is unsupported."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from headrace.errors import ConfigError, FormatError
from headrace.formats import Table, TableSource
from headrace.formats._ragged import Ragged

N = 40
_RNG = np.random.default_rng(0)
TABLE = pa.table(
    {
        "id": pa.array(np.arange(N, dtype=np.int64)),
        "f": pa.array(_RNG.standard_normal(N).astype(np.float32)),
        "h": pa.array(np.arange(N, dtype=np.float16)),
        "b": pa.array(_RNG.integers(0, 2, N).astype(bool)),
        "tok": pa.array([list(range(i % 7)) for i in range(N)], pa.list_(pa.int32())),
        "s": pa.array([f"row{i}é" for i in range(N)]),
        "v": pa.array([[i, i + 1, i + 2] for i in range(N)], pa.list_(pa.float64(), 3)),
    }
)


def _check(tb: Table, ref: pa.Table) -> None:
    rows = list(range(ref.num_rows))[::-1]
    got = tb.read_rows(rows)
    for name in ref.column_names:
        want = ref.column(name).take(pa.array(rows)).to_pylist()
        out = got[name]
        if isinstance(out, Ragged):
            items = [out.values[out.offsets[i] : out.offsets[i + 1]] for i in range(len(rows))]
            if pa.types.is_string(ref.schema.field(name).type):
                assert [bytes(x) for x in items] == [w.encode() for w in want], name
            else:
                assert [x.tolist() for x in items] == want, name
        else:
            assert out.tolist() == want, name


def _parquet(path: Path, table: pa.Table, **options: Any) -> Path:
    pq.write_table(table, path, **options)
    return path


def _arrow(path: Path, table: pa.Table, *, stream: bool, **options: Any) -> Path:
    with (ipc.new_stream if stream else ipc.new_file)(path, table.schema, **options) as w:
        w.write_table(table, max_chunksize=7)  # several record batches
    return path


@pytest.mark.parametrize("codec", ["snappy", "zstd", "gzip", "none", "lz4", "brotli"])
def test_parquet_codecs_and_row_groups(codec: str, tmp_path: Path) -> None:
    path = _parquet(tmp_path / "t.parquet", TABLE, compression=codec, row_group_size=9)
    _check(Table.open(path), TABLE)


@pytest.mark.parametrize(
    "options",
    [
        {"data_page_version": "2.0"},
        {"use_dictionary": False},
        {"version": "1.0"},
        {"use_dictionary": False, "column_encoding": {"f": "BYTE_STREAM_SPLIT"}},
        {"use_dictionary": False, "column_encoding": {"id": "DELTA_BINARY_PACKED"}},
    ],
    ids=["page-v2", "plain", "format-1.0", "byte-stream-split", "delta"],
)
def test_parquet_encodings(options: dict[str, Any], tmp_path: Path) -> None:
    _check(Table.open(_parquet(tmp_path / "t.parquet", TABLE, **options)), TABLE)


def test_large_list_and_large_string_read_as_list_and_string(tmp_path: Path) -> None:
    large = TABLE.cast(
        TABLE.schema.set(4, pa.field("tok", pa.large_list(pa.int32()))).set(
            5, pa.field("s", pa.large_string())
        )
    )
    _check(Table.open(_parquet(tmp_path / "l.parquet", large)), TABLE)
    _check(Table.open(_arrow(tmp_path / "l.arrow", large, stream=True)), TABLE)


@pytest.mark.parametrize("stream", [False, True], ids=["file", "stream"])
@pytest.mark.parametrize("compression", [None, "zstd", "lz4"])
def test_arrow_ipc_file_and_stream(stream: bool, compression: str | None, tmp_path: Path) -> None:
    options = ipc.IpcWriteOptions(compression=compression)
    _check(Table.open(_arrow(tmp_path / "t.arrow", TABLE, stream=stream, options=options)), TABLE)


def test_arrow_ipc_of_a_sliced_table(tmp_path: Path) -> None:
    part = TABLE.slice(13, 20)  # buffers and list offsets that do not start at 0
    _check(Table.open(_arrow(tmp_path / "s.arrow", part, stream=False)), part)


@pytest.mark.parametrize(
    ("column", "match"),
    [
        (
            pa.array([{"a": i, "b": [i]} for i in range(N)]),
            r"column 'c' has type struct<a: int64.*columns=\['c\.a', 'c\.b'\]",
        ),
        (
            pa.array([[[1]]] * N, pa.list_(pa.list_(pa.int32()))),
            r"column 'c' holds lists of lists \(list<\w+: list<.*shapes=\{'c': \(1, 1\)\} \(the "
            r"first row's shape\)",
        ),
        (
            pa.array([Decimal(i) for i in range(N)], pa.decimal128(9, 0)),
            r"column 'c' has type decimal128\(9, 0\)",
        ),
    ],
    ids=["struct", "list-list", "decimal"],
)
@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_unsupported_column_types_are_refused_by_name(
    column: pa.Array, match: str, kind: str, tmp_path: Path
) -> None:
    t = pa.table({"id": pa.array(np.arange(N)), "c": column})
    path = (
        _parquet(tmp_path / "u.parquet", t)
        if kind == "parquet"
        else _arrow(tmp_path / "u.arrow", t, stream=True)
    )
    with pytest.raises(FormatError, match=rf"u\.{kind}: {match}"):
        Table.open(path)
    _check(Table.open(path, columns=["id"]), t.select(["id"]))  # left out, the rest reads


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_dictionary_columns_read_as_their_values(kind: str, tmp_path: Path) -> None:
    # A pandas category (strings) and dictionary-encoded numbers.
    t = pa.table(
        {
            "tag": pa.array([f"c{i % 3}" for i in range(N)]).dictionary_encode(),
            "n": pa.array([i % 5 for i in range(N)], pa.int16()).dictionary_encode(),
        }
    )
    path = (
        _parquet(tmp_path / "d.parquet", t)
        if kind == "parquet"
        else _arrow(tmp_path / "d.arrow", t, stream=True)
    )
    table = Table.open(path)
    assert table.columns["n"].kind == "scalar" and table.columns["tag"].kind == "bytes"
    _check(
        table,
        pa.table({c: t.column(c).cast(t.schema.field(c).type.value_type) for c in t.column_names}),
    )


def test_null_list_items_name_the_row(tmp_path: Path) -> None:
    t = pa.table({"x": pa.array([[1, None] if i == 13 else [i] for i in range(N)])})
    tb = Table.open(_parquet(tmp_path / "n.parquet", t, row_group_size=10))
    with pytest.raises(
        FormatError,
        match=r"n\.parquet: column 'x': 1 row\(s\) hold null list items "
        r"in .*: rows 13\b",
    ):
        tb.read_rows([12, 13])


def test_null_rows_are_refused_by_row(tmp_path: Path) -> None:
    t = pa.table({"x": pa.array([None if i == 5 else i for i in range(N)], pa.int64())})
    tb = Table.open(_parquet(tmp_path / "n.parquet", t))
    with pytest.raises(FormatError, match=r"n\.parquet: column 'x': row 5 is null, .*fill or drop"):
        tb.read_rows([5])


@pytest.mark.parametrize(
    ("second", "match"),
    [
        (TABLE.cast(TABLE.schema.set(1, pa.field("f", pa.float64()))), "column 'f' is double here"),
        (
            # A difference that does not matter (offsets' width) does not hide one that does.
            TABLE.cast(
                TABLE.schema.set(5, pa.field("s", pa.large_string())).set(
                    6, pa.field("v", pa.list_(pa.float32(), 3))
                )
            ),
            r"column 'v' is fixed_size_list<\w+: float>",
        ),
        (TABLE.drop_columns(["h"]), r"it lacks column 'h' \(halffloat in the first file\)"),
    ],
    ids=["type", "type behind offsets", "missing"],
)
def test_shards_with_another_schema_say_where_they_differ(
    second: pa.Table, match: str, tmp_path: Path
) -> None:
    a = _parquet(tmp_path / "a.parquet", TABLE)
    b = _parquet(tmp_path / "b.parquet", second)
    with pytest.raises(
        FormatError, match=rf"b\.parquet: schema differs from .*a\.parquet \({match}"
    ):
        Table.open([a, b])


@pytest.mark.parametrize("stream", [None, True, False], ids=["parquet", "stream", "file"])
def test_shards_that_differ_in_nullability_offsets_dictionaries_or_order_read_as_one(
    stream: bool | None, tmp_path: Path
) -> None:
    # Each file is read by its own types into the same arrays: fails before, "schema
    # differs" (polars writes large_string and large_list, pyarrow string and list;
    # Spark marks columns without nulls not nullable; a pandas category's index width
    # follows its count of categories).
    def write(path: Path, table: pa.Table) -> Path:
        if stream is None:
            return _parquet(path.with_suffix(".parquet"), table)
        return _arrow(path.with_suffix(".arrow"), table, stream=stream)

    loose = TABLE.slice(20).cast(
        pa.schema(
            [
                pa.field("id", pa.int64(), nullable=False),
                pa.field("f", pa.float32()),
                pa.field("h", pa.float16()),
                pa.field("b", pa.bool_(), nullable=False),
                pa.field("tok", pa.large_list(pa.int32())),
                pa.field("s", pa.dictionary(pa.int16(), pa.large_string())),
                pa.field("v", pa.list_(pa.float64(), 3), nullable=False),
            ]
        )
    )
    loose = loose.select(["v", "s", "tok", "b", "h", "f", "id"])  # and in another order
    coded = TABLE.slice(0, 20).set_column(5, "s", TABLE["s"].slice(0, 20).dictionary_encode())
    a = write(tmp_path / "a", coded)
    b = write(tmp_path / "b", loose)
    _check(Table.open([a, b]), TABLE)
    _check(Table.open([b, a]), pa.concat_tables([TABLE.slice(20), TABLE.slice(0, 20)]))
    src = TableSource([a, b], width=8, shuffle=False)
    assert src.read(0, np.arange(N))["tok"].shape == (N, 8)


@pytest.mark.parametrize("stream", [None, True], ids=["parquet", "stream"])
def test_a_shard_of_no_rows_may_type_its_columns_otherwise(
    stream: bool | None, tmp_path: Path
) -> None:
    # pandas writes an empty partition's object column as type null; a shard of no rows
    # has nothing to read by its types. Fails before: "schema differs" (first or later).
    def write(path: Path, table: pa.Table) -> Path:
        if stream is None:
            return _parquet(path.with_suffix(".parquet"), table)
        return _arrow(path.with_suffix(".arrow"), table, stream=True)

    nothing = pa.table(
        {
            c: pa.array([], pa.null() if c in ("s", "tok") else TABLE[c].type)
            for c in TABLE.column_names
        }
    )
    short = pa.table({"id": pa.array([], pa.int64())})  # and one without most columns
    e0, e1 = write(tmp_path / "e0", nothing), write(tmp_path / "e1", short)
    a = write(tmp_path / "a", TABLE.slice(0, 20))
    b = write(tmp_path / "b", TABLE.slice(20))
    for files in ([e0, a, e1, b], [a, e0, b, e1]):
        tb = Table.open(files)
        assert tb.schema.field("s").type == pa.string()
        _check(tb, TABLE)
        src = TableSource(files, width=8, shuffle=False)
        assert src.read(0, np.arange(N))["id"].tolist() == list(range(N))
        src.close()
    # A shard with rows still must agree.
    c = write(tmp_path / "c", nothing)
    with pytest.raises(FormatError, match=r"schema differs"):
        Table.open(
            [
                a,
                write(
                    tmp_path / "d",
                    TABLE.slice(20).cast(TABLE.schema.set(5, pa.field("s", pa.binary()))),
                ),
            ]
        )
    assert Table.open([c, a]).num_rows == 20


def test_shards_that_differ_only_in_metadata_read_as_one(tmp_path: Path) -> None:
    a = _parquet(tmp_path / "a.parquet", TABLE.slice(0, 20))
    b = _parquet(tmp_path / "b.parquet", TABLE.slice(20).replace_schema_metadata({"k": "v"}))
    empty = _parquet(tmp_path / "a2.parquet", TABLE.slice(0, 0))  # a shard of no rows
    _check(Table.open([a, empty, b]), TABLE)


def test_shards_that_differ_only_in_columns_not_read_read_as_one(tmp_path: Path) -> None:
    # A column that holds only nulls in a shard is typed null there (pandas, pyarrow
    # infer it so); one left out with columns=[...] no longer refuses the table.
    a = _parquet(tmp_path / "a.parquet", TABLE.slice(0, 20))
    notes = pa.array([None] * (N - 20), pa.null())
    b = _parquet(tmp_path / "b.parquet", TABLE.slice(20).set_column(2, "h", notes))
    names = [c for c in TABLE.column_names if c != "h"]
    _check(Table.open([a, b], columns=names), TABLE.select(names))
    with pytest.raises(
        FormatError,
        match=r"b\.parquet: schema differs .*\(column 'h' is null here, .*leaves the others out",
    ):
        Table.open([a, b])
    with pytest.raises(FormatError, match=r"b\.parquet: schema differs .*column 'h' is null"):
        Table.open([a, b], columns=["id", "h"])


def test_a_column_added_in_later_files_is_read_around_or_refused_naming_them(
    tmp_path: Path,
) -> None:
    # Schema evolution (Spark's mergeSchema): files written after a column was added.
    a = _parquet(tmp_path / "a.parquet", TABLE.slice(0, 20))
    later = TABLE.slice(20).append_column("added", pa.array(np.zeros(N - 20)))
    b = _parquet(tmp_path / "b.parquet", later)
    c = _parquet(tmp_path / "c.parquet", later.slice(0, 3))
    _check(Table.open([a, b], columns=["id", "tok"]), TABLE.select(["id", "tok"]))
    with pytest.raises(
        FormatError,
        match=r"b\.parquet: has column 'added', which .*a\.parquet does not \(2 of 3 files",
    ):
        Table.open([a, b, c], columns=["id", "added"])
    with pytest.raises(ConfigError, match=r"no column\(s\) \['nope'\]; available: \['id'"):
        Table.open([a, b], columns=["nope"])


def test_a_table_source_refuses_null_numbers_and_strings_of_parquet_at_open(
    tmp_path: Path,
) -> None:
    # Parquet statistics count a flat column's nulls per row group: a null label or text
    # is refused when the source is made, naming its row (only a row group that has
    # nulls is decoded), not when an epoch reaches it, hours in.
    n = 1000
    t = pa.table(
        {
            "label": pa.array([None if i == 613 else i for i in range(n)], pa.int64()),
            "text": pa.array([None if i == 901 else f"r{i}" for i in range(n)]),
            "ids": pa.array([[] if i % 3 else [i] for i in range(n)], pa.list_(pa.int32())),
        }
    )
    a = _parquet(tmp_path / "a.parquet", TABLE.select(["id"]).rename_columns(["label"]))
    b = _parquet(tmp_path / "b.parquet", t.select(["label"]), row_group_size=100)
    with pytest.raises(FormatError, match=r"b\.parquet: column 'label': row 653 is null"):
        TableSource([a, b], columns=["label"])  # the table's row: 40 rows of a.parquet first
    p = _parquet(tmp_path / "n.parquet", t, row_group_size=100)
    with pytest.raises(FormatError, match=r"n\.parquet: column 'text': row 901 is null"):
        TableSource(p, columns=["text"], width=8)
    # Empty lists count as nulls in the statistics of a list's values: not refused, and
    # nothing is decoded to find that out (a list's null rows are refused when read).
    src = TableSource(p, columns=["ids"], width=4)
    assert src.table.decoded == 0
    assert TableSource(a, columns=["label"]).table.decoded == 0


def test_corrupt_list_offsets_in_a_mapped_arrow_file_name_the_row(tmp_path: Path) -> None:
    # A local Arrow file is read through zero-copy views, unchecked by pyarrow: offsets
    # garbled on disk (past the values, or going back) gave a NumPy ValueError naming
    # nothing, or rows cut from the wrong values.
    t = pa.table({"ids": pa.array([[7, 8, 9]] * 20, pa.list_(pa.int32())), "s": ["abc"] * 20})
    clean = _arrow(tmp_path / "clean.arrow", t, stream=True).read_bytes()
    offsets = np.arange(0, 22, 3, dtype=np.int32).tobytes()  # batch 0's list offsets
    at = clean.index(offsets)
    for name, where, value, found in [
        ("past.arrow", 7, 10**6, r"row 6 spans items \[18, 1000000\) of 21"),
        ("back.arrow", 2, 1, r"row 1 spans items \[3, 1\) of 21"),
        # Silently wrong before: a negative start indexed the items from their end.
        ("negative.arrow", 0, 2**32 - 3, r"row 0 spans items \[-3, 3\) of 21"),
    ]:
        body = bytearray(clean)
        body[at + 4 * where : at + 4 * where + 4] = value.to_bytes(4, "little")
        (tmp_path / name).write_bytes(bytes(body))
        tb = Table.open(tmp_path / name)
        with pytest.raises(FormatError, match=rf"{name}: column 'ids': {found}: corrupt"):
            tb.read_rows(np.arange(7), ["ids"])
        assert tb.read_rows(np.arange(7), ["s"])["s"].values.size == 21  # other columns read
