"""Parquet read through the object-store path (``file://`` URLs: obstore's local store).

The S3 endpoint tests are in tests/integration/test_tables_s3.py; these cover
the range logic everywhere: the bytes pyarrow asks for outside the fetched
column chunks, the merge of chunk ranges, and option checks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import ConfigError
from headrace.formats import Table, TableSource
from headrace.formats._table_remote import GAP, RemoteParquet, _Spans
from headrace.pipeline import Loader
from headrace.testing import batch_digest


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pq")
    rng = np.random.default_rng(0)
    for i in range(2):
        ids = [rng.integers(0, 1000, rng.integers(1, 40)).astype(np.int64) for _ in range(1500)]
        t = pa.table(
            {
                "ids": pa.array(ids, pa.list_(pa.int64())),
                "n": np.arange(1500) + 1500 * i,
                "pad": [b"x" * 900] * 1500,  # between n and later columns: a gap to merge over
                "w": rng.random(1500),
            }
        )
        pq.write_table(t, root / f"p{i}.parquet", row_group_size=300, compression="none")
    return root


def test_file_urls_give_the_local_batches(data: Path) -> None:
    kw = {"columns": ["ids", "n", "w"], "width": 40, "window_rows": 900}
    local = batch_digest(Loader(TableSource(data, **kw), batch_size=16, seed=1, steps=250))
    src = TableSource(f"file://{data}", **kw)
    assert batch_digest(Loader(src, batch_size=16, seed=1, steps=250)) == local
    assert src.table.remote and src.table.misses == 0
    assert src.fingerprint() == TableSource(data, **kw).fingerprint()
    src.close()


def test_chunk_ranges_skip_unread_columns_and_merge_close_ones(data: Path) -> None:
    t = Table.open(f"file://{data}/p0.parquet")
    part = t._parts[0]
    assert isinstance(part, RemoteParquet)
    md = pq.ParquetFile(data / "p0.parquet").metadata.row_group(2)
    cols = {md.column(j).path_in_schema.split(".")[0]: md.column(j) for j in range(md.num_columns)}

    def chunk(name: str) -> tuple[int, int]:
        c = cols[name]
        start = c.dictionary_page_offset or c.data_page_offset
        return start, start + c.total_compressed_size

    # ids and n are neighbours: one range; w lies past pad (270 KB < GAP): merged too.
    assert chunk("pad")[1] - chunk("pad")[0] < GAP
    assert part._ranges(2, frozenset({"ids", "n"})) == [
        (chunk("ids")[0], chunk("n")[1] - chunk("ids")[0])
    ]
    assert part._ranges(2, frozenset({"n", "w"})) == [
        (chunk("n")[0], chunk("w")[1] - chunk("n")[0])
    ]
    assert part._ranges(2, frozenset({"w"})) == [(chunk("w")[0], chunk("w")[1] - chunk("w")[0])]
    t.close()


@pytest.mark.parametrize(
    ("pos", "n"), [(0, 10), (5, 20), (28, 10), (40, 30), (95, 10), (0, 100), (99, 1), (100, 5)]
)
def test_spans_serve_reads_across_spans_and_fetch_the_gaps(pos: int, n: int) -> None:
    whole = np.arange(100, dtype=np.uint8)
    missed: list[tuple[int, int]] = []

    def miss(offset: int, length: int) -> np.ndarray:
        missed.append((offset, length))
        return whole[offset : offset + length].copy()

    spans = [(10, whole[10:30].copy()), (50, whole[50:60].copy()), (60, whole[60:90].copy())]
    f = _Spans("x", 100, spans, miss)
    assert f.seek(pos) == pos
    got = bytes(f.read(n))
    assert got == whole[pos : pos + n].tobytes()
    assert f.tell() == min(100, pos + n)
    covered = set(range(10, 30)) | set(range(50, 90))
    want_missing = set(range(pos, min(100, pos + n))) - covered
    assert {i for o, k in missed for i in range(o, o + k)} == want_missing
    assert f.seek(-4, 2) == 96 and bytes(f.read()) == whole[96:].tobytes()


def test_a_read_outside_the_fetched_chunks_is_one_more_get(data: Path) -> None:
    t = Table.open(f"file://{data}/p0.parquet", columns=["n"])
    part = t._parts[0]
    assert isinstance(part, RemoteParquet)
    fetched = part.fetch(1, frozenset({"n"}))
    offset, buf = fetched.spans[0]
    fetched.spans[0] = (offset, buf[: buf.size // 2])  # as if the writer's size were short
    batch = part.span(1, ["n"], fetched)
    assert batch.column("n").to_pylist()[:2] == [300, 301]
    assert part.misses == 1
    t.close()


def test_options_are_checked(data: Path) -> None:
    with pytest.raises(ConfigError, match="store_options apply to object-store URLs only"):
        Table.open(data, store_options={"region": "x"})
    with pytest.raises(ConfigError, match=r"in_flight must be an integer >= 1"):
        Table.open(f"file://{data}", in_flight=0)
    with pytest.raises(ConfigError, match=r"in_flight must be an integer >= 1 \(got True\)"):
        Table.open(f"file://{data}", in_flight=True)
    with pytest.raises(ConfigError, match=r"unknown store_options \['bogus'\]"):
        Table.open(f"file://{data}", store_options={"bogus": 1})


def test_the_stores_that_list_a_table_go_on_to_read_it(data: Path) -> None:
    t = Table.open(f"file://{data}")
    stats = t.object_stats
    assert stats is not None and stats.requests == 1 + 2  # the LIST, then 2 footers
    t.close()
    t = Table.open([f"file://{data}/p{i}.parquet" for i in range(2)])
    assert t.object_stats is not None and t.object_stats.requests == 2 + 2  # HEADs, footers
    t.close()


def test_a_presigned_http_url_is_refused_as_tokens_and_files_refuse_it() -> None:
    # Before: its '?' made it a glob, listed by a PROPFIND (retried for 10 s against a
    # server that cannot list); tokens and files refused it at once, naming the fix.
    url = "http://127.0.0.1:9/d/x.parquet?X-Amz-Signature=abc"
    with pytest.raises(ConfigError, match=r"x\.parquet\?X-Amz-Signature=abc: an http\(s\) URL "):
        TableSource(url)
