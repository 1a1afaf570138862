"""Object keys holding ``*``, ``?`` or ``[``, on moto: read as written where they exist, by
tokens and tables alike (as local names are: ``tests/formats/test_glob_literal_names.py``).

Each key sits beside the objects its reading as a pattern would pick instead, holding
other values, in a bucket of its own.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterator

import numpy as np
import pytest
from s3util import S3Fixture

from headrace.errors import FormatError, ObjectNotFoundError
from headrace.formats import FileSource, TableSource, TokenSource

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

pytestmark = pytest.mark.integration

BUCKET = "headrace-glob-names"
MINE, OTHER = 7, 1


def _parquet(v: int) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.table({"x": [v] * 10}), out)
    return out.getvalue()


@pytest.fixture(scope="module")
def opts(s3: S3Fixture) -> Iterator[dict[str, object]]:
    s3.server.create_bucket(BUCKET)
    client = s3.server.info.boto3_client()
    for key, v in (
        ("shard[01].bin", MINE), ("shard0.bin", OTHER), ("shard1.bin", OTHER),
        ("d[1]/s.bin", MINE), ("d1/s.bin", OTHER),
    ):  # fmt: skip
        client.put_object(Bucket=BUCKET, Key=key, Body=np.full(200, v, np.uint16).tobytes())
    for key, v in (
        ("t[01].parquet", MINE), ("t0.parquet", OTHER), ("t1.parquet", OTHER),
        ("d[1]/p.parquet", MINE), ("d1/p.parquet", OTHER),
    ):  # fmt: skip
        client.put_object(Bucket=BUCKET, Key=key, Body=_parquet(v))
    for key, v in (("d[1]/a.npy", MINE), ("d1/a.npy", OTHER), ("d1/.a.npy", OTHER)):
        out = io.BytesIO()
        np.save(out, np.full(3, v))
        client.put_object(Bucket=BUCKET, Key=key, Body=out.getvalue())
    yield s3.options()


def _values(src: TokenSource | TableSource) -> list[int]:
    got = src.read(0, np.arange(src.samples_per_epoch, dtype=np.int64))
    return sorted({int(v) for v in np.asarray(got["x"]).ravel()})


def _tokens(url: str, opts: dict[str, object]) -> TokenSource:
    return TokenSource(url, dtype="uint16", context=8, store_options=opts)


def test_a_key_that_exists_is_read_as_written(opts: dict[str, object]) -> None:
    # Before: both read shard0/shard1 and t0/t1 (values [1]) in its place, without a word.
    assert _values(_tokens(f"s3://{BUCKET}/shard[01].bin", opts)) == [MINE]
    assert _values(TableSource(f"s3://{BUCKET}/t[01].parquet", store_options=opts)) == [MINE]


@pytest.mark.parametrize("folder", ["d[1]", "d[[]1]"])
def test_a_prefix_named_with_brackets_is_that_prefix_under_a_wildcard(
    opts: dict[str, object], folder: str
) -> None:
    # Before: d[1]/*.bin, d[1]/*.parquet and the prefix d[1]/ read d1/'s objects.
    url = f"s3://{BUCKET}/{folder}"
    assert _values(_tokens(f"{url}/*.bin", opts)) == [MINE]
    assert _values(TableSource(f"{url}/*.parquet", store_options=opts)) == [MINE]
    if folder == "d[1]":
        assert _values(_tokens(f"{url}/", opts)) == [MINE]


def test_a_wildcard_still_matches_where_the_key_does_not_exist(opts: dict[str, object]) -> None:
    assert _values(_tokens(f"s3://{BUCKET}/shard[0].bin", opts)) == [OTHER]
    assert _values(TableSource(f"s3://{BUCKET}/t[0].parquet", store_options=opts)) == [OTHER]


def test_a_pattern_that_matches_nothing_says_how_to_escape(opts: dict[str, object]) -> None:
    with pytest.raises(ObjectNotFoundError, match=r"x\[2\]\*\.bin: no objects match.*'\[\[\]'"):
        _tokens(f"s3://{BUCKET}/x[2]*.bin", opts)
    with pytest.raises(FormatError, match=r"x\[2\]\*\.parquet: no objects match.*'\[\[\]'"):
        TableSource(f"s3://{BUCKET}/x[2]*.parquet", store_options=opts)


def test_file_source_expands_an_object_glob_as_tokens_and_tables_do(
    opts: dict[str, object],
) -> None:
    # Before: "glob patterns are not expanded on object stores" (FileSource only).
    def files(url: str) -> FileSource:
        return FileSource(url, format="npy", store_options=opts, shuffle="none")

    both = files(f"s3://{BUCKET}/*/a.npy")  # as glob.glob: .a.npy is not matched
    assert both.files.keys == ["d1/a.npy", "d[1]/a.npy"]
    assert _file_values(both) == [OTHER, MINE]
    for url in (f"s3://{BUCKET}/d[1]/*.npy", f"s3://{BUCKET}/d[[]1]/*.npy"):
        src = files(url)
        assert src.files.keys == ["d[1]/a.npy"] and _file_values(src) == [MINE]
        copy = pickle.loads(pickle.dumps(src))  # a worker's: its parent's match, no LIST
        assert copy.files.keys == src.files.keys and _file_values(copy) == [MINE]
        assert copy.fingerprint() == src.fingerprint()
        assert copy.files.store.stats.requests == 1  # the GET of its one file
    with pytest.raises(ObjectNotFoundError, match=r"x\[2\]/\*\.npy: no objects match.*'\[\[\]'"):
        files(f"s3://{BUCKET}/x[2]/*.npy")


def _file_values(src: FileSource) -> list[int]:
    got = src.read(0, np.arange(src.samples_per_epoch, dtype=np.int64))["data"]
    order = np.asarray(got)[:, 0].tolist()
    return [int(v) for v in order]


@pytest.mark.parametrize("prefix", ["d[1]", "d[1]/"])
def test_a_worker_copy_of_a_prefix_named_with_brackets_reads_that_prefix(
    opts: dict[str, object], prefix: str
) -> None:
    # Before: the copy (a DataLoader worker's, from the parent's listing) took the prefix
    # for a glob and opened the bucket, asking for s3://bucket/a.npy: no such object.
    src = FileSource(f"s3://{BUCKET}/{prefix}", format="npy", store_options=opts)
    assert src.files.keys == ["a.npy"] and _file_values(src) == [MINE]
    copy = pickle.loads(pickle.dumps(src))
    assert copy.files.url == src.files.url == f"s3://{BUCKET}/d[1]"
    assert copy.files.keys == src.files.keys and _file_values(copy) == [MINE]
    assert copy.fingerprint() == src.fingerprint()
    assert copy.files.store.stats.requests == 1  # the GET of its one file, no LIST
    src.close()  # as each epoch of a TorchDataset closes it: the next read reopens it
    assert _file_values(src) == [MINE] and src.files.url == copy.files.url
