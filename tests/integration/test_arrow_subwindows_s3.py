"""An Arrow IPC record batch larger than ``window_rows`` on S3 (moto on 127.0.0.1): each
sub-window fetches only its rows' bytes (validity bits, offsets, the values they name),
with the local file's batches; a compressed body is fetched whole; a GET that fails
mid-batch is named, with nothing lost after it."""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import FormatError, TransientStorageError
from headrace.formats import Ragged, TableSource
from headrace.formats._arrow_remote import RemoteArrow
from headrace.formats._arrow_slice import SubFetch, piece
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

pytestmark = pytest.mark.integration

ROWS = 12_000  # one record batch, 12 sub-windows of 1,000
KW: dict[str, Any] = {
    "columns": ["tok", "label", "score", "text"],
    "width": 56,
    "shuffle": "window",
    "window_rows": 1_000,
}


def _table(rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 33, rows)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    tok = pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(rng.integers(0, 50_000, int(offsets[-1])).astype(np.int32))
    )
    score = pa.array(rng.random(rows).astype(np.float32))
    maybe = pa.array(rng.random(rows), mask=rng.random(rows) < 0.1)  # read by piece() only
    flags = pa.array(rng.random(rows) < 0.5, mask=rng.random(rows) < 0.2)
    nested = pa.array(
        [None if k % 11 == 0 else [[k, k + 1], None, list(range(k % 5))] for k in range(rows)],
        pa.list_(pa.list_(pa.int32())),
    )
    pairs = pa.StructArray.from_arrays(
        [pa.array(np.arange(rows, dtype=np.int16)), pa.array([f"s{k}" for k in range(rows)])],
        names=["a", "b"],
        mask=pa.array(np.arange(rows) % 7 == 3),
    )
    fixed = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(3 * rows, dtype=np.int64)), 3)
    text = pa.array([f"row {k} " + "y" * (k % 40) for k in range(rows)])
    note = pa.array([None if k % 13 == 5 else f"n{k}" for k in range(rows)])
    return pa.table(
        {
            "tok": tok,
            "label": np.arange(rows, dtype=np.int64) + 1_000 * seed,
            "score": score,
            "text": text,
            "maybe": maybe,
            "note": note,
            "flags": flags,
            "nested": nested,
            "pairs": pairs,
            "fixed": fixed,
            "empty": pa.nulls(rows),
        }
    )


def _write(table: pa.Table, path: Path, *, stream: bool, compression: str | None = None) -> None:
    opts = pa.ipc.IpcWriteOptions(compression=compression)
    new = pa.ipc.new_stream if stream else pa.ipc.new_file
    with pa.OSFile(str(path), "wb") as sink, new(sink, table.schema, options=opts) as w:
        w.write_table(table, max_chunksize=len(table))  # ONE record batch: pandas' layout


def _put(s3: S3Fixture, key: str, path: Path) -> str:
    s3.server.info.boto3_client().put_object(
        Bucket=BUCKET, Key=f"arrowsub/{key}", Body=path.read_bytes()
    )
    return f"s3://{BUCKET}/arrowsub/{key}"


@pytest.fixture(scope="module")
def files(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """Local path and S3 URL of: an IPC file, an IPC stream of a sliced table (offsets
    that do not start at 0 before the writer rebases them), a zstd-compressed file."""
    root = tmp_path_factory.mktemp("arrowsub")
    out = {}
    cases = {
        "one.arrow": (_table(ROWS, 1), False, None),
        "sliced.arrows": (_table(ROWS + 537, 2).slice(537), True, None),
        "zstd.arrow": (_table(ROWS, 3), False, "zstd"),
    }
    for name, (table, stream, comp) in cases.items():
        path = root / name
        _write(table, path, stream=stream, compression=comp)
        out[name] = (path, _put(s3, name, path))
    return out


def _same(got: dict[str, Any], want: dict[str, Any]) -> None:
    for c, b in want.items():
        a = got[c]
        if isinstance(b, Ragged):
            assert isinstance(a, Ragged) and np.array_equal(a.offsets, b.offsets)
            a, b = a.values, b.values
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), c


