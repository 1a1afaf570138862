"""A Hugging Face-style tokenized Parquet dataset (``data/train-0000N-of-0000M.parquet``:
``input_ids``, ``attention_mask``, ``labels`` with -100, a text column left unread) read
from S3 (moto on 127.0.0.1) as an SFT run reads it, each batch checked against pyarrow's
reading of the same rows, and what a damaged shard costs and says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from _bucket import bucket_fixture
from headrace.errors import ConfigError, FormatError
from headrace.formats import TableSource
from headrace.io import RetryPolicy
from headrace.pipeline import Loader, check

BUCKET = "tables-s54"
SHARDS = [("data/train-00000-of-00003.parquet", 300), ("data/train-00001-of-00003.parquet", 260)]
SHARDS.append(("data/train-00002-of-00003.parquet", 220))
GROUP = 100  # rows a row group
COLUMNS = ["input_ids", "attention_mask", "labels"]
KW: dict[str, Any] = {"columns": COLUMNS, "width": 64, "window_rows": 200}


def _shard(i: int, rows: int) -> pa.Table:
    rng = np.random.default_rng(54 + i)
    lengths = rng.integers(3, 64, rows)
    ids = [rng.integers(0, 32_000, n).astype(np.int32) for n in lengths]
    labels = []
    for a in ids:
        lab = a.astype(np.int64)
        lab[: rng.integers(0, a.size)] = -100  # the prompt's targets ignored
        labels.append(lab)
    return pa.table(
        {
            "input_ids": pa.array(ids, pa.list_(pa.int32())),
            "attention_mask": pa.array([np.ones(n, np.int8) for n in lengths], pa.list_(pa.int8())),
            "labels": pa.array(labels, pa.list_(pa.int64())),
            "text": [f"row {i}-{r}" for r in range(rows)],
        }
    )


s3 = bucket_fixture(BUCKET)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hub")
    (root / "data").mkdir()
    for i, (name, rows) in enumerate(SHARDS):
        pq.write_table(_shard(i, rows), root / name, row_group_size=GROUP)
    return root


def _upload(s3: Any, files: dict[str, bytes], prefix: str) -> str:
    client = s3.info.boto3_client()
    for name, body in files.items():
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{name}", Body=body)
    return f"s3://{BUCKET}/{prefix}/data/"


def _options(s3: Any) -> dict[str, Any]:
    return {**s3.info.store_options(), "retry": RetryPolicy(attempts=3, base_delay_s=0.01)}


def _files(hub: Path) -> dict[str, bytes]:
    return {name: (hub / name).read_bytes() for name, _ in SHARDS}


def _corrupt_group(body: bytes, group: int, column: str) -> bytes:
    """``body`` with the page header of ``column``'s chunk in row group ``group`` zeroed:
    that chunk no longer decodes (the footer, and every other chunk, still do)."""
    md = pq.ParquetFile(pa.BufferReader(body)).metadata.row_group(group)
    chunk = next(
        md.column(j)
        for j in range(md.num_columns)
        if md.column(j).path_in_schema.startswith(column)
    )
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    out = bytearray(body)
    out[start : start + 64] = bytes(64)
    return bytes(out)


def _rows(
    batch: dict[str, Any], reference: dict[tuple[int, ...], int], table: pa.Table
) -> list[int]:
    """The table rows of ``batch``, each found by its ids and checked against pyarrow's
    reading of that row: its mask, labels and the padding after it."""
    out = []
    for j in range(batch["input_ids"].shape[0]):
        n = int(batch["input_ids_mask"][j].sum())
        row = reference[tuple(batch["input_ids"][j][:n].tolist())]
        assert batch["attention_mask"][j][:n].tolist() == table["attention_mask"][row].as_py()
        assert batch["labels"][j][:n].tolist() == table["labels"][row].as_py()
        assert not batch["input_ids"][j][n:].any() and not batch["attention_mask"][j][n:].any()
        assert (batch["labels"][j][n:] == -100).all()  # padding is no target
        out.append(row)
    return out


def test_two_epochs_from_s3_are_pyarrows_rows_and_resume_mid_epoch(s3: Any, hub: Path) -> None:
    url = _upload(s3, _files(hub), "journey")
    table = pa.concat_tables([pq.read_table(hub / name) for name, _ in SHARDS])
    reference = {tuple(ids): i for i, ids in enumerate(table["input_ids"].to_pylist())}
    assert len(reference) == table.num_rows
    rows, batch, steps = table.num_rows, 20, 2 * table.num_rows // 20
    src = TableSource(url, store_options=_options(s3), **KW)
    with Loader(src, batch_size=batch, seed=4, steps=steps) as loader:
        seen = [_rows(b, reference, table) for b in loader]
    for epoch in (seen[: steps // 2], seen[steps // 2 :]):
        assert sorted(r for step in epoch for r in step) == list(range(rows))
    assert seen[: steps // 2] != seen[steps // 2 :]  # reshuffled
    mid = steps // 2 + 7
    with Loader(TableSource(url, store_options=_options(s3), **KW), batch_size=batch, seed=4,
                steps=steps) as loader:  # fmt: skip
        for _ in zip(range(mid), loader, strict=False):
            pass
        state = loader.state_dict()
    with Loader(TableSource(url, store_options=_options(s3), **KW), batch_size=batch, seed=4,
                steps=steps) as loader:  # fmt: skip
        loader.load_state_dict(state)
        assert [_rows(b, reference, table) for b in loader] == seen[mid:]


def test_a_corrupt_row_group_is_fetched_once_not_at_every_read(s3: Any, hub: Path) -> None:
    """check() finds a bad sample by halving the batch and reading the halves again: each
    read of the corrupt row group's rows fetched and decoded it again (one group of 2,000
    rows on S3: 5,472 GETs, 3.28 GB fetched for a dataset of 6 MB, 107 s; now 23 GETs,
    11 MB, 4.7 s; locally 71.5 s, now 5.1 s)."""
    files = _files(hub)
    name = SHARDS[1][0]
    files[name] = _corrupt_group(files[name], 1, "input_ids")
    url = _upload(s3, files, "corrupt")
    src = TableSource(url, store_options=_options(s3), shuffle="none", **KW)
    bad = SHARDS[0][1] + GROUP  # the table's first row of the corrupt group
    messages = []
    for row in (bad, bad + 5, bad + 99, bad + 5):
        with pytest.raises(FormatError) as err:
            src.read(0, np.array([row]))
        messages.append(str(err.value))
        if len(messages) == 1:
            stats = src.object_stats
            assert stats is not None
            requests = stats.requests
    assert f"{url}{name.split('/')[-1]}: row group 1: truncated or corrupt" in messages[0]
    assert len(set(messages)) == 1  # the same message for each, without the GETs again
    stats = src.object_stats
    assert stats is not None and stats.requests == requests
    # The other columns of the group read, and so do the other groups.
    assert src.table.read_rows([bad], ["labels"])["labels"].row(0).size > 0
    assert src.read(0, np.array([bad - 1, bad + GROUP]))["input_ids"].shape == (2, 64)
    src.close()

    fresh = TableSource(url, store_options=_options(s3), **KW)
    report = check(fresh, batch_size=32)
    assert sorted(p.sample for p in report.problems) == list(range(bad, bad + GROUP))
    stats = fresh.object_stats
    assert stats is not None
    # 284 GETs, 8.4 MB before (36x the objects' 234 kB); 31 GETs, 0.80 MB now. Not 1x:
    # the other groups of a read that fails are fetched again by the next one.
    assert stats.requests < 60 and stats.bytes < 5 * sum(len(b) for b in files.values()), stats


def test_a_corrupt_row_group_read_in_sub_windows_is_fetched_once(s3: Any, hub: Path) -> None:
    """A row group larger than ``window_rows`` is streamed: each read of a sub-window at or
    past the one that failed started the group's stream again, its GETs running ahead."""
    files = _files(hub)
    name = SHARDS[0][0]
    files[name] = _corrupt_group(files[name], 2, "labels")
    url = _upload(s3, files, "corrupt-streamed")
    src = TableSource(url, store_options=_options(s3), **{**KW, "window_rows": 40})
    table = src.table
    said = r"train-00000-of-00003\.parquet: row group 2: rows \[\d+, \d+\): truncated or corrupt"
    with pytest.raises(FormatError, match=r"row group 2: rows \[0, 40\): truncated"):  # its rows
        table.read_rows([210], COLUMNS)
    stats = src.object_stats
    assert stats is not None
    requests = stats.requests
    for row in (250, 210, 299):  # its sub-window, and those after it
        with pytest.raises(FormatError, match=said):
            table.read_rows([row], COLUMNS)
    stats = src.object_stats
    assert stats is not None and stats.requests == requests
    assert table.read_rows([199, 0], COLUMNS)["labels"].offsets.size == 3  # the others read
    src.close()


