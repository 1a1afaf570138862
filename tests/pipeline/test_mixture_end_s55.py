"""A Mixture of a tokenized Parquet table on S3 (moto on 127.0.0.1) and padded rows, read
for a bounded run: the table fetches no window past the run's last step. GETs and bytes
are counted by the table's object stats; every table sample is checked against pyarrow's
reading of its row, and the batches against the same mixture read without a bound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from _bucket import bucket_fixture
from headrace.formats import PaddedRows, TableSource, write_row_file
from headrace.io import RetryPolicy
from headrace.pipeline import Loader, Mapped, Mixture
from headrace.testing import batch_digest

BUCKET = "mixture-end-s55"
SHARDS = [("train-0.parquet", 300), ("train-1.parquet", 300), ("train-2.parquet", 180)]
GROUP = 50  # rows a row group: 4 a window of 200 rows
CONTEXT, B, IGNORE = 32, 20, -100
# Weights 1:1 give the table 10 samples a step: 78 steps read its 780 rows once.
STEPS = sum(rows for _, rows in SHARDS) // (B // 2)


def as_rows(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """A left-padded ``input_ids`` batch as the rows' outputs (module level: picklable)."""
    ids, real = arrays["input_ids"], arrays["input_ids_mask"]
    loss = real[:, 1:] & real[:, :-1]
    y = ids[:, 1:].astype(np.int64)
    y[~loss] = IGNORE
    return {"x": ids[:, :-1].astype(np.int64), "y": y, "loss_mask": loss}


def _key(ids: list[int]) -> bytes:
    """A table row's ``x`` as the mixture gives it: its first CONTEXT + 1 ids, left-padded."""
    kept = np.array(ids[: CONTEXT + 1], np.int64)[:-1]
    x = np.zeros(CONTEXT, np.int64)
    x[CONTEXT - kept.size :] = kept
    return x.tobytes()


s3 = bucket_fixture(BUCKET)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory, s3: Any) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("mix")
    rng = np.random.default_rng(55)
    client = s3.info.boto3_client()
    bodies = []
    for name, rows in SHARDS:
        ids = [rng.integers(1, 32_000, int(n)).tolist() for n in rng.integers(2, 48, rows)]
        pq.write_table(
            pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32()))}),
            root / name,
            row_group_size=GROUP,
        )
        body = (root / name).read_bytes()
        client.put_object(Bucket=BUCKET, Key=f"t/{name}", Body=body)
        bodies.append(body)
    table = pa.concat_tables([pq.read_table(pa.BufferReader(b)) for b in bodies])
    rows = {_key(ids): i for i, ids in enumerate(table["input_ids"].to_pylist())}
    assert len(rows) == table.num_rows
    groups = fetched = 0  # an epoch's fetch: each row group's input_ids chunk once
    for body in bodies:
        md = pq.ParquetFile(pa.BufferReader(body)).metadata
        groups += md.num_row_groups
        fetched += sum(
            md.row_group(g).column(0).total_compressed_size for g in range(md.num_row_groups)
        )
    tok = rng.integers(1, 60_000, (40, CONTEXT + 1)).astype(np.uint16)
    write_row_file(root / "tok.bin", tok)
    write_row_file(root / "mask.npy", np.ones_like(tok, np.uint8))
    return {"root": root, "rows": rows, "epoch": (groups, fetched)}


def _mixture(s3: Any, root: Path) -> tuple[Mixture, TableSource]:
    options = {**s3.info.store_options(), "retry": RetryPolicy(attempts=2, base_delay_s=0.01)}
    table = TableSource(
        f"s3://{BUCKET}/t/",
        store_options=options,
        columns=["input_ids"],
        width=CONTEXT + 1,
        truncate=True,
        pad_side="left",
        window_rows=4 * GROUP,
    )
    rows = PaddedRows(
        root / "tok.bin",
        root / "mask.npy",
        context=CONTEXT,
        pad_side="left",
        ignore_index=IGNORE,
        dtype=np.int64,
    )
    mix = Mixture({"rows": rows, "table": Mapped(table, as_rows)}, [1, 1], batch_size=B)
    return mix, table


def _opened(src: TableSource) -> tuple[int, int]:
    stats = src.object_stats
    assert stats is not None
    return stats.requests, stats.bytes


def test_a_bounded_mixture_fetches_no_table_window_past_its_last_step(
    s3: Any, data: dict[str, Any]
) -> None:
    """The run reads the table's 780 rows once (its 16 row groups, 4 windows); the
    mixture told its sources nothing of the run's end, so the table's last window read
    ahead the next epoch's first, which no step reads (20 GETs for 16 row groups)."""
    mix, table = _mixture(s3, data["root"])
    footers = _opened(table)
    with Loader(mix, batch_size=B, seed=7, steps=STEPS) as loader:
        bounded = list(loader)
    requests, fetched = (a - b for a, b in zip(_opened(table), footers, strict=True))
    seen = [
        data["rows"][b["x"][i].tobytes()] for b in bounded for i in np.flatnonzero(b["source"] == 1)
    ]
    assert sorted(seen) == list(range(len(data["rows"])))  # each row once, as pyarrow reads it
    assert (requests, fetched) == data["epoch"]  # each row group's chunk once
    mix.close()
    mix, _ = _mixture(s3, data["root"])
    with Loader(mix, batch_size=B, seed=7) as loader:  # unbounded: no end told
        it = iter(loader)
        unbounded = [next(it) for _ in range(STEPS)]
    assert batch_digest(bounded) == batch_digest(unbounded)
    mix.close()


def test_each_worker_loader_over_the_mixture_fetches_each_row_group_once(
    s3: Any, data: dict[str, Any]
) -> None:
    """Two worker loaders (every other step each): each is told its own last step, and
    its table fetches each row group once (worker 1 made 20 GETs for 16 before), the two
    giving the one-process batches."""
    mix, _ = _mixture(s3, data["root"])
    with Loader(mix, batch_size=B, seed=7, steps=STEPS) as loader:
        alone = list(loader)
    mix.close()
    got: dict[int, Any] = {}
    for w in (0, 1):
        mix, table = _mixture(s3, data["root"])
        footers = _opened(table)
        with Loader(mix, batch_size=B, seed=7, steps=STEPS, step_stride=2, step_offset=w) as ld:
            got.update(zip(range(w, STEPS, 2), ld, strict=True))
        requests, fetched = (a - b for a, b in zip(_opened(table), footers, strict=True))
        assert (requests, fetched) == data["epoch"], w
        mix.close()
    assert batch_digest([got[t] for t in range(STEPS)]) == batch_digest(alone)
