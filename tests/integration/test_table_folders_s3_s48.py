"""Tables on S3 (moto on 127.0.0.1) named as their local copies are: a folder named like
a table file (Spark's and Dask's ``out.parquet/`` of part files), read as its local copy is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.errors import FormatError, ObjectNotFoundError
from headrace.formats import Table

pytestmark = pytest.mark.integration

PREFIX = "s48-folders"


def _rows(source: str, **kw: object) -> tuple[list[int], int]:
    with Table.open(source, **kw) as table:  # type: ignore[arg-type]
        return table.read_rows(np.arange(len(table)))["y"].tolist(), len(table.files)


def _upload(s3: S3Fixture, folder: Path, under: str) -> None:
    client = s3.server.info.boto3_client()
    for f in sorted(folder.iterdir()):
        client.put_object(Bucket=BUCKET, Key=f"{under}/{f.name}", Body=f.read_bytes())


@pytest.mark.parametrize("suffix", ["parquet", "arrow"])
def test_a_folder_named_like_a_table_file_is_read_as_its_local_copy(
    s3: S3Fixture, tmp_path: Path, suffix: str
) -> None:
    folder = tmp_path / f"out.{suffix}"  # df.write.parquet("s3://bucket/out.parquet")
    folder.mkdir()
    t = pa.table({"y": np.arange(7, dtype=np.int64)})
    for k, part in enumerate([t.slice(0, 3), t.slice(3)]):
        name = folder / f"part-{k:05d}-c000.snappy.{suffix}"
        pq.write_table(part, name) if suffix == "parquet" else feather.write_feather(part, name)
    (folder / "_SUCCESS").write_bytes(b"")
    _upload(s3, folder, f"{PREFIX}/{suffix}/out.{suffix}")
    local = _rows(str(folder))
    assert local == (list(range(7)), 2)
    url = f"s3://{BUCKET}/{PREFIX}/{suffix}/out.{suffix}"
    assert _rows(url, store_options=options(s3)) == local  # was: "no such object"
    assert _rows(url + "/", store_options=options(s3)) == local


def test_a_missing_table_object_is_still_named_as_one(s3: S3Fixture) -> None:
    url = f"s3://{BUCKET}/{PREFIX}/nothing/train.parquet"
    with pytest.raises(ObjectNotFoundError, match=r"train\.parquet: no such object"):
        Table.open(url, store_options=options(s3))


@pytest.mark.parametrize("name", ["train.pq", "train.parq", "TRAIN.PARQUET"])
def test_a_parquet_object_under_another_common_suffix_is_read_as_its_local_copy(
    s3: S3Fixture, tmp_path: Path, name: str
) -> None:
    path = tmp_path / name
    pq.write_table(pa.table({"y": np.arange(5, dtype=np.int64)}), path, row_group_size=2)
    key = f"{PREFIX}/suffixes/{name}"
    s3.server.info.boto3_client().put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
    local = _rows(str(path))
    assert local == (list(range(5)), 1)
    # Was: "an object, not a prefix, ...: copy it to a name with its format's suffix"
    assert _rows(f"s3://{BUCKET}/{key}", store_options=options(s3)) == local


def test_an_empty_folder_is_named_as_one_not_as_an_object(s3: S3Fixture) -> None:
    # What an S3 console's "Create folder" leaves: its marker, an empty object 'new/'.
    client = s3.server.info.boto3_client()
    client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/empty/new/", Body=b"")
    url = f"s3://{BUCKET}/{PREFIX}/empty/new"
    # Was: "an object, not a prefix, ...: copy it to a name with its format's suffix"
    with pytest.raises(FormatError, match=rf"^{url}: an empty folder: .*marker") as info:
        Table.open(url, store_options=options(s3))
    assert "copy it" not in str(info.value)
