"""Parquet as Spark and other partitioning writers lay it out on S3 (moto on 127.0.0.1):
hive partition folders (``year=2024/part-0.parquet``), a ``_SUCCESS`` marker and ``.crc``
files beside the parts. Read by a glob across the folders, the objects must give the
local files' rows, batches and fingerprint (a local state resumes on S3)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.errors import ConfigError, FormatError
from headrace.formats import Table, TableSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

URL = f"s3://{BUCKET}/spark-hive"
# Partition folders, sorted as a listing and a local glob sort them.
PARTS = [f"year={y}/month={m:02d}" for y in (2023, 2024) for m in (1, 11)]
KW: dict[str, Any] = {"columns": ["id", "tok"], "width": 6}


def _part(i: int) -> pa.Table:
    rows = 30 + 7 * i
    ids = np.arange(rows, dtype=np.int64) + 1000 * i
    return pa.table(
        {
            "id": ids,
            "tok": pa.array([list(range(int(r) % 6)) for r in ids], pa.list_(pa.int32())),
        }
    )


@pytest.fixture(scope="module")
def root(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same dataset as local files under ``root`` and as objects under ``URL``."""
    root = tmp_path_factory.mktemp("spark-hive")
    client = s3.server.info.boto3_client()
    files: dict[str, bytes] = {"_SUCCESS": b""}
    for i, part in enumerate(PARTS):
        for j in range(2):
            name = f"{part}/part-{j:05d}-c000.snappy.parquet"
            (root / part).mkdir(parents=True, exist_ok=True)
            pq.write_table(_part(2 * i + j), root / name, row_group_size=16)
            files[name] = (root / name).read_bytes()
            files[f"{part}/.part-{j:05d}-c000.snappy.parquet.crc"] = b"\x00crc"
    for name, body in files.items():
        (root / name).write_bytes(body)
        client.put_object(Bucket=BUCKET, Key=f"spark-hive/{name}", Body=body)
    return root


def _names(tb: Table, base: str) -> list[str]:
    return [u.removeprefix(base + "/") for u, _ in tb.files]


@pytest.mark.parametrize("pattern", ["*/*/*.parquet", "**/*.parquet", "year=*/month=1?/*.parquet"])
def test_a_glob_across_partition_folders_reads_what_the_local_glob_reads(
    s3: S3Fixture, root: Path, pattern: str
) -> None:
    local = Table.open(str(root / pattern), columns=["id"])
    remote = Table.open(f"{URL}/{pattern}", columns=["id"], store_options=options(s3))
    want = [f"{p}/part-{j:05d}-c000.snappy.parquet" for p in PARTS for j in range(2)]
    if "month=1?" in pattern:
        want = [w for w in want if "month=11" in w]
    assert _names(local, str(root)) == want
    assert _names(remote, URL) == want
    rows = list(range(len(remote)))[::-1]
    assert remote.read_rows(rows)["id"].tolist() == local.read_rows(rows)["id"].tolist()
    assert remote.fingerprint == local.fingerprint
    local.close()
    remote.close()


def test_a_list_of_globs_reads_what_the_local_list_of_globs_reads(
    s3: S3Fixture, root: Path
) -> None:
    # datasets' data_files=[...]: each pattern's matches in its place, beside a plain
    # object (until 2026-12-06 each pattern was asked for as an object: "no such object").
    later, first = "year=2024/*/*.parquet", "year=2023/month=01/*.parquet"
    one = "year=2023/month=11/part-00001-c000.snappy.parquet"
    local = TableSource([str(root / later), str(root / one), str(root / first)], **KW)
    remote = TableSource(
        [f"{URL}/{later}", f"{URL}/{one}", f"{URL}/{first}"], store_options=options(s3), **KW
    )
    name = "{}/part-{:05d}-c000.snappy.parquet"
    want = [name.format(p, j) for p in PARTS[2:] for j in range(2)]  # year=2024's
    want += [one, *(name.format(PARTS[0], j) for j in range(2))]
    assert [os.path.relpath(u, root) for u, _ in local.table.files] == want
    assert [u.removeprefix(URL + "/") for u, _ in remote.table.files] == want
    assert remote.fingerprint() == local.fingerprint()
    assert batch_digest(Loader(remote, batch_size=8, seed=3, steps=10)) == batch_digest(
        Loader(local, batch_size=8, seed=3, steps=10)
    )
    with pytest.raises(ConfigError, match=r"listed twice"):  # patterns that overlap
        TableSource([f"{URL}/year=2024/*/*.parquet", f"{URL}/**/*.parquet"],
                    store_options=options(s3), **KW)  # fmt: skip
    with pytest.raises(FormatError, match=r"year=2025/\*\.parquet: no objects match"):
        TableSource([f"{URL}/{one}", f"{URL}/year=2025/*.parquet"], store_options=options(s3))