def test_a_corrupt_local_row_group_is_decoded_once(
    hub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same locally: each read decoded the group again (counted, not timed)."""
    for name, _ in SHARDS:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        body = (hub / name).read_bytes()
        (tmp_path / name).write_bytes(
            _corrupt_group(body, 1, "input_ids") if "1-of" in name else body
        )
    decodes = []
    real = pq.ParquetFile.read_row_group

    def counted(self: Any, i: int, *args: Any, **kw: Any) -> Any:
        decodes.append(i)
        return real(self, i, *args, **kw)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counted)
    src = TableSource(tmp_path / "data", shuffle="none", **KW)
    bad = SHARDS[0][1] + GROUP
    for row in (bad, bad + 1, bad + 50):
        with pytest.raises(FormatError, match=r"train-00001-of-00003\.parquet: row group 1: "):
            src.read(0, np.array([row]))
    assert len(decodes) == 1
    src.close()


@pytest.mark.parametrize("where", ["s3", "local"])
def test_an_over_width_row_names_its_shard_and_its_row_there(
    s3: Any, hub: Path, tmp_path: Path, where: str
) -> None:
    """The row's shard and its row in it (until 2026-12-07: the dataset's folder and the
    table's row, which the user had to map to a shard by hand)."""
    files = _files(hub)
    name = SHARDS[2][0]
    t = pq.read_table(pa.BufferReader(files[name]))
    ids = t["input_ids"].to_pylist()
    ids[17] = list(range(90))
    t = t.set_column(0, "input_ids", pa.array(ids, pa.list_(pa.int32())))
    sink = pa.BufferOutputStream()
    pq.write_table(t, sink, row_group_size=GROUP)
    files[name] = sink.getvalue().to_pybytes()
    if where == "s3":
        url = _upload(s3, files, "wide")
        src = TableSource(url, store_options=_options(s3), shuffle="none", **KW)
        shard = f"{url}{name.split('/')[-1]}"
    else:
        for n, body in files.items():
            (tmp_path / n).parent.mkdir(exist_ok=True)
            (tmp_path / n).write_bytes(body)
        src = TableSource(tmp_path / "data", shuffle="none", **KW)
        shard = str(tmp_path / name)
    row = SHARDS[0][1] + SHARDS[1][1] + 17
    with pytest.raises(ConfigError) as err:
        src.read(0, np.array([3, row]))
    assert (
        f"{shard}: column 'input_ids': row 17 (row {row} of the table, sample {row}) has 90 "
        "items, more than width=64; pass truncate=True" in str(err.value)
    )
    report = check(src)
    assert [p.sample for p in report.problems] == [row]
    src.close()


def test_a_shard_cut_short_says_what_to_do(s3: Any, hub: Path) -> None:
    """A shard whose upload stopped (its footer cut off) is named, every one of them, with
    the fix a local file's refusal gives (until 2026-12-07: "not a Parquet file" alone)."""
    files = _files(hub)
    for name, _ in SHARDS[1:]:
        files[name] = files[name][: len(files[name]) // 2]
    url = _upload(s3, files, "cut")
    with pytest.raises(FormatError) as err:
        TableSource(url, store_options=_options(s3), **KW)
    said = str(err.value)
    assert said.startswith(f"{url}train-00001-of-00003.parquet: not a Parquet file: it does ")
    assert said.endswith(
        "copy the file again (a partial copy or download?) or leave it out of the table"
    )
    assert f"{url}train-00002-of-00003.parquet" in " ".join(err.value.__notes__)
