"""Every column type a Hugging Face dataset holds, written by pyarrow into Parquet and
Arrow IPC files of uneven row groups / record batches, read by a TableSource under every
shuffle mode and batch size: the values are pyarrow's own reading of the same rows, or
the column is refused by name."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from _table_battery import (
    CHUNKS,
    KINDS,
    REFUSED,
    WIDTH,
    N,
    assert_same,
    boundary_rows,
    check_source,
    empty_items_table,
    encoded_table,
    expected,
    fixed_list_file,
    full_table,
    read_names,
    read_reference,
    refused_rows,
    with_nulls,
    with_views,
    write,
    write_parquet,
)
from headrace.errors import ConfigError, FormatError
from headrace.formats import TableSource
from headrace.pipeline import Loader

TABLE = full_table()
NAMES = read_names(TABLE)


@pytest.fixture(scope="module")
def battery(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("battery")
    out = {}
    for kind in KINDS:
        out[kind] = write(kind, root / f"full-{kind}", TABLE)
        # A slice of a slice: buffers and offsets that do not start at 0 when written.
        out[f"{kind}-sliced"] = write(
            kind, root / f"sliced-{kind}", TABLE.slice(11, 200), (50, 150)
        )
    return out


@pytest.mark.parametrize("variant", ["", "-sliced"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_column_type_reads_as_pyarrow_reads_it(
    battery: dict[str, Path], kind: str, variant: str
) -> None:
    path = battery[kind + variant]
    ref = read_reference(path)
    assert check_source(path, ref, NAMES) > ref.num_rows


@pytest.mark.parametrize("kind", KINDS)
def test_chunks_of_empty_strings_and_lists_read_as_pyarrow_reads_them(
    kind: str, tmp_path: Path
) -> None:
    t = empty_items_table()
    path = write(kind, tmp_path / "e", t)
    check_source(path, read_reference(path), t.column_names)


@pytest.mark.parametrize("kind", KINDS)
def test_a_pickled_source_reads_as_pyarrow_reads_it(battery: dict[str, Path], kind: str) -> None:
    path = battery[kind]
    check_source(path, read_reference(path), NAMES, pickled=True, seeds=(5,))


@pytest.mark.parametrize("kind", KINDS)
def test_an_empty_table_is_refused_and_an_empty_file_beside_others_is_read_around(
    kind: str, tmp_path: Path
) -> None:
    empty = write(kind, tmp_path / "a-empty", TABLE.slice(0, 0), ())
    with pytest.raises(FormatError, match=r"a-empty\.\w+: empty dataset: 1 file\(s\), 0 rows"):
        TableSource(empty, columns=["i64"])
    full = write(kind, tmp_path / "b-full", TABLE)
    check_source([empty, full], read_reference(full), NAMES)


def _per_chunk_dictionaries(table: pa.Table, chunks: tuple[int, ...]) -> pa.Table:
    """``cat`` dictionary-encoded per chunk: each record batch / row group has its own
    dictionary, in another order (the codes mean other strings in each)."""
    parts = []
    at = 0
    for i, n in enumerate(chunks):
        values = pa.array([f"c{(j * (i + 2)) % 5}" for j in range(at, at + n)], pa.string())
        parts.append(values.dictionary_encode())
        at += n
    return table.set_column(
        table.schema.get_field_index("cat"), "cat", pa.chunked_array(parts, parts[0].type)
    )


@pytest.mark.parametrize("kind", ["parquet", "stream"])
def test_a_dictionary_that_changes_between_chunks_reads_each_chunks_values(
    kind: str, tmp_path: Path
) -> None:
    # The IPC file format allows one dictionary per column (pyarrow refuses to write
    # others); a stream replaces it between record batches, Parquet has one per row group.
    t = _per_chunk_dictionaries(TABLE, CHUNKS)
    path = write(kind, tmp_path / "d", t)
    ref = read_reference(path)
    assert ref.column("cat").to_pylist() == t.column("cat").to_pylist()
    check_source(path, ref, ["cat", "i32"])


@pytest.mark.parametrize("kind", KINDS)
def test_string_and_binary_views_read_as_their_values(kind: str, tmp_path: Path) -> None:
    # polars' IPC files hold strings as views (refused until 2026-12-04); in a Parquet
    # file they are strings. Beside a shard of plain strings, too: the same values.
    t = with_views(TABLE.select(["i64", "text", "blob"]))
    path = write(kind, tmp_path / "v", t)
    names = ["i64", "text_view", "blob_view"]
    check_source(path, read_reference(path), names)
    src = TableSource(str(path), columns=names, width=24, shuffle="none")
    got = src.read(0, np.arange(len(t), dtype=np.int64))
    assert got["text_view"].tobytes() == expected(t, "text", np.arange(len(t)))["text"].tobytes()
    src.close()
    plain = t.set_column(3, "text_view", t.column("text")).set_column(4, "blob_view", t["blob"])
    other = write(kind, tmp_path / "p", plain)
    check_source([path, other], pa.concat_tables([t, t]), names, shuffles=("full",))


@pytest.mark.parametrize("kind", KINDS)
def test_fixed_size_binary_reads_as_bytes_and_is_no_token_column(kind: str, tmp_path: Path) -> None:
    # fixed_size_binary[16] (a hash, an id) was refused until 2026-12-04; now (B, 16)
    # uint8, in the battery's every check. Its bytes are no token ids: a vocab_size for
    # every integer-list column leaves it alone, and naming it is refused.
    t = TABLE.select(["i64", "digest", "ids"])
    path = write(kind, tmp_path / "d", t)
    src = TableSource(str(path), width=24, shuffle="none", vocab_size=50_000)
    got = src.read(0, np.arange(len(t), dtype=np.int64))
    assert got["digest"].dtype == np.uint8 and got["digest"].shape == (len(t), 16)
    assert [bytes(r) for r in got["digest"]] == t.column("digest").to_pylist()
    assert list(src.vocab) == ["ids"]
    src.close()
    with pytest.raises(ConfigError, match=r"vocab_size names column\(s\) \['digest'\]"):
        TableSource(str(path), width=24, vocab_size={"digest": 256})


@pytest.mark.parametrize("kind", ["arrow", "stream"])
def test_dictionary_encoded_lists_and_fixed_bytes_read_as_their_values(
    kind: str, tmp_path: Path
) -> None:
    # Arrow IPC holds lists, fixed-size lists and fixed-size binary dictionary-encoded
    # (Parquet does not). Until 2026-12-06 making the source raised AttributeError
    # (the null item check took the dictionary for its lists), and fixed-size binary
    # was taken for a fixed-size list; images= took a dictionary of strings for bytes.
    t = encoded_table()
    path = write(kind, tmp_path / "e", t)
    ref = read_reference(path)
    assert check_source(path, ref, t.column_names) > len(t)
    src = TableSource(str(path), width=WIDTH, shuffle="none", vocab_size=50_000)
    assert list(src.vocab) == ["ids_cat"]  # a digest's bytes are no token ids
    src.close()
    words = write(kind, tmp_path / "w", pa.table({"cat": TABLE.column("cat")}))
    with pytest.raises(ConfigError, match=r"images names column 'cat' of type dictionary"):
        TableSource(str(words), images=["cat"])


@pytest.mark.parametrize("kind", ["arrow", "stream"])
def test_a_dictionary_entry_of_null_items_is_refused_by_the_rows_naming_it(
    kind: str, tmp_path: Path
) -> None:
    # The rows that name it, as a plain list column's (an entry no row names is harmless).
    path = write(kind, tmp_path / "n", encoded_table(null_item_at=77))
    with pytest.raises(
        FormatError, match=r"column 'ids_cat': 1 row\(s\) hold null list items: rows 77;"
    ):
        TableSource(str(path), columns=["ids_cat"], width=WIDTH)


@pytest.mark.parametrize("kind", KINDS)
def test_a_field_of_a_struct_whose_name_begins_as_another_column_is_read(
    kind: str, tmp_path: Path
) -> None:
    # Columns 'a' (int64) and 'a.b' (a struct): 'a.b.c' was taken for a field of 'a'
    # and refused ("'a' is int64, not a struct") until 2026-12-06.
    t = pa.table(
        {"a": pa.array(range(N)), "a.b": pa.array([{"c": 100 + i, "d": -i} for i in range(N)])}
    )
    path = write(kind, tmp_path / "p", t)
    src = TableSource(str(path), columns=["a", "a.b.c"], shuffle="none")
    got = src.read(0, np.arange(N, dtype=np.int64))
    assert got["a"].tolist() == list(range(N))
    assert got["a.b.c"].tolist() == [100 + i for i in range(N)]
    src.close()
    with pytest.raises(ConfigError, match=r"struct 'a\.b' has no field 'e'; its fields: "):
        TableSource(str(path), columns=["a.b.e"])


@pytest.mark.parametrize("kind", KINDS)
def test_files_whose_columns_are_in_another_order_read_by_name(kind: str, tmp_path: Path) -> None:
    a = write(kind, tmp_path / "a", TABLE.slice(0, 100), (30, 70))
    names = TABLE.column_names
    b = write(kind, tmp_path / "b", TABLE.slice(100).select(names[::-1]), (57, 100))
    check_source([a, b], TABLE, NAMES)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("column", "other"),
    [("i32", pa.int64()), ("f32", pa.float64()), ("u8", pa.int8()), ("ids", pa.list_(pa.int64()))],
)
def test_files_whose_column_types_differ_are_refused_by_name(
    kind: str, column: str, other: pa.DataType, tmp_path: Path
) -> None:
    a = write(kind, tmp_path / "a", TABLE.slice(0, 100), (100,))
    rest = TABLE.slice(100)
    i = rest.schema.get_field_index(column)
    rest = rest.set_column(i, column, rest.column(column).cast(other, safe=False))
    b = write(kind, tmp_path / "b", rest, (157,))
    with pytest.raises(
        FormatError,
        match=rf"b\.\w+: schema differs .*column {column!r} is .*with one type in every "
        r"file \(pyarrow's table\.cast, datasets' ds\.cast_column\)",
    ):
        TableSource([str(a), str(b)], columns=[column], width=24)
    check_source([a, b], TABLE, ["i64", "text"])  # the others still read


@pytest.mark.parametrize("stream", [False, True], ids=["file", "stream"])
def test_dictionary_deltas_of_arrow_ipc_read_as_pyarrow_reads_them(
    stream: bool, tmp_path: Path
) -> None:
    words = pa.array([f"w{i}" for i in range(12)])
    batches = [
        pa.record_batch(
            {
                "cat": pa.DictionaryArray.from_arrays(
                    pa.array((np.arange(n) * 7 + k) % (4 * (k + 1)), pa.int32()),
                    words[: 4 * (k + 1)],  # each batch's dictionary extends the last one's
                ),
                "i": pa.array(np.arange(n)),
            }
        )
        for k, n in enumerate([5, 9, 4])
    ]
    path = tmp_path / "delta.arrow"
    options = ipc.IpcWriteOptions(emit_dictionary_deltas=True)
    with (ipc.new_stream if stream else ipc.new_file)(
        path, batches[0].schema, options=options
    ) as w:
        for b in batches:
            w.write_batch(b)
    check_source(path, read_reference(path), ["cat", "i"])


NULLABLE = [
    "i8",
    "u64",
    "f16",
    "flag",
    "text",
    "large_blob",
    "ids",
    "large_ids",
    "vec",
    "digest",
    "cat",
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("column", NULLABLE)
def test_null_rows_at_chunk_boundaries_are_refused_naming_them(
    kind: str, column: str, tmp_path: Path
) -> None:
    rows = boundary_rows(len(TABLE))
    t = with_nulls(TABLE, column, rows)
    path = write(kind, tmp_path / "n", t)
    named = ", ".join(map(str, rows))
    if kind == "parquet" and column in ("ids", "large_ids", "vec"):
        # A list's null rows are not counted in Parquet statistics: refused as read.
        src = TableSource(path, columns=[column, "i64"], width=24, shuffle=False)
        for r in rows:
            named_r = rf"(row {r} is null|rows are null .*: rows (\d+, )*{r}\b)"
            with pytest.raises(FormatError, match=rf"column {column!r}: .*{named_r}"):
                src.read(0, np.array([r], np.int64))
        src.close()
    else:
        with pytest.raises(
            FormatError, match=rf"column {column!r}: {len(rows)} rows are null: rows {named};"
        ):
            TableSource(path, columns=[column, "i64"], width=24)
    check_source(path, read_reference(path), ["i64", "text" if column != "text" else "blob"])


@pytest.mark.parametrize(
    ("kind", "case"),
    [(k, c) for k in KINDS for c in REFUSED],
)
def test_types_headrace_cannot_convert_are_refused_by_name(
    kind: str, case: str, tmp_path: Path
) -> None:
    t = pa.table({"i64": TABLE.column("i64"), "c": REFUSED[case]})
    path = write(kind, tmp_path / "r", t)
    typ = re.escape(str(read_reference(path).schema.field("c").type))
    said = rf"has type {typ}, which headrace cannot"
    if case == "list-list":  # ragged: told how to give a shape where rows have one
        said = rf"holds lists of lists \({typ}\), whose shape the schema does not give"
    with pytest.raises(FormatError, match=rf"r\.\w+: column 'c' {said}"):
        TableSource(path, columns=["c", "i64"], width=24)
    check_source(path, read_reference(path), ["i64"], seeds=(0,))  # left out, the rest reads


@pytest.mark.parametrize("column", ["i32", "f32", "flag", "text", "ids", "digest", "cat", "st.a"])
def test_null_rows_of_parquet_without_statistics_are_refused_each_as_read(
    column: str, tmp_path: Path
) -> None:
    # No statistics: nothing to refuse them by at open; read, each null row is refused
    # (and no other), never read as a 0 or an empty list.
    nulls = [0, 60, 61, 200]
    t = with_nulls(TABLE, column.split(".")[0], nulls)
    path = write_parquet(tmp_path / "n.parquet", t, write_statistics=False)
    assert refused_rows(path, column) == nulls


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("column", ["ids", "fsl"])
def test_null_list_items_are_refused_by_row(kind: str, column: str, tmp_path: Path) -> None:
    nulls = [0, 40, 41, 99]
    t = pa.table(
        {
            "ids": pa.array(
                [[i, i + 1, None] if i in nulls else [i, i + 1] for i in range(100)],
                pa.list_(pa.int64()),
            ),
            "fsl": pa.array(
                [[float(i), None] if i in nulls else [float(i), 1.0] for i in range(100)],
                pa.list_(pa.float32(), 2),
            ),
        }
    )
    path = write(kind, tmp_path / "n", t, (1, 40, 59))
    if kind == "parquet":  # Parquet statistics do not count them: refused as read
        assert refused_rows(path, column) == nulls
    else:
        with pytest.raises(
            FormatError,
            match=rf"column {column!r}: 4 row\(s\) hold null list items: rows 0, 40, 41, 99;",
        ):
            TableSource(path, columns=[column], width=4)


@pytest.mark.parametrize(
    "options",
    [
        {"data_page_size": 64},
        {"data_page_size": 64, "write_page_index": True, "use_dictionary": False},
        {"data_page_size": 100, "data_page_version": "2.0", "compression": "zstd"},
        {"use_byte_stream_split": ["f16", "f32", "f64"], "use_dictionary": False},
        # As other writers (Spark, Rust) leave them: no Arrow schema stored, so types
        # come from Parquet's own (uint8 as an annotated INT32, large_string as string).
        {"store_schema": False, "version": "1.0"},
        {"store_schema": False, "use_compliant_nested_type": False, "write_statistics": False},
    ],
    ids=[
        "small-pages",
        "page-index-plain",
        "pages-v2-zstd",
        "byte-stream-split",
        "no-arrow-schema-1.0",
        "no-arrow-schema-legacy-lists",
    ],
)
@pytest.mark.parametrize("chunks", [(257,), (1, 256), (128, 129)])
def test_parquet_pages_of_every_column_type_read_as_pyarrow_reads_them(
    options: dict[str, object], chunks: tuple[int, ...], tmp_path: Path
) -> None:
    # Many pages per row group, streamed a sub-window (50 rows) at a time.
    path = write_parquet(tmp_path / "p.parquet", TABLE, chunks, **options)
    check_source(path, read_reference(path), NAMES)


@pytest.mark.parametrize("pad_side", ["left", "right"])
@pytest.mark.parametrize("width", [1, 5])
@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_lists_and_strings_truncated_and_padded_on_either_side(
    battery: dict[str, Path], kind: str, width: int, pad_side: str
) -> None:
    path = battery[kind]
    lists = ["text", "large_blob", "ids", "large_ids", "u16_ids", "f16_list", "cat", "st.b"]
    check_source(
        path,
        read_reference(path),
        lists,
        width=width,
        pad_side=pad_side,
        pad_values={"ids": 7, "u16_ids": 65535},
        truncate=True,
        shuffles=("full",),
    )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shuffle", ["none", "full", "window"])
def test_a_batch_across_epochs_with_rows_repeated_reads_each_row(
    battery: dict[str, Path], kind: str, shuffle: str
) -> None:
    path = battery[kind]
    ref = read_reference(path)
    src = TableSource(path, columns=NAMES, width=WIDTH, shuffle=shuffle, window_rows=50)  # type: ignore[arg-type]
    n = len(src)
    # The end of epoch 0 and the start of epoch 1, then one row asked for 5 times.
    samples = np.r_[np.arange(n - 40, n + 40), [5, 5, 5, n + 5, 3 * n + 7]].astype(np.int64)
    rows = src.starts(9, samples)[1]
    assert len(set(rows.tolist())) < len(rows)
    got = src.read(9, samples)
    for c in NAMES:
        for key, want in expected(ref, c, rows).items():
            assert_same(got[key], want, f"{shuffle} {key}")
    src.close()


@pytest.mark.parametrize("host_order", ["plan", "address"])
@pytest.mark.parametrize("shuffle", ["none", "full", "window"])
@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_loader_batches_on_every_host_hold_the_rows_they_name(
    kind: str, shuffle: str, host_order: str, tmp_path: Path
) -> None:
    # A column of row numbers says which rows each batch holds, whatever the order a
    # host reads its share in: every other column is pyarrow's reading of those rows.
    t = TABLE.append_column("row", pa.array(np.arange(len(TABLE), dtype=np.int64)))
    path = write(kind, tmp_path / "t", t)
    ref = read_reference(path)
    names = [*NAMES, "row"]
    seen = []
    for rank in range(3):
        src = TableSource(path, columns=names, width=WIDTH, shuffle=shuffle, window_rows=50)  # type: ignore[arg-type]
        loader = Loader(
            src,
            batch_size=33,
            seed=4,
            rank=rank,
            world_size=3,
            host_order=host_order,
            steps=7,  # type: ignore[arg-type]
        )
        with loader:
            for batch in loader:
                rows = batch["row"]
                for c in names:
                    for key, want in expected(ref, c, rows).items():
                        assert_same(np.asarray(batch[key]), want, f"rank {rank} {key}")
                seen.extend(rows.tolist())
    assert len(seen) == 7 * 33 == len(set(seen))  # within one epoch: each row once


@pytest.mark.parametrize("size", [-7, -1])
@pytest.mark.parametrize("kind", KINDS)
def test_a_fixed_size_list_of_a_negative_size_is_a_corrupt_schema(
    kind: str, size: int, tmp_path: Path
) -> None:
    # A damaged schema that pyarrow opens as it is written: -7 failed with pyarrow's own
    # ValueError ("list_size should be a positive integer") where the shards' types were
    # compared, and -1, a plain list there, was refused only when a batch was read.
    path = fixed_list_file(kind, tmp_path / "t", size)
    with pytest.raises(
        FormatError,
        match=rf"t\.(parquet|arrow): corrupt schema: field 'emb' is a fixed-size list of "
        rf"{size} items; the file is damaged",
    ):
        TableSource(path)
