"""Shards that differ only in nullability, offsets' width (polars' large_string and
large_list beside pyarrow's string and list) or the columns' order read as one on S3
(moto on 127.0.0.1) too, with the local files' batches; and datasets' ArrayND columns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.errors import FormatError
from headrace.formats import TableSource
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration


def _tables() -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(5)
    ids = [rng.integers(0, 1000, rng.integers(1, 9)).tolist() for _ in range(600)]
    text = [f"row {i}" for i in range(600)]
    a = pa.table({"ids": pa.array(ids[:300], pa.list_(pa.int32())), "text": text[:300]})
    b = pa.table(  # and its columns in another order
        {"text": text[300:], "ids": pa.array(ids[300:], pa.large_list(pa.int32()))},
        schema=pa.schema(
            [
                pa.field("text", pa.large_string(), nullable=False),
                pa.field("ids", pa.large_list(pa.int32()), nullable=False),
            ]
        ),
    )
    return a, b


@pytest.mark.parametrize("arrow", [False, True], ids=["parquet", "arrow"])
def test_loose_shards_read_alike_locally_and_on_s3(
    s3: S3Fixture, tmp_path: Path, arrow: bool
) -> None:
    client = s3.server.info.boto3_client()
    names = []
    for k, t in enumerate(_tables()):
        name = f"part-{k}.{'arrow' if arrow else 'parquet'}"
        if arrow:
            with pa.OSFile(str(tmp_path / name), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
                w.write_table(t, max_chunksize=100)
        else:
            pq.write_table(t, tmp_path / name, row_group_size=100)
        client.put_object(Bucket=BUCKET, Key=f"loose/{name}", Body=(tmp_path / name).read_bytes())
        names.append(name)
    kw = {"width": 8, "widths": {"text": 16}, "window_rows": 200, "shuffle": "window"}
    local = TableSource([str(tmp_path / n) for n in names], **kw)  # type: ignore[arg-type]
    remote = TableSource(
        [f"s3://{BUCKET}/loose/{n}" for n in names], store_options=options(s3), **kw
    )  # type: ignore[arg-type]
    samples = np.arange(600)
    want, got = local.read(3, samples), remote.read(3, samples)
    assert batch_digest([want]) == batch_digest([got])
    texts = sorted(
        bytes(r[m]).decode() for r, m in zip(want["text"], want["text_mask"], strict=True)
    )
    assert texts == sorted(f"row {i}" for i in range(600))
    local.close()
    remote.close()


def test_array_features_read_alike_locally_and_on_s3(s3: S3Fixture, tmp_path: Path) -> None:
    # A datasets Array3D column, as datasets writes it (one record batch of all rows:
    # read in sub-windows on S3).
    datasets = pytest.importorskip("datasets")
    rng = np.random.default_rng(2)
    px = rng.integers(0, 255, (500, 3, 4, 2)).astype(np.uint8)
    feats = datasets.Features(
        {"px": datasets.Array3D((3, 4, 2), "uint8"), "i": datasets.Value("int64")}
    )
    ds = datasets.Dataset.from_dict({"px": list(px), "i": list(range(500))}, features=feats)
    ds.save_to_disk(str(tmp_path / "ds"))
    ds.to_parquet(str(tmp_path / "d.parquet"), batch_size=100)
    client = s3.server.info.boto3_client()
    shard = "data-00000-of-00001.arrow"
    for local, key in ((tmp_path / "ds" / shard, shard), (tmp_path / "d.parquet", "d.parquet")):
        client.put_object(Bucket=BUCKET, Key=f"arrays/{key}", Body=local.read_bytes())
    for local, key in ((tmp_path / "ds" / shard, shard), (tmp_path / "d.parquet", "d.parquet")):
        kw = {"shuffle": "window", "window_rows": 128}
        a = TableSource(str(local), **kw)  # type: ignore[arg-type]
        b = TableSource(f"s3://{BUCKET}/arrays/{key}", store_options=options(s3), **kw)  # type: ignore[arg-type]
        got = b.read(0, np.arange(500))
        assert batch_digest([a.read(0, np.arange(500))]) == batch_digest([got])
        assert np.array_equal(got["px"], px[got["i"]])
        a.close()
        b.close()


def _arrow_and_parquet(
    s3: S3Fixture, tmp_path: Path, table: pa.Table, name: str, prefix: str
) -> list[tuple[str, str]]:
    """``table`` written as an Arrow file of one record batch (read in sub-windows on S3)
    and as Parquet (row groups of 100), each also put on S3 under ``prefix``: (local
    path, URL) of each."""
    with pa.ipc.new_file(tmp_path / f"{name}.arrow", table.schema) as w:
        w.write_table(table)
    pq.write_table(table, tmp_path / f"{name}.parquet", row_group_size=100)
    client = s3.server.info.boto3_client()
    out = []
    for file in (f"{name}.arrow", f"{name}.parquet"):
        body = (tmp_path / file).read_bytes()
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{file}", Body=body)
        out.append((str(tmp_path / file), f"s3://{BUCKET}/{prefix}/{file}"))
    return out


def _read_alike(
    s3: S3Fixture, local: str, url: str, kw: dict[str, Any], refusal: str | None = None
) -> dict[str, Any] | None:
    """Every row of ``local`` and of its copy ``url`` read by ``TableSource(**kw)``: the
    same batch from both (returned: the S3 one's); or, given ``refusal`` (the pattern of a
    message naming the column and the problem), both refuse with it, the S3 copy naming
    its URL."""
    a = TableSource(local, **kw)
    b = TableSource(url, store_options=options(s3), **kw)
    try:
        if refusal is None:
            got: dict[str, Any] = b.read(0, np.arange(400))
            assert batch_digest([a.read(0, np.arange(400))]) == batch_digest([got])
            return got
        with pytest.raises(FormatError, match=refusal):
            a.read(0, np.arange(400))
        with pytest.raises(FormatError, match=f"{url}: {refusal}"):
            b.read(0, np.arange(400))
        return None
    finally:
        a.close()
        b.close()


def test_nested_lists_given_a_shape_read_alike_locally_and_on_s3(
    s3: S3Fixture, tmp_path: Path
) -> None:
    # Lists of lists (ds.map's output of a feature extractor) read with shapes=: an Arrow
    # file of one record batch (read in sub-windows on S3) and Parquet; and, in another
    # copy, a row of another shape named alike.
    rng = np.random.default_rng(4)
    x = rng.random((400, 3, 5)).astype(np.float32)
    rows = [r.tolist() for r in x]
    kw: dict[str, Any] = {"shuffle": "window", "window_rows": 128, "shapes": {"x": (3, 5)}}
    bad = r"column 'x': row 321 does not have the column's shape \[3, 5\]: a list of 2 where 3"
    for copy in ("good", "bad"):
        if copy == "bad":
            rows[321] = rows[321][:2]
        t = pa.table({"x": pa.array(rows, pa.list_(pa.list_(pa.float32()))), "i": range(400)})
        for local, url in _arrow_and_parquet(s3, tmp_path, t, copy, "shaped"):
            got = _read_alike(s3, local, url, kw, None if copy == "good" else bad)
            if got is not None:
                assert np.array_equal(got["x"], x[got["i"]])
                # Without a shape: refused by name; an object's first row is not fetched
                # to suggest one (a local file's is: test_table_shapes.py).
                with pytest.raises(FormatError, match=r"with shapes=\{'x': \(d0, d1\)\} \(each"):
                    TableSource(url, store_options=options(s3), width=8)


def test_rows_of_items_read_alike_locally_and_on_s3(s3: S3Fixture, tmp_path: Path) -> None:
    # Rows of as many items as each holds: boxes (lists of fixed-size lists, the shape in
    # the schema) and frames (lists of lists, shapes=(None, 3)), padded to a width; an
    # Arrow file of one record batch (sub-windows on S3) and Parquet; and, in another
    # copy, a frame of 2 numbers named alike.
    rng = np.random.default_rng(6)
    counts = rng.integers(0, 7, 400)
    boxes = [rng.random((int(n), 4)).astype(np.float32) for n in counts]
    frames = [np.full((int(n) % 4, 3), i, np.float32).tolist() for i, n in enumerate(counts)]
    kw: dict[str, Any] = {"shapes": {"frames": (None, 3)}, "width": 6}
    kw |= {"shuffle": "window", "window_rows": 128}
    bad = r"column 'frames': row 321 does not have the column's shape \[None, 3\]: a list of 2"
    for copy in ("good", "bad"):
        if copy == "bad":
            frames[321] = [[1.0, 2.0, 3.0], [1.0, 2.0]]
        t = pa.table(
            {
                "boxes": pa.array([b.tolist() for b in boxes], pa.list_(pa.list_(pa.float32(), 4))),
                "frames": pa.array(frames, pa.list_(pa.list_(pa.float32()))),
                "i": range(400),
            }
        )
        for local, url in _arrow_and_parquet(s3, tmp_path, t, copy, "items"):
            got = _read_alike(s3, local, url, kw, None if copy == "good" else bad)
            for row, i in enumerate(got["i"] if got is not None else ()):
                n = int(counts[i])
                np.testing.assert_array_equal(got["boxes"][row][:n], boxes[i])  # type: ignore[index]
                assert got["boxes_mask"][row].sum() == n  # type: ignore[index]
                assert got["frames_mask"][row].sum() == n % 4  # type: ignore[index]


def test_fields_of_a_list_of_structs_read_alike_locally_and_on_s3(
    s3: S3Fixture, tmp_path: Path
) -> None:
    # datasets' List({...}) of objects (list<struct<bbox: fixed_size_list<float>[4],
    # category: int64>>): each field's items a row, padded to a width; an Arrow file of one
    # record batch (sub-windows on S3) and Parquet; and, in another copy, a null object:
    # its box a null list of the shape, its category a null number (refused from an Arrow
    # file when the source is made, its header counting null items).
    rng = np.random.default_rng(9)
    counts = rng.integers(0, 6, 400)
    rows: list[object] = [
        [{"bbox": rng.random(4).tolist(), "category": int(i + j)} for j in range(int(n))]
        for i, n in enumerate(counts)
    ]
    box = pa.list_(pa.float32(), 4)
    typ = pa.list_(pa.struct([("bbox", box), ("category", pa.int64())]))
    kw: dict[str, Any] = {"width": 6, "shuffle": "window", "window_rows": 128}
    both = {**kw, "columns": ["objects.bbox", "objects.category", "i"]}
    for copy in ("good", "bad"):
        if copy == "bad":
            rows[321] = [None]
        t = pa.table({"objects": pa.array(rows, typ), "i": range(400)})
        for local, url in _arrow_and_parquet(s3, tmp_path, t, copy, "objs"):
            if copy == "bad":
                boxes = {**kw, "columns": ["objects.bbox", "i"]}
                bad = r"column 'objects.bbox': row 321 does not have the column's shape \[None, 4\]"
                _read_alike(s3, local, url, boxes, bad)
                cats = {**kw, "columns": ["objects.category", "i"]}
                with pytest.raises(FormatError, match=r"'objects.category'.*null list items"):
                    TableSource(url, store_options=options(s3), **cats).read(0, np.arange(400))
                continue
            got = _read_alike(s3, local, url, both)
            assert got is not None
            for row, i in enumerate(got["i"]):
                n = int(counts[i])
                assert got["objects.category"][row][:n].tolist() == [i + j for j in range(n)]
                assert got["objects.bbox_mask"][row].sum() == n


def test_rows_of_lists_read_alike_locally_and_on_s3(s3: S3Fixture, tmp_path: Path) -> None:
    # Several token lists a row (shapes=(None, None)), padded at both levels; and, in
    # another copy, a null id named alike.
    rng = np.random.default_rng(10)
    rows: list[object] = [
        [rng.integers(0, 1000, int(rng.integers(1, 9))).tolist() for _ in range(i % 5)]
        for i in range(400)
    ]
    kw: dict[str, Any] = {"shapes": {"negs": (None, None)}, "widths": {"negs": (4, 8)}}
    kw |= {"shuffle": "window", "window_rows": 128}
    bad = r"column 'negs': 1 row\(s\) hold null list items.*rows 321"
    for copy in ("good", "bad"):
        if copy == "bad":
            rows[321] = [[1, None]]
        t = pa.table({"negs": pa.array(rows, pa.list_(pa.list_(pa.int32()))), "i": range(400)})
        for local, url in _arrow_and_parquet(s3, tmp_path, t, copy, "lists"):
            got = _read_alike(s3, local, url, kw, None if copy == "good" else bad)
            for r, i in enumerate(got["i"] if got is not None else ()):
                assert got["negs_mask"][r].sum() == sum(map(len, rows[i]))  # type: ignore[arg-type,index]
