"""WebDataset tar shards on S3 (moto on 127.0.0.1): the local batches, by whole GETs
(shuffle="files") or by ranged GETs of the samples' members (shuffle="samples")."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture

from _tar_shards import COUNTS, expected, shards, write
from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import FormatError, PermissionDeniedError
from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration


def _digest(src: FileSource, steps: int = 8) -> str:
    with Loader(src, batch_size=4, seed=5, steps=steps) as loader:
        return batch_digest(loader)


def _put(s3: S3Fixture, root: Path, prefix: str) -> None:
    client = s3.server.info.boto3_client()
    for p in sorted(root.glob("*.tar")):
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{p.name}", Body=p.read_bytes())


def _source(s3: S3Fixture, prefix: str, endpoint: str | None = None, **kw: Any) -> FileSource:
    options = {**s3.options(), "retry": FAST_RETRY}
    if endpoint is not None:
        options["endpoint"] = endpoint
    return FileSource(f"s3://{BUCKET}/{prefix}", store_options=options, format="tar", **kw)


@pytest.mark.parametrize("shuffle", ["files", "samples"])
def test_shards_on_s3_give_the_local_batches(s3: S3Fixture, tmp_path: Path, shuffle: str) -> None:
    root = shards(tmp_path / "shards")
    _put(s3, root, f"tar/{shuffle}")
    local = FileSource(root, format="tar", shuffle=shuffle)
    remote = _source(s3, f"tar/{shuffle}", shuffle=shuffle)
    assert remote.counts.tolist() == COUNTS  # counted by ranged GETs of the headers
    assert remote.count_stats is not None and remote.count_stats.reads >= len(COUNTS)
    assert _digest(remote) == _digest(local)
    copy = pickle.loads(pickle.dumps(remote))  # a worker's copy: no count read again
    assert copy.count_stats is None and _digest(copy) == _digest(local)
    if shuffle == "samples":  # nor a header walked again: only the members are fetched
        fresh = pickle.loads(pickle.dumps(remote))
        got = fresh.read(5, np.arange(4))
        assert got["cls"].tolist() == expected(got["index"])
        assert fresh.files.store.stats.requests <= 2 * len(COUNTS)  # no 4 KiB walk GETs
    for src in (local, remote, copy):
        src.close()


def test_reads_by_samples_get_only_their_members(s3: S3Fixture, tmp_path: Path) -> None:
    members = []
    for i in range(16):  # samples of 200 KB: more than a GET joins across (64 KiB)
        members += [(f"{i:03d}.bin", bytes([i]) * 200_000), (f"{i:03d}.cls", str(i).encode())]
    for s in range(2):
        write(tmp_path / f"{s}.tar", members)
    _put(s3, tmp_path, "tar/members")
    ranged = _source(s3, "tar/members", shuffle="samples", datasets=("cls",))
    opened = ranged.files.store.stats.bytes
    got = ranged.read(1, np.arange(6))
    assert sorted(got["cls"].tolist()) == sorted(int(x) for x in ranged.file_item(got["index"])[1])
    # Six cls members (and those of the next six, read ahead), not 3.2 MB shards: the
    # headers were walked to count the samples at open, and their indexes kept.
    assert ranged.files.store.stats.bytes - opened <= 12 * 2
    ranged.close()


def test_a_damaged_shard_on_s3_is_refused_by_name(s3: S3Fixture, tmp_path: Path) -> None:
    path = write(tmp_path / "0.tar", [("a.cls", b"1"), ("b.txt", b"x" * 5000)])
    path.write_bytes(path.read_bytes()[:3000])
    _put(s3, tmp_path, "tar/cut")
    with pytest.raises(FormatError, match=r"tar/cut/0\.tar: truncated: the tar member at offset"):
        _source(s3, "tar/cut")


def test_a_negative_member_size_on_s3_is_refused_not_walked_for_ever(
    s3: S3Fixture, tmp_path: Path
) -> None:
    # Octal "-1000" is -512: the walk of ranged GETs stepped back onto the same header
    # and listed its member again, for ever.
    path = write(tmp_path / "0.tar", [("a.cls", b"1"), ("b.cls", b"2")])
    data = bytearray(path.read_bytes())
    h = 1024  # b.cls's header (a.cls's data is the block before)
    data[h + 124 : h + 136] = b"-1000\0     \0"
    data[h + 148 : h + 156] = b" " * 8
    data[h + 148 : h + 156] = b"%06o\0 " % sum(data[h : h + 512])
    path.write_bytes(bytes(data))
    _put(s3, tmp_path, "tar/negative")
    with pytest.raises(
        FormatError, match=r"tar/negative/0\.tar: the tar header at offset 1024 gives size -512"
    ):
        _source(s3, "tar/negative")


def test_a_failed_header_or_member_get_names_the_object(
    s3: S3Fixture, tmp_path: Path, proxy: LatencyProxy
) -> None:
    shards(tmp_path / "shards")
    _put(s3, tmp_path / "shards", "tar/denied")
    at = f"GET /{BUCKET}/tar/denied/shard-00001.tar"
    proxy.set_faults([FaultRule(kind="status", status=403, match=at)])
    with pytest.raises(PermissionDeniedError, match=r"tar/denied/shard-00001\.tar"):
        _source(s3, "tar/denied", proxy.endpoint)  # its headers, walked to count
    proxy.set_faults([])
    src = _source(s3, "tar/denied", proxy.endpoint, shuffle="samples")
    proxy.set_faults([FaultRule(kind="status", status=403, match=at)])
    with pytest.raises(PermissionDeniedError, match=r"tar/denied/shard-00001\.tar"):
        src.read(0, np.arange(sum(COUNTS)))  # its members, by ranged GETs
    src.close()


def test_sample_keys_on_s3_walk_only_the_shards_asked(s3: S3Fixture, tmp_path: Path) -> None:
    root = shards(tmp_path / "shards")
    _put(s3, root, "tar/keys")
    local = FileSource(root, format="tar")
    remote = _source(s3, "tar/keys", samples_per_file=COUNTS)  # no walk when opened
    index = np.array([sum(COUNTS) - 1, 2, 6])
    before = remote.files.store.stats.requests
    assert remote.sample_keys(index) == local.sample_keys(index)
    assert remote.files.store.stats.requests > before  # walked by ranged GETs now
    before = remote.files.store.stats.requests
    assert remote.sample_keys(index[::-1]) == local.sample_keys(index[::-1])
    assert remote.files.store.stats.requests == before  # the walks were kept
    for src in (local, remote):
        src.close()