def test_batches_and_resume_match_the_local_files_on_another_host_count(
    s3: S3Fixture, root: Path
) -> None:
    def digests(make: Any, world: int) -> list[str]:
        return [
            batch_digest(Loader(make(), batch_size=8, seed=3, steps=12, rank=r, world_size=world))
            for r in range(world)
        ]

    local = lambda: TableSource(str(root / "**" / "*.parquet"), **KW)  # noqa: E731
    remote = lambda: TableSource(  # noqa: E731
        f"{URL}/**/*.parquet", store_options=options(s3), **KW
    )
    assert digests(remote, 2) == digests(local, 2)
    # A state saved on 2 local hosts resumes on 1 S3 host.
    with Loader(local(), batch_size=8, seed=3, rank=0, world_size=2) as saved:
        it = iter(saved)
        for _ in range(5):
            next(it)
        state = saved.state_dict()
    with Loader(local(), batch_size=8, seed=3) as whole:
        it = iter(whole)
        want = [next(it) for _ in range(8)][5:]
    with Loader(remote(), batch_size=8, seed=3) as resumed:
        resumed.load_state_dict(state)
        it = iter(resumed)
        for w in want:
            got = next(it)
            assert got["id"].tolist() == w["id"].tolist()


def test_a_partitioned_prefix_is_refused_with_a_glob_that_reads_it(s3: S3Fixture) -> None:
    with pytest.raises(ConfigError, match=r"year=2023.*year=2024") as err:
        Table.open(f"{URL}/", store_options=options(s3))
    glob = f"{URL}/**/*.parquet"
    assert glob in str(err.value)
    with Table.open(glob, store_options=options(s3)) as tb:
        assert len(tb.files) == 2 * len(PARTS)


def test_a_partition_key_asked_as_a_column_is_refused_saying_where_it_lives(
    s3: S3Fixture, root: Path
) -> None:
    for where, store in ((str(root), None), (URL, options(s3))):
        with pytest.raises(ConfigError, match=r"'year'.*partition folder names") as err:
            Table.open(f"{where}/**/*.parquet", columns=["id", "year"], store_options=store)
        assert "available: ['id', 'tok']" in str(err.value)


def test_a_glob_matching_no_objects_names_it(s3: S3Fixture) -> None:
    with pytest.raises(FormatError, match=r"spark-hive/\*/\*\.parquet: no objects match"):
        Table.open(f"{URL}/*/*.parquet", store_options=options(s3))  # parts are 2 deep


def test_a_spark_output_prefix_skips_the_success_marker_and_crc_files(
    s3: S3Fixture, root: Path
) -> None:
    part = PARTS[0]
    local = Table.open(root / part, columns=["id"])
    remote = Table.open(f"{URL}/{part}", columns=["id"], store_options=options(s3))
    assert _names(remote, f"{URL}/{part}") == [
        "part-00000-c000.snappy.parquet",
        "part-00001-c000.snappy.parquet",
    ]
    assert remote.read_rows([0, 66])["id"].tolist() == local.read_rows([0, 66])["id"].tolist()
    local.close()
    remote.close()


def test_escaped_partition_values_and_an_empty_partition_file(
    s3: S3Fixture, tmp_path: Path
) -> None:
    # Spark escapes ':' in a timestamp partition's folder name (%3A) and keeps the
    # space; an empty partition is still written, as a file of no rows.
    client = s3.server.info.boto3_client()
    folders = [f"ts=2024-01-0{d} 00%3A00%3A00" for d in (1, 2, 3)]
    for folder, rows in zip(folders, (3, 0, 4), strict=True):
        (tmp_path / folder).mkdir()
        name = f"{folder}/part-00000.parquet"
        pq.write_table(_part(rows).slice(0, rows), tmp_path / name)
        client.put_object(Bucket=BUCKET, Key=f"escaped/{name}", Body=(tmp_path / name).read_bytes())
    local = Table.open(str(tmp_path / "ts=*" / "*.parquet"), columns=["id"])
    remote = Table.open(
        f"s3://{BUCKET}/escaped/ts=*/*.parquet", columns=["id"], store_options=options(s3)
    )
    assert len(remote.files) == 3 and len(remote) == len(local) == 7
    assert remote.read_rows(range(7))["id"].tolist() == local.read_rows(range(7))["id"].tolist()
    assert remote.fingerprint == local.fingerprint
    local.close()
    remote.close()


@pytest.mark.parametrize("pattern", ["", "*.parquet", "**/*.parquet"])
def test_a_delta_table_on_s3_is_refused_not_read_with_its_removed_files(
    s3: S3Fixture, pattern: str
) -> None:
    # After an overwrite part-0 is removed from the table by the log, but stays in the
    # bucket until VACUUM: read, its rows would be trained on twice.
    client = s3.server.info.boto3_client()
    sink = pa.BufferOutputStream()
    pq.write_table(_part(0), sink)
    objects = {
        "part-0.parquet": sink.getvalue().to_pybytes(),
        "part-1.parquet": sink.getvalue().to_pybytes(),
        "_delta_log/00000000000000000000.json": b'{"add":{"path":"part-0.parquet"}}\n',
        "_delta_log/00000000000000000001.json": b'{"remove":{"path":"part-0.parquet"}}\n',
    }
    for key, data in objects.items():
        client.put_object(Bucket=BUCKET, Key=f"delta/events/{key}", Body=data)
    with pytest.raises(ConfigError, match=r"delta/events is a Delta Lake table \(_delta_log"):
        Table.open(f"s3://{BUCKET}/delta/events/{pattern}", store_options=options(s3))
