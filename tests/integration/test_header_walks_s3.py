"""Walks of tar and TFRecord headers on S3 (moto on 127.0.0.1, through the proxy): each
GET that misses fetches a growing span (up to ``WALK_CAP``), so a shard of N members of
100 kB costs a few GETs, not N; the counts and indexes are the local walk's."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture

from _tar_shards import write
from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import FormatError, PermissionDeniedError
from headrace.formats import FileSource
from headrace.formats._file_counts import CountStats, header_counts
from headrace.formats._file_list import list_files
from headrace.formats._files import file_format
from headrace.formats._sparse import WALK_CAP, WALK_SKIP
from headrace.formats._tar_ranges import TarIndexes
from headrace.formats._tfrecord import encode_tfrecord

pytestmark = pytest.mark.integration

HUGE = WALK_CAP + (1 << 20)  # a member larger than the most one walk's GET fetches


def _samples(n: int, size: int, seed: int) -> list[tuple[str, bytes]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        out += [(f"{i:05d}.bin", rng.bytes(size)), (f"{i:05d}.cls", str(i).encode())]
    return out


def _tars(root: Path) -> dict[str, Path]:
    """Shards with no member, one larger than the cap, large ones and small ones (in
    the order a listing sorts them)."""
    root.mkdir()
    huge = _samples(3, 30_000, 3)
    # Sample 0's data member (a field of its own, which its neighbours lack, is refused
    # when the shard is counted since 2026-12-07).
    huge[0] = ("00000.bin", np.random.default_rng(4).bytes(HUGE))
    return {
        "empty": write(root / "empty.tar", []),
        "huge": write(root / "huge.tar", huge),
        "large": write(root / "large.tar", _samples(8, 1_000_000, 2)),
        "small": write(root / "small.tar", _samples(60, 30_000, 1)),
    }


def _records(root: Path) -> dict[str, Path]:
    """Files with no record, one larger than the cap, large ones and small ones."""
    root.mkdir()
    rng = np.random.default_rng(5)
    records = {
        "empty": [],
        "huge": [rng.bytes(100), rng.bytes(HUGE), rng.bytes(100)],
        "large": [rng.bytes(1 << 20) for _ in range(6)],
        "small": [rng.bytes(200) for _ in range(300)],
    }
    out = {}
    for name, recs in records.items():
        out[name] = root / f"{name}.tfrecord"
        out[name].write_bytes(encode_tfrecord({}, records=recs))
    return out


def _put(s3: S3Fixture, paths: dict[str, Path], prefix: str) -> list[str]:
    client = s3.server.info.boto3_client()
    for p in paths.values():
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{p.name}", Body=p.read_bytes())
    return [f"s3://{BUCKET}/{prefix}/{p.name}" for p in paths.values()]


def _options(s3: S3Fixture, endpoint: str) -> dict[str, Any]:
    return {**s3.options(), "retry": FAST_RETRY, "endpoint": endpoint}


def _walked(
    listed: list[str], fmt: str, options: dict[str, Any] | None = None
) -> tuple[list[int], list[Any], CountStats]:
    """Each file's count and index (tar: its TarIndex's arrays; TFRecord: its records'
    offsets and lengths), as a source's count walks them, and what the walk cost."""
    files = list_files(listed, store_options=options)
    heads: dict[int, bytes] = {}
    indexes = TarIndexes()
    counts, stats = header_counts(files, file_format(fmt), None, 4, heads, indexes)
    if fmt == "tar":
        kept = dict(indexes.held())
        walked = [dataclasses.astuple(kept[i]) for i in range(len(listed))]
    else:
        walked = [heads[i] for i in range(len(listed))]
    return counts.tolist(), walked, stats


def _same(a: list[Any], b: list[Any]) -> None:
    for x, y in zip(a, b, strict=True):
        if isinstance(x, bytes):
            assert x == y
        else:
            for u, v in zip(x, y, strict=True):
                np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("fmt", ["tar", "tfrecord"])
