"""The table audit's files (tests/_table_battery.py) on a real S3 endpoint (moto on
127.0.0.1), read through ranged GETs: every column type, under every shuffle mode and
batch size, is pyarrow's own reading of the same rows, as the local files are."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from _table_battery import (
    CHUNKS,
    KINDS,
    REFUSED,
    WIDTH,
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
    write_arrow,
)
from headrace.errors import ConfigError, FormatError
from headrace.formats import TableSource, TokenSource, table_token_files
from headrace.pipeline import Loader

pytestmark = [
    pytest.mark.integration,
    # 5 row groups, a row-group cache of 4: the warning is the point of another test.
    pytest.mark.filterwarnings("ignore:.*a full shuffle of a table on object storage"),
]

Put = Callable[[Path, str], str]
TABLE = full_table(seed=1)
NAMES = read_names(TABLE)


@pytest.fixture(scope="module")
def put(s3: S3Fixture) -> Put:
    """Uploads a local file under ``table-audit/<folder>/`` and returns its URL."""
    client = s3.server.info.boto3_client()

    def put(path: Path, folder: str) -> str:
        key = f"table-audit/{folder}/{path.name}"
        client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
        return f"s3://{BUCKET}/{key}"

    return put


@pytest.mark.parametrize("sliced", [False, True], ids=["whole", "sliced"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_column_type_on_s3_reads_as_pyarrow_reads_it(
    s3: S3Fixture,
    put: Put,
    kind: str,
    sliced: bool,
    tmp_path: Path,
) -> None:
    table = TABLE.slice(11, 200) if sliced else TABLE
    path = write(kind, tmp_path / "t", table, (50, 150) if sliced else CHUNKS)
    url = put(path, f"{kind}-{sliced}")
    ref = read_reference(path)
    assert check_source(url, ref, NAMES, store_options=options(s3)) > ref.num_rows
    check_source(url, ref, NAMES, store_options=options(s3), pickled=True, seeds=(5,))


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
@pytest.mark.parametrize("stream", [False, True], ids=["file", "stream"])
def test_compressed_arrow_ipc_on_s3_reads_as_pyarrow_reads_it(
    s3: S3Fixture, put: Put, stream: bool, compression: str, tmp_path: Path
) -> None:
    # Compressed bodies cannot be cut by rows: each record batch is fetched whole.
    path = write_arrow(tmp_path / "c.arrow", TABLE, stream=stream, compression=compression)
    url = put(path, f"compressed-{compression}-{stream}")
    check_source(url, read_reference(path), NAMES, store_options=options(s3))


@pytest.mark.parametrize("kind", KINDS)
def test_chunks_of_empty_strings_and_lists_on_s3(
    s3: S3Fixture, put: Put, kind: str, tmp_path: Path
) -> None:
    t = empty_items_table()
    path = write(kind, tmp_path / "e", t)
    check_source(put(path, f"empty-{kind}"), t, t.column_names, store_options=options(s3))


@pytest.mark.parametrize("kind", KINDS)
def test_files_of_other_column_orders_and_offset_widths_on_s3(
    s3: S3Fixture,
    put: Put,
    kind: str,
    tmp_path: Path,
) -> None:
    a = write(kind, tmp_path / "a", TABLE.slice(0, 100), (30, 70))
    rest = TABLE.slice(100)
    large = {
        pa.string(): pa.large_string(),
        pa.binary(): pa.large_binary(),
        pa.list_(pa.int32()): pa.large_list(pa.int32()),
    }
    rest = rest.cast(pa.schema([pa.field(f.name, large.get(f.type, f.type)) for f in rest.schema]))
    b = write(kind, tmp_path / "b", rest.select(rest.column_names[::-1]), (57, 100))
    urls = [put(a, f"order-{kind}"), put(b, f"order-{kind}")]
    check_source(urls, TABLE, NAMES, store_options=options(s3))
    i32 = rest.set_column(
        rest.schema.get_field_index("i32"), "i32", rest.column("i32").cast("int64")
    )
    c = write(kind, tmp_path / "c", i32, (157,))
    url = put(c, f"order-{kind}")
    with pytest.raises(FormatError, match=r"c\.\w+: schema differs .*column 'i32' is int64 here"):
        TableSource([urls[0], url], columns=["i32"], store_options=options(s3))


def _dictionary_stream(path: Path, delta: bool, nulls: bool = False) -> tuple[Path, pa.Table]:
    """An IPC stream of 3 record batches whose ``cat`` dictionary changes at each: a
    replacement (each batch's codes mean other strings) or, with ``delta``, extended
    (the later batches' codes reach into the values added); ``nulls``: rows 1, 7, 10
    null."""
    values = [["c1", "c3", "c0", "c1"], ["c2", "c0", "c2", "c1"], ["c3", "c1", "c2", "c3"]]
    if nulls:
        values[0][1] = values[1][3] = values[2][2] = None
    batches = []
    for i, rows in enumerate(values):
        seen = sorted({v for r in (values[: i + 1] if delta else [rows]) for v in r if v})
        order = seen if delta else seen[::-1]
        codes = pa.array([None if v is None else order.index(v) for v in rows], pa.int8())
        cat = pa.DictionaryArray.from_arrays(codes, pa.array(order))
        batches.append(pa.record_batch({"cat": cat, "i": pa.array(range(4 * i, 4 * i + 4))}))
    options = pa.ipc.IpcWriteOptions(emit_dictionary_deltas=delta)
    with pa.ipc.new_stream(path, batches[0].schema, options=options) as w:
        for b in batches:
            w.write_batch(b)
    return path, pa.Table.from_batches(batches)


@pytest.mark.parametrize("stream", [False, True], ids=["file", "stream"])
def test_arrow_ipc_dictionary_columns_on_s3_read_as_local(
    s3: S3Fixture, put: Put, stream: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Read: their indices cut by rows as the rest, their dictionary batches fetched and
    # decoded once a source (refused until 2026-12-04); left out, counted past, the
    # dictionary batches never fetched. test_every_column_type_on_s3_reads_as_pyarrow_
    # reads_it reads them beside every other type.
    from headrace.formats._arrow_remote import RemoteArrow

    decoded = RemoteArrow._decode_dictionaries
    calls: list[int] = []

    def counted(part: RemoteArrow, group: int, which: tuple[int, ...]) -> dict[str, pa.Array]:
        calls.append(group)
        return decoded(part, group, which)

    monkeypatch.setattr(RemoteArrow, "_decode_dictionaries", counted)
    path = write_arrow(tmp_path / "d.arrow", TABLE, stream=stream)
    url = put(path, f"dict-{stream}")
    ref = read_reference(path)
    shuffles = ("none", "window")
    check_source(url, ref, ["i64", "cat", "num_cat"], store_options=options(s3), shuffles=shuffles)
    assert len(calls) == len(shuffles)  # one TableSource each
    rest = [n for n in NAMES if n not in ("cat", "num_cat")]
    check_source(url, ref, rest, store_options=options(s3), shuffles=shuffles)
    assert len(calls) == len(shuffles)


@pytest.mark.parametrize("kind", ["arrow", "stream"])
def test_dictionary_encoded_lists_and_fixed_bytes_on_s3_read_as_local(
    s3: S3Fixture, put: Put, kind: str, tmp_path: Path
) -> None:
    # tests/formats/test_table_audit.py's twin: read as their values (until 2026-12-06
    # pyarrow refused to make the empty batch their dictionaries are decoded behind).
    # An entry of null items is refused by the rows naming it: locally when the source
    # is made, here as they are read (the entry's items are in a dictionary batch, not
    # counted in the record batches' headers; the last column's check looked past them).
    path = write(kind, tmp_path / "e", encoded_table())
    url = put(path, f"encoded-{kind}")
    ref = read_reference(path)
    assert check_source(url, ref, ref.column_names, store_options=options(s3)) > len(ref)
    bad = write(kind, tmp_path / "n", encoded_table(null_item_at=77).select(["i", "ids_cat"]))
    url = put(bad, f"encoded-{kind}")
    assert refused_rows(url, "ids_cat", store_options=options(s3)) == [77]


@pytest.mark.parametrize("delta", [False, True], ids=["replaced", "delta"])
def test_dictionaries_a_stream_on_s3_replaces_or_extends_read_each_batchs_values(
    s3: S3Fixture, put: Put, delta: bool, tmp_path: Path
) -> None:
    path, want = _dictionary_stream(tmp_path / "r.arrows", delta)
    url = put(path, f"dict-changes-{delta}")
    assert read_reference(path).column("cat").to_pylist() == want.column("cat").to_pylist()
    kw = {"columns": ["cat", "i"], "width": WIDTH, "shuffle": "none"}
    src = TableSource(url, store_options=options(s3), **kw)
    got = src.read(0, np.arange(12))
    local = TableSource(str(path), **kw).read(0, np.arange(12))
    for c in ("cat", "i"):
        assert_same(got[c], local[c], c)
    src.close()
    check_source(url, read_reference(path), ["cat", "i"], store_options=options(s3))
    # Null codes: refused as the local file's are, naming the same rows.
    path, _ = _dictionary_stream(tmp_path / "n.arrows", delta, nulls=True)
    url = put(path, f"dict-changes-{delta}")
    for where, more in ((url, {"store_options": options(s3)}), (str(path), {})):
        with pytest.raises(FormatError, match=r"n\.arrows: column 'cat': 3 rows are null: "
                           r"rows 1, 7, 10"):  # fmt: skip
            TableSource(where, **kw, **more)


@pytest.mark.parametrize("stream", [False, True], ids=["file", "stream"])
@pytest.mark.parametrize("whole", [False, True], ids=["sliced", "whole"])
def test_sub_windows_on_s3_skip_columns_of_every_layout_left_out(
    s3: S3Fixture, put: Put, stream: bool, whole: bool, tmp_path: Path
) -> None:
    # The columns read lie after columns of every other layout (temporal, decimal,
    # nested lists, maps, views, nulls, fixed-size binary): their buffers and field
    # nodes are counted past, under the windowed shuffle's 50-row sub-windows of
    # 60- to 100-row record batches. A map or a view makes the record batch be
    # fetched whole (``whole``); the other layouts are cut by rows.
    table = TABLE
    left_out = {k: v for k, v in REFUSED.items() if whole or k != "map"}
    if whole:  # views too (read, in test_views_on_s3_read_whole_record_batches)
        left_out |= {"view": pa.array([str(i) for i in range(len(TABLE))], pa.string_view())}
    for i, (name, column) in enumerate(left_out.items()):
        table = table.add_column(i, f"x-{name}", column)
    path = write_arrow(tmp_path / "x.arrow", table, stream=stream)
    url = put(path, f"layouts-{stream}-{whole}")
    check_source(url, read_reference(path), NAMES, store_options=options(s3))


@pytest.mark.parametrize("stream", [False, True], ids=["file", "stream"])
def test_views_on_s3_read_whole_record_batches(
    s3: S3Fixture, put: Put, stream: bool, tmp_path: Path
) -> None:
    # A record batch holding views (polars' IPC strings) is fetched whole, not cut by
    # rows; its views read as their values.
    t = with_views(TABLE.select(["i64", "text", "blob", "ids"]))
    path = write_arrow(tmp_path / "v.arrow", t, stream=stream)
    url = put(path, f"views-{stream}")
    check_source(url, read_reference(path), ["i64", "text_view", "blob_view", "ids"],
                 store_options=options(s3))  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_every_column_type_on_s3_through_the_disk_cache(
    s3: S3Fixture, put: Put, kind: str, tmp_path: Path
) -> None:
    # Twice: fetched into the cache, then read from it.
    path = write(kind, tmp_path / "t", TABLE)
    url = put(path, f"cached-{kind}")
    ref = read_reference(path)
    for _ in range(2):
        check_source(url, ref, NAMES, store_options=options(s3), cache_dir=tmp_path / "cache")
    assert any((tmp_path / "cache").rglob("*"))


@pytest.mark.parametrize("stream", [False, True], ids=["file", "stream"])
@pytest.mark.parametrize("column", ["ids", "large_ids", "u16_ids"])
def test_packed_token_lists_on_s3_after_columns_of_every_layout(
    s3: S3Fixture, put: Put, stream: bool, column: str, tmp_path: Path
) -> None:
    # Packing finds a column's values by counting the buffers of the columns before it
    # in each record batch header: every layout it can step over lies before it here.
    left_out = {f"x-{k}": v for k, v in REFUSED.items()}
    table = pa.table({**left_out, column: TABLE.column(column), "i64": TABLE.column("i64")})
    path = write_arrow(tmp_path / "p.arrow", table, stream=stream)
    url = put(path, f"packed-{column}-{stream}")
    tokens = pc.list_flatten(read_reference(path).column(column)).to_numpy()
    context = 16
    for where, kw in ((str(path), {}), (url, {"store_options": options(s3)})):
        files = table_token_files(where, column, **kw)  # type: ignore[arg-type]
        assert files[0].num_tokens == tokens.size and files[0].dtype == tokens.dtype
        src = TokenSource(files, context=context, window_bytes=16384, block_bytes=4096, **kw)  # type: ignore[arg-type]
        samples = np.arange(2 * src.samples_per_epoch, dtype=np.int64)
        _, starts = src.starts(0, samples)
        got = src.read(0, samples)
        for i, at in enumerate(starts.tolist()):
            assert np.array_equal(got["x"][i], tokens[at : at + context]), (where, i)
            assert np.array_equal(got["y"][i], tokens[at + 1 : at + context + 1]), (where, i)
        src.close()
    with pytest.raises(ConfigError, match=r"a column before 'ids' has a layout packing cannot"):
        views = pa.table({"v": pa.array(["a"] * len(TABLE), pa.string_view()), "ids": TABLE["ids"]})
        table_token_files(
            put(write_arrow(tmp_path / "v.arrow", views), "packed-views"),
            "ids",
            store_options=options(s3),
        )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("column", ["i8", "f16", "text", "ids", "vec", "st"])
def test_null_rows_at_chunk_boundaries_on_s3_are_refused_by_row(
    s3: S3Fixture, put: Put, kind: str, column: str, tmp_path: Path
) -> None:
    rows = boundary_rows(len(TABLE))
    path = write(kind, tmp_path / "n", with_nulls(TABLE, column, rows))
    url = put(path, f"nulls-{kind}-{column}")
    read = f"{column}.a" if column == "st" else column  # a struct's nulls are its fields'
    try:
        found = refused_rows(url, read, store_options=options(s3))
    except FormatError as exc:  # refused at open, from headers or statistics
        named = ", ".join(map(str, rows))
        assert f"column {read!r}: {len(rows)} rows are null: rows {named};" in str(exc)
    else:  # Parquet statistics do not count a list's nulls: refused as read
        assert kind == "parquet" and column in ("ids", "vec"), found
        assert found == rows


@pytest.mark.parametrize("host_order", ["plan", "address"])
@pytest.mark.parametrize("shuffle", ["none", "full", "window"])
@pytest.mark.parametrize("kind", KINDS)
def test_loader_batches_on_s3_with_read_ahead_hold_the_rows_they_name(
    s3: S3Fixture, put: Put, kind: str, shuffle: str, host_order: str, tmp_path: Path
) -> None:
    # The loader's read-ahead fetches row groups (sub-windows) before their batches:
    # a column of row numbers says which rows each batch holds.
    t = TABLE.append_column("row", pa.array(np.arange(len(TABLE), dtype=np.int64)))
    path = write(kind, tmp_path / "t", t)
    url = put(path, f"loader-{kind}")
    ref = read_reference(path)
    names = [*NAMES, "row"]
    seen = []
    for rank in range(2):
        src = TableSource(
            url,
            columns=names,
            width=WIDTH,
            shuffle=shuffle,  # type: ignore[arg-type]
            window_rows=50,
            store_options=options(s3),
        )
        loader = Loader(
            src,
            batch_size=32,
            seed=2,
            rank=rank,
            world_size=2,
            host_order=host_order,  # type: ignore[arg-type]
            steps=8,
        )
        with loader:
            for batch in loader:
                rows = batch["row"]
                for c in names:
                    for key, want in expected(ref, c, rows).items():
                        assert_same(np.asarray(batch[key]), want, f"rank {rank} {key}")
                seen.extend(rows.tolist())
    assert len(seen) == 8 * 32 == len(set(seen))  # within one epoch: each row once


@pytest.mark.parametrize("kind", KINDS)
def test_a_fixed_size_list_of_a_negative_size_on_s3_is_a_corrupt_schema(
    s3: S3Fixture, put: Put, kind: str, tmp_path: Path
) -> None:
    # The remote readers take the schema from their own ranged reads of the footer or the
    # IPC messages, and check it as the local ones do (ValueError until 2026-12-06).
    url = put(fixed_list_file(kind, tmp_path / "t", -7), f"fixed-{kind}")
    with pytest.raises(
        FormatError, match=rf"{url}: corrupt schema: field 'emb' is a fixed-size list of -7"
    ):
        TableSource(url, store_options=options(s3))
