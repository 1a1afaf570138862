"""A tokenized Parquet table on S3 (moto on 127.0.0.1) read for a bounded run: what the
read-ahead fetches at the run's end, what each of two worker loaders fetches, and what
an object deleted under the run is said to be. Every batch is checked against pyarrow's
reading of the same rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from _bucket import bucket_fixture
from headrace.errors import FormatError, ObjectNotFoundError
from headrace.formats import TableSource, _table_remote
from headrace.io import RetryPolicy
from headrace.pipeline import Loader

BUCKET = "tables-s55"
SHARDS = [("train-0.parquet", 300), ("train-1.parquet", 300), ("train-2.parquet", 180)]
GROUP = 50  # rows a row group: 4 a window
COLUMNS = ["input_ids", "labels"]
KW: dict[str, Any] = {"columns": COLUMNS, "width": 64, "window_rows": 200}
BATCH = 20
EPOCH = sum(rows for _, rows in SHARDS) // BATCH  # 39 steps


def _shard(i: int, rows: int, longest: int = 64) -> pa.Table:
    rng = np.random.default_rng(55 + i)
    lengths = rng.integers(2, longest, rows)
    ids = [rng.integers(0, 32_000, n).astype(np.int32) for n in lengths]
    return pa.table(
        {
            "input_ids": pa.array(ids, pa.list_(pa.int32())),
            "labels": pa.array([a.astype(np.int64) for a in ids], pa.list_(pa.int64())),
            "text": [f"row {i}-{r}" for r in range(rows)],
        }
    )


s3 = bucket_fixture(BUCKET)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    root = tmp_path_factory.mktemp("shards")
    for i, (name, rows) in enumerate(SHARDS):
        pq.write_table(_shard(i, rows), root / name, row_group_size=GROUP)
    return {name: (root / name).read_bytes() for name, _ in SHARDS}


def _upload(s3: Any, files: dict[str, bytes], prefix: str) -> str:
    client = s3.info.boto3_client()
    for name, body in files.items():
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{name}", Body=body)
    return f"s3://{BUCKET}/{prefix}/"


def _source(s3: Any, url: str, **kw: Any) -> TableSource:
    options = {**s3.info.store_options(), "retry": RetryPolicy(attempts=2, base_delay_s=0.01)}
    return TableSource(url, store_options=options, **{**KW, **kw})


Reference = tuple[pa.Table, dict[tuple[int, ...], int]]


def _reference(files: dict[str, bytes]) -> Reference:
    """pyarrow's reading of the shards, in table order, and each row found by its ids."""
    table = pa.concat_tables([pq.read_table(pa.BufferReader(b)) for b in files.values()])
    reference = {tuple(ids): i for i, ids in enumerate(table["input_ids"].to_pylist())}
    assert len(reference) == table.num_rows
    return table, reference


def _rows(batch: dict[str, Any], files: Reference) -> list[int]:
    """The table rows of ``batch``, each checked against pyarrow's reading of it."""
    table, reference = files
    out = []
    for j in range(batch["input_ids"].shape[0]):
        n = int(batch["input_ids_mask"][j].sum())
        row = reference[tuple(batch["input_ids"][j][:n].tolist())]
        assert batch["labels"][j][:n].tolist() == table["labels"][row].as_py()
        assert (batch["labels"][j][n:] == -100).all() and not batch["input_ids"][j][n:].any()
        out.append(row)
    return out


def _chunks(files: dict[str, bytes]) -> tuple[int, int]:
    """The row groups of the shards, and the bytes of their chunks of ``COLUMNS``: what an
    epoch fetches, each row group once (pyarrow's metadata, not headrace's)."""
    groups = total = 0
    for body in files.values():
        md = pq.ParquetFile(pa.BufferReader(body)).metadata
        groups += md.num_row_groups
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            chunks = (rg.column(j) for j in range(rg.num_columns))
            total += sum(
                c.total_compressed_size for c in chunks if c.path_in_schema.split(".")[0] in COLUMNS
            )
    return groups, total


def _opened(src: TableSource) -> tuple[int, int]:
    """The GETs and bytes ``src`` has made (its footers' when just opened)."""
    stats = src.object_stats
    assert stats is not None
    return stats.requests, stats.bytes


def test_a_bounded_epoch_fetches_no_window_past_its_last_step(
    s3: Any, files: dict[str, bytes]
) -> None:
    """The read-ahead fetched the next window from the first step of this one on; at the
    run's last window that was the next epoch's first, which no step reads (here 24 GETs
    for 16 row groups, 1.51x their bytes: windows of 4 groups, and chunks that crossed
    windows fetched some twice)."""
    url = _upload(s3, files, "bounded")
    src = _source(s3, url)
    footers = _opened(src)
    ref = _reference(files)
    with Loader(src, batch_size=BATCH, seed=5, steps=EPOCH) as loader:
        seen = [_rows(b, ref) for b in loader]
    assert sorted(r for step in seen for r in step) == list(range(ref[0].num_rows))
    requests, fetched = (a - b for a, b in zip(_opened(src), footers, strict=True))
    assert (requests, fetched) == _chunks(files)  # each row group's chunks once
    src.close()