@pytest.mark.parametrize("name", ["one.arrow", "sliced.arrows"])
def test_sub_windows_fetch_their_rows_with_the_local_batches(
    s3: S3Fixture, files: dict[str, tuple[Path, str]], name: str
) -> None:
    path, url = files[name]
    steps = ROWS // 40 + 20  # into the next epoch
    want = batch_digest(Loader(TableSource(path, **KW), batch_size=40, seed=1, steps=steps))
    src = TableSource(url, store_options=options(s3), **KW)
    assert batch_digest(Loader(src, batch_size=40, seed=1, steps=steps)) == want
    table = src.table
    part = table._parts[0]
    assert isinstance(part, RemoteArrow)
    assert table._spans.alone.sum() == ROWS // 1_000
    whole = part.stored_bytes(0)
    stats = table.object_stats
    assert stats is not None
    # Held: one sub-window's spans at least (each is counted whole until built), three at
    # most (a loader chunk of 32 x 40 rows spans two, and one is read ahead), of a
    # 2.4 MB batch; every sub-window fetched once (beside the header walk's 64 KiB GETs).
    # A sub-window's spans are its ranges and the gaps merged between them: 4 ranges in
    # the first round (tok's and text's offsets, label's and score's values), 2 in the
    # second (tok's and text's values), so 3 + 1 gaps of at most 64 KiB (and 7 bytes of
    # each span's start put on the body's 8-byte grid).
    peak, fetched = table.peak_stream_bytes, stats.bytes
    names = frozenset(KW["columns"])
    sizes = []
    for k in range(ROWS // 1_000):
        f = SubFetch(part, 0, k * 1_000, 1_000, names)
        f.batch()
        sizes.append(f._held)
        assert f._wanted <= f._held <= f._wanted + 4 * (64 << 10) + 6 * 7
        assert 3 * f._wanted < whole // 6
    assert max(sizes) <= peak <= 3 * max(sizes)
    assert sum(sizes) < fetched <= sum(sizes) + 2 * max(sizes) + 4 * (64 << 10)
    src.close()
    assert part.held.now == 0  # the next sub-window's read-ahead dropped with the table


@pytest.mark.parametrize("name", ["one.arrow", "sliced.arrows"])
def test_every_column_type_sliced_equals_pyarrow_slice(
    s3: S3Fixture, files: dict[str, tuple[Path, str]], name: str
) -> None:
    """Sub-windows at unaligned rows (validity bits shifted) of every layout, including
    types the table does not gather (bool, list<list>, struct, fixed-size list, null)."""
    path, url = files[name]
    local = pa.ipc.open_file(path) if name.endswith(".arrow") else pa.ipc.open_stream(path)
    whole = local.read_all().combine_chunks().to_batches()[0]
    table = TableSource(url, store_options=options(s3), **KW).table
    part = table._parts[0]
    assert isinstance(part, RemoteArrow)
    names = whole.schema.names
    for first, n in [(0, 1_000), (3, 997), (4_093, 1_000), (ROWS - 5, 5), (17, 1)]:
        got = piece(part, 0, first, n, names)
        assert got.equals(whole.slice(first, n)), (first, n)
    assert part.held.now == 0
    table.close()


def test_resume_mid_batch_is_exact(s3: S3Fixture, files: dict[str, tuple[Path, str]]) -> None:
    url = files["one.arrow"][1]
    assert_resume_exact(
        lambda: Loader(TableSource(url, store_options=options(s3), **KW), batch_size=64, seed=2),
        steps=80,
        resume_at=[9, 41],
    )


def test_a_compressed_batch_is_fetched_whole(
    s3: S3Fixture, files: dict[str, tuple[Path, str]]
) -> None:
    path, url = files["zstd.arrow"]
    want = batch_digest(Loader(TableSource(path, **KW), batch_size=40, seed=1, steps=30))
    src = TableSource(url, store_options=options(s3), **KW)
    assert batch_digest(Loader(src, batch_size=40, seed=1, steps=30)) == want
    assert not src.table._spans.cut.any()  # not sliceable: one span, the whole body
    assert src.table.peak_stream_bytes == 0
    src.close()


def test_corrupt_offsets_are_named(s3: S3Fixture, files: dict[str, tuple[Path, str]]) -> None:
    """Offsets that name bytes past their values buffer: a FormatError naming the object,
    the record batch and the rows, not a crash or a wrong row."""
    url = files["one.arrow"][1]
    table = TableSource(url, store_options=options(s3), **KW).table
    part = table._parts[0]
    assert isinstance(part, RemoteArrow)
    bufs = part.index.buffers[0]
    assert bufs is not None
    bufs[5, 1] = 8  # "text"'s values (buffers: tok 0-3, label 4-5, score 6-7, text 8-10)
    with pytest.raises(FormatError, match=r"one\.arrow: record batch 0: rows \[0, 1000\)"):
        SubFetch(part, 0, 0, 1_000, frozenset(["label"])).batch()
    table.close()


@pytest.mark.parametrize(
    ("cut", "error"),
    [
        ("length", r"field node 2 holds 500 rows; rows \[1000, 2000\) are asked"),
        ("count", r"2 field nodes; a column needs node 2"),
    ],
)
def test_field_nodes_that_do_not_hold_the_rows_are_named(
    s3: S3Fixture, files: dict[str, tuple[Path, str]], cut: str, error: str
) -> None:
    """A record batch whose field nodes say fewer rows (or columns) than the sub-window
    asks of them: a FormatError naming the object, not a read past its buffers."""
    url = files["one.arrow"][1]
    table = TableSource(url, store_options=options(s3), **KW).table
    part = table._parts[0]
    assert isinstance(part, RemoteArrow)
    nodes = part.index.nodes[0]  # tok: nodes 0 (the lists) and 1 (their ids); label: 2
    if cut == "length":
        nodes[2, 0] = 500
    else:
        part.index.nodes[0] = nodes[:2]
    where = r"one\.arrow: record batch 0: rows \[1000, 2000\)"
    with pytest.raises(FormatError, match=rf"{where}: corrupt Arrow IPC data \({error}\)"):
        SubFetch(part, 0, 1_000, 1_000, frozenset(["label"])).batch()
    table.close()


@pytest.mark.parametrize(
    ("kind", "error"), [("status", "HTTP 503"), ("short", r"cut short \(\d+ of \d+ bytes")]
)
def test_a_failed_get_mid_batch_is_named_and_loses_nothing(
    s3: S3Fixture,
    files: dict[str, tuple[Path, str]],
    proxy: LatencyProxy,
    kind: str,
    error: str,
) -> None:
    path, url = files["one.arrow"]
    local = TableSource(path, **KW).table
    table = TableSource(url, store_options=options(s3, proxy.endpoint), **KW).table
    cols = KW["columns"]
    rows = np.arange(0, 100)
    _same(table.read_rows(rows, cols), local.read_rows(rows, cols))
    proxy.set_faults([FaultRule(kind=kind, match="GET /headrace-test/arrowsub/")])  # type: ignore[arg-type]
    rows = np.arange(5_000, 5_100)
    with pytest.raises(TransientStorageError, match=rf"{url}, bytes \[\d+, \d+\): ") as info:
        table.read_rows(rows, cols)
    assert any(
        f"{url}: record batch 0: rows [5000, 6000): fetching its ranges" in n
        for n in info.value.__notes__
    )
    assert re.search(error, str(info.value), re.IGNORECASE), str(info.value)
    assert proxy.stats.faults >= 1
    part = table._parts[0]
    assert isinstance(part, RemoteArrow)
    assert part.held.now == 0  # the failed sub-window's bytes dropped
    proxy.set_faults([])
    _same(table.read_rows(rows, cols), local.read_rows(rows, cols))
    table.close()


def test_a_failed_read_ahead_is_fetched_again_when_needed(
    s3: S3Fixture, files: dict[str, tuple[Path, str]], proxy: LatencyProxy
) -> None:
    path, url = files["one.arrow"]
    whole = pa.ipc.open_file(path).read_all().combine_chunks().to_batches()[0]
    table = TableSource(url, store_options=options(s3, proxy.endpoint), **KW).table
    part = table._parts[0]
    assert isinstance(part, RemoteArrow)
    names = ["tok", "text"]
    proxy.set_faults([FaultRule(kind="status", match="GET /headrace-test/arrowsub/")])
    ahead = SubFetch(part, 0, 2_000, 1_000, frozenset(names))
    ahead.ahead = True
    failed = SubFetch(part, 0, 2_000, 1_000, frozenset(names))  # a batch's own: not retried
    with pytest.raises(TransientStorageError, match=r"HTTP 503"):
        piece(part, 0, 2_000, 1_000, names, failed)
    with ahead._cond:  # the read-ahead's GETs failed (after the store's retries)
        assert ahead._cond.wait_for(lambda: ahead._left == 0, timeout=30)
    assert len(ahead._errors) == len(names)  # a failed span fails every column it serves
    proxy.set_faults([])
    got = piece(part, 0, 2_000, 1_000, names, ahead)
    assert got.equals(whole.slice(2_000, 1_000).select(names))
    assert part.held.now == 0
    table.close()


def test_offsets_past_their_values_in_the_object_are_named(
    s3: S3Fixture, files: dict[str, tuple[Path, str]], tmp_path: Path
) -> None:
    """Real bytes whose string offsets run backwards in a sub-window: a FormatError naming
    the object, the record batch and the rows."""
    path, url = files["one.arrow"]
    table = TableSource(url, store_options=options(s3), **KW).table
    part = table._parts[0]
    assert isinstance(part, RemoteArrow)
    offset, _ = part.index.spans[0]
    bufs = part.index.buffers[0]
    assert bufs is not None
    at = offset + part.index.heads[0] + int(bufs[9, 0]) + 4 * 4_500  # text's offsets, row 4500
    raw = bytearray(path.read_bytes())
    raw[at : at + 4] = (2**31 - 1).to_bytes(4, "little")
    bad = tmp_path / "bad.arrow"
    bad.write_bytes(bytes(raw))
    bad_url = _put(s3, "bad.arrow", bad)
    table.close()
    table = TableSource(bad_url, store_options=options(s3), **KW).table
    rows = np.arange(200)
    assert np.array_equal(table.read_rows(rows, ["label"])["label"], rows + 1_000)
    with pytest.raises(FormatError, match=r"bad\.arrow: record batch 0: rows \[4000, 5000\)"):
        table.read_rows(np.arange(4_000, 4_010), ["text"])
    table.close()


def test_a_pickled_copy_reads_sub_windows(
    s3: S3Fixture, files: dict[str, tuple[Path, str]]
) -> None:
    path, url = files["sliced.arrows"]
    local = TableSource(path, **KW).table
    table = pickle.loads(pickle.dumps(TableSource(url, store_options=options(s3), **KW).table))
    assert table._spans.alone.sum() == ROWS // 1_000
    rows = np.arange(6_500, 7_700)  # two sub-windows
    cols = KW["columns"]
    _same(table.read_rows(rows, cols), local.read_rows(rows, cols))
    table.close()


def _text(a: pa.Array) -> str:
    return str(a.to_string(window=len(a), container_window=len(a)))


def test_a_sub_window_of_many_columns_merges_its_ranges(s3: S3Fixture, tmp_path: Path) -> None:
    """The table audit's 35 columns (strings, lists, fixed-size lists, a struct of a
    string and a list) in one record batch of a 166 KB file: a round's ranges of every
    column lie under 64 KiB apart, so each round is one span, one GET: 2 rounds (offsets
    and values, then the values the offsets name, a struct's children side by side), not
    one GET per range (~100)."""
    from _table_battery import full_table, read_names

    t = full_table(seed=1)
    t = t.cast(
        pa.schema(
            pa.field(f.name, f.type.value_type if pa.types.is_dictionary(f.type) else f.type)
            for f in t.schema
        )
    )
    path = tmp_path / "audit.arrow"
    _write(t, path, stream=False)
    url = _put(s3, "audit.arrow", path)
    whole = pa.ipc.open_file(path).read_all().combine_chunks().to_batches()[0]
    src = TableSource(
        url,
        columns=read_names(t),
        width=24,
        shuffle="window",
        window_rows=50,
        store_options=options(s3),
    )
    table = src.table
    part = table._parts[0]
    assert isinstance(part, RemoteArrow)
    names = t.schema.names
    for first, n in [(50, 50), (3, 61), (250, 7)]:
        stats = table.object_stats
        assert stats is not None
        before = stats.requests
        f = SubFetch(part, 0, first, n, frozenset(names))
        got = piece(part, 0, first, n, names, f)
        after = table.object_stats
        assert after is not None
        want = whole.slice(first, n)
        assert got.schema == want.schema
        for c in names:  # NaNs among the floats: those columns compared as Arrow prints them
            a, b = got.column(c), want.column(c)
            assert a.equals(b) or _text(a) == _text(b), (first, n, c)
        assert after.requests - before == 2, (first, n)
        assert f._wanted < f._held < 2 * path.stat().st_size  # each round a span of the file
    assert part.held.now == 0
    src.close()