def test_walks_on_s3_give_the_local_counts_and_indexes(
    s3: S3Fixture, tmp_path: Path, proxy: LatencyProxy, fmt: str
) -> None:
    paths = (_tars if fmt == "tar" else _records)(tmp_path / "files")
    urls = _put(s3, paths, f"walks/{fmt}")
    counts, walked, local = _walked([str(p) for p in paths.values()], fmt)
    assert counts == ([0, 3, 8, 60] if fmt == "tar" else [0, 3, 6, 300])
    proxy.reset_stats()
    got, remote_walked, remote = _walked(urls, fmt, _options(s3, proxy.endpoint))
    assert got == counts
    _same(remote_walked, walked)
    # The local walk: a pread a miss of 4 KiB, as before. On S3 the spans grow: fewer
    # GETs (members over WALK_SKIP still a GET each), more bytes, none twice.
    assert proxy.stats.requests == len(urls) + remote.reads  # a HEAD a listed object
    assert remote.reads < local.reads
    assert remote.bytes >= local.bytes
    assert remote.bytes <= sum(p.stat().st_size for p in paths.values())
    assert proxy.stats.bytes_down - remote.bytes < 1024 * proxy.stats.requests  # headers
    # Past the member larger than the cap, a GET of 4 KiB, not of 4 MiB: not all of it.
    _, _, huge = _walked([urls[1]], fmt, _options(s3, proxy.endpoint))
    assert huge.bytes < paths["huge"].stat().st_size - (1 << 20)


@pytest.mark.parametrize("fmt", ["tar", "tfrecord"])
@pytest.mark.parametrize("member", [100_000, 2 * WALK_SKIP])
def test_a_shard_of_many_large_members_costs_a_few_gets(
    s3: S3Fixture, tmp_path: Path, proxy: LatencyProxy, member: int, fmt: str
) -> None:
    n = 120 if member < WALK_SKIP else 12  # 12 MB
    path = tmp_path / f"many.{fmt}"
    if fmt == "tar":
        write(path, _samples(n, member, 6))
    else:
        rng = np.random.default_rng(6)
        path.write_bytes(encode_tfrecord({}, records=[rng.bytes(member) for _ in range(n)]))
    (url,) = _put(s3, {"many": path}, f"walks/many-{member}")
    local = _walked([str(path)], fmt)
    remote = _walked([url], fmt, _options(s3, proxy.endpoint))
    assert remote[0] == local[0] == [n]
    _same(remote[1], local[1])
    assert local[2].reads >= n  # a read a member locally (4 KiB each)
    if member < WALK_SKIP:  # on S3 4 KiB, 200 kB (twice the skip), 400 kB... 4 MiB
        assert remote[2].reads <= 10
    else:  # members this large: a GET each, as locally (a span would be most of it)
        assert remote[2].reads == local[2].reads


def test_a_walk_at_first_read_by_samples_grows_its_gets(
    s3: S3Fixture, tmp_path: Path, proxy: LatencyProxy
) -> None:
    path = write(tmp_path / "first.tar", _samples(120, 100_000, 7))
    _put(s3, {"first": path}, "walks/first")
    local = FileSource([path], format="tar", samples_per_file=120, shuffle="samples")
    remote = FileSource(
        f"s3://{BUCKET}/walks/first/",
        store_options=_options(s3, proxy.endpoint),
        format="tar",
        samples_per_file=120,  # no walk when opened: at the first read
        shuffle="samples",
    )
    proxy.reset_stats()
    index = np.array([119, 0, 57])
    assert remote.sample_keys(index) == local.sample_keys(index) == ["00119", "00000", "00057"]
    assert proxy.stats.requests <= 10  # the walk's GETs, not one a member
    got, want = remote.read(0, np.arange(6)), local.read(0, np.arange(6))
    assert got["bin"].tobytes() == want["bin"].tobytes()
    for src in (local, remote):
        src.close()