@pytest.mark.parametrize(
    ("rows", "group", "batch", "seed"),
    [
        # A worker's chunk (32 of its steps: 64 of the plan's) a window and a bit: the
        # window past the one it crossed into pushed the crossing's fetches out.
        (2000, 500, 32, 3),
        # One crossing three windows: the cache kept the middle one's row groups, not
        # those of the window the next chunk went on in (fetched again).
        (200, 50, 5, 1),
    ],
)
def test_each_worker_loader_fetches_each_row_group_once(
    s3: Any, tmp_path: Path, rows: int, group: int, batch: int, seed: int
) -> None:
    """Two worker loaders (every other step each, as HeadraceDataLoader's and a stock
    DataLoader's workers read) give the one-process batches, each fetching each row group
    once (1.25x before, 2.30x the one-process bytes for the two): its steps draw rows
    from every window, so each pays for the table's columns once (a row group is the
    least a GET of Parquet can fetch), and for nothing past its own last step."""
    files = {}
    for i in range(4):
        path = tmp_path / f"train-{i}.parquet"
        pq.write_table(_shard(i, rows, 6), path, row_group_size=group)
        files[path.name] = path.read_bytes()
    url = _upload(s3, files, f"workers-{rows}")
    ref = _reference(files)
    steps, kw = 4 * rows // batch, {"window_rows": 4 * group}
    with Loader(_source(s3, url, **kw), batch_size=batch, seed=seed, steps=steps) as loader:
        alone = [_rows(b, ref) for b in loader]
    got: dict[int, list[int]] = {}
    for w in (0, 1):
        src = _source(s3, url, **kw)
        footers = _opened(src)
        with Loader(
            src, batch_size=batch, seed=seed, steps=steps, step_stride=2, step_offset=w
        ) as loader:
            got.update(zip(range(w, steps, 2), (_rows(b, ref) for b in loader), strict=True))
        requests, fetched = (a - b for a, b in zip(_opened(src), footers, strict=True))
        assert (requests, fetched) == _chunks(files), w
        src.close()
    assert [got[t] for t in range(steps)] == alone


def test_an_object_deleted_after_its_bytes_were_fetched_is_gone_not_corrupt(
    s3: Any, files: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyarrow asks for a byte outside the ranges fetched (a writer whose chunk sizes
    understate them; here each range cut 8 bytes short) of an object deleted meanwhile:
    its 404 was "truncated or corrupt Parquet data: copy the file again", as if the bytes
    were bad, and each row group GET it again."""
    name = SHARDS[0][0]
    url = _upload(s3, {name: files[name]}, "deleted")
    src = _source(s3, url, shuffle="none")
    table = _reference({name: files[name]})[0]
    first = src.read(0, np.array([0]))
    n = int(first["input_ids_mask"][0].sum())
    assert first["input_ids"][0][:n].tolist() == table["input_ids"][0].as_py()

    ranges = _table_remote.RemoteParquet._ranges

    def short(self: Any, group: int, names: frozenset[str]) -> list[tuple[int, int]]:
        return [(o, n - 8) for o, n in ranges(self, group, names)]

    monkeypatch.setattr(_table_remote.RemoteParquet, "_ranges", short)
    src.prefetch(0, np.array([150, 250]))  # row groups 1 and 2, fetched whole but 8 bytes
    pending = list(src.table._pending.values())
    assert len(pending) == 2
    for fetch in pending:
        assert isinstance(fetch, _table_remote.Fetch)
        fetch.result()
    s3.info.boto3_client().delete_object(Bucket=BUCKET, Key=f"deleted/{name}")
    said = []
    for row in (150, 250, 160):
        with pytest.raises(ObjectNotFoundError) as err:
            src.read(0, np.array([row]))
        assert not isinstance(err.value, FormatError)
        said.append(str(err.value))
        if len(said) == 1:
            stats = src.object_stats
            assert stats is not None
            requests = stats.requests
    assert f"{url}{name}" in said[0]
    assert "no such object now; it was there when listed" in said[0]
    assert "corrupt" not in said[0] and "Put it back" in said[0]
    assert len(set(said)) == 1  # the other row group, refused at once as gone
    stats = src.object_stats
    assert stats is not None and stats.requests == requests
    src.close()