@pytest.mark.parametrize("fmt", ["tar", "tfrecord"])
@pytest.mark.parametrize("cut", ["inside a member", "after a member"])
def test_a_truncated_file_is_refused_as_locally(
    s3: S3Fixture, tmp_path: Path, proxy: LatencyProxy, fmt: str, cut: str
) -> None:
    paths = (_tars if fmt == "tar" else _records)(tmp_path / "files")
    data = paths["large"].read_bytes()
    if cut == "inside a member":
        data = data[: len(data) // 2 + 1000]
    else:  # tar: no end marker; TFRecord: a header cut short
        data = data[: 3 * (1_000_512 + 1024)] if fmt == "tar" else data[: 3 * ((1 << 20) + 16) + 5]
    paths = {"cut": paths["large"].with_name(f"cut.{fmt}")}
    paths["cut"].write_bytes(data)
    (url,) = _put(s3, paths, f"walks/cut-{fmt}")
    with pytest.raises(FormatError) as here:
        _walked([str(paths["cut"])], fmt)
    with pytest.raises(FormatError, match=rf"walks/cut-{fmt}/cut\.{fmt}: ") as there:
        _walked([url], fmt, _options(s3, proxy.endpoint))
    what = str(here.value).split(": ", 1)[1]
    assert str(there.value).split(": ", 1)[1] == what
    assert ("without its end marker" in what) == (fmt == "tar" and cut == "after a member")


def test_a_5xx_on_a_span_is_retried_and_a_403_named(
    s3: S3Fixture, tmp_path: Path, proxy: LatencyProxy
) -> None:
    path = write(tmp_path / "retried.tar", _samples(120, 100_000, 8))
    (url,) = _put(s3, {"retried": path}, "walks/retried")
    local = _walked([str(path)], "tar")
    # The 3rd and 6th GETs of the shard (spans of the walk, not its first 4 KiB) fail once.
    at = f"GET /{BUCKET}/walks/retried/retried.tar"
    proxy.set_faults([FaultRule(kind="status", status=503, match=at, every=3, limit=2)])
    remote = _walked([url], "tar", _options(s3, proxy.endpoint))
    assert proxy.stats.faults == 2
    assert remote[0] == local[0]
    _same(remote[1], local[1])
    # A span refused (not retried) fails the count, naming the object.
    proxy.set_faults([FaultRule(kind="status", status=403, match=at, every=3, limit=1)])
    with pytest.raises(PermissionDeniedError, match=r"walks/retried/retried\.tar"):
        _walked([url], "tar", _options(s3, proxy.endpoint))


def test_a_tfrecord_walk_at_first_read_by_records_grows_its_gets(
    s3: S3Fixture, tmp_path: Path, proxy: LatencyProxy
) -> None:
    rng = np.random.default_rng(9)
    path = tmp_path / "first.tfrecord"
    path.write_bytes(encode_tfrecord({"x": rng.integers(0, 256, (120, 100_000), np.uint8)}))
    _put(s3, {"first": path}, "walks/first-tfrecord")
    opts: dict[str, Any] = {
        "format": "tfrecord",
        "samples_per_file": 120,  # no walk when opened: at the first read
        "shuffle": "samples",
        "tfrecord_ranges_above": 0,
    }
    local = FileSource([path], **opts)
    remote = FileSource(
        f"s3://{BUCKET}/walks/first-tfrecord/", store_options=_options(s3, proxy.endpoint), **opts
    )
    proxy.reset_stats()
    rows = np.array([119, 0, 57])
    got, want = remote.read(0, rows), local.read(0, rows)
    assert got["x"].tobytes() == want["x"].tobytes()
    assert sorted(got["index"].tolist()) == sorted(want["index"].tolist())
    # The walk's GETs (4 KiB, then growing), then the records': not a GET a record.
    assert proxy.stats.requests <= 12
    for src in (local, remote):
        src.close()
