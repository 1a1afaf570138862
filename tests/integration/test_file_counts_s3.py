"""Per-file sample counts read from headers on S3 (moto on 127.0.0.1, through the proxy)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture

from _count_files import COUNTS, FORMAT
from _count_files import dataset as counted
from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import PermissionDeniedError, StorageError
from headrace.formats import FileSource
from headrace.formats._file_counts import header_counts
from headrace.formats._file_list import list_files
from headrace.formats._files import file_format
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

KINDS = ("npy", "npz", "npzc", "hdf5")


def dataset(root: Path, kind: str) -> Path:
    # 16 KiB a sample, noisy: a file is larger than the reads that count it.
    return counted(root, kind, shape=(64, 64), noise=True)


@pytest.fixture(scope="module")
def local(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each kind's files under ``root/<kind>`` and as objects under ``counts/<kind>/``."""
    root = tmp_path_factory.mktemp("count-sets")
    client = s3.server.info.boto3_client()
    for kind in KINDS:
        for path in sorted(dataset(root / kind, kind).iterdir()):
            client.put_object(
                Bucket=BUCKET, Key=f"counts/{kind}/{path.name}", Body=path.read_bytes()
            )
    return root


def on_s3(s3: S3Fixture, kind: str, endpoint: str | None = None, **kw: Any) -> FileSource:
    options = {**s3.options(), "retry": FAST_RETRY}
    if endpoint is not None:
        options["endpoint"] = endpoint
    opts: dict[str, Any] = {"datasets": ("x", "y")} if kind == "hdf5" else {}
    kw.setdefault("samples_per_file", "header")
    return FileSource(
        f"s3://{BUCKET}/counts/{kind}",
        store_options=options,
        format=FORMAT.get(kind, kind),
        **opts,
        **kw,
    )


def digest(src: FileSource) -> str:
    with Loader(src, batch_size=4, seed=8, steps=15) as loader:
        return batch_digest(loader)


@pytest.mark.parametrize("kind", KINDS)
def test_counts_and_batches_on_s3_match_local_files(
    s3: S3Fixture, local: Path, proxy: LatencyProxy, kind: str
) -> None:
    src = on_s3(s3, kind, proxy.endpoint)
    assert src.counts.tolist() == COUNTS
    stats = proxy.stats
    n = len(COUNTS)
    # One LIST, then ranged GETs of the headers only (the files are read by the batches):
    # an NPY header's 128 bytes, an NPZ's directory (4 KiB at the end) and its member's
    # header (4 KiB), an HDF5 file's first 16 KiB (and the next 4 KiB for a chunk index).
    assert src.count_stats is not None
    assert stats.requests == 1 + src.count_stats.reads
    assert src.count_stats.reads <= {"npy": 1}.get(kind, 2) * (n - 1) + 1  # r002 is tiny
    assert stats.bytes_down < sum(src.files.sizes) // 3, (stats.bytes_down, src.files.sizes)
    opts: dict[str, Any] = {"datasets": ("x", "y")} if kind == "hdf5" else {}
    here = FileSource(
        local / kind, format=FORMAT.get(kind, kind), samples_per_file="header", **opts
    )
    assert digest(src) == digest(here)
    assert src.fingerprint() == here.fingerprint()


def test_npy_headers_are_ranged_gets_of_their_bytes_many_in_flight(
    s3: S3Fixture, tmp_path: Path, proxy: LatencyProxy
) -> None:
    client = s3.server.info.boto3_client()
    lengths = [40 + f % 5 for f in range(96)]
    for f, c in enumerate(lengths):
        path = tmp_path / f"s{f:03d}.npy"
        np.save(path, np.full((c, 256), f, dtype=np.float32))  # 40 KiB of data each
        client.put_object(Bucket=BUCKET, Key=f"many/{path.name}", Body=path.read_bytes())
    proxy.set_faults([])
    proxy.reset_stats()
    options = {**s3.options(), "retry": FAST_RETRY, "endpoint": proxy.endpoint}
    src = FileSource(
        f"s3://{BUCKET}/many", store_options=options, format="npy", samples_per_file="header"
    )
    stats = proxy.stats
    assert src.counts.tolist() == lengths
    assert stats.requests == 1 + 96
    # The headers' 128 bytes each, the answers' HTTP headers and the listing: not 3.9 MB.
    assert stats.bytes_down < 96 * (128 + 1024) + 40_000, stats.bytes_down
    assert stats.max_in_flight > 1
    src.close()


def test_a_denied_header_read_names_the_object(
    s3: S3Fixture, local: Path, proxy: LatencyProxy
) -> None:
    proxy.set_faults(
        [FaultRule(kind="status", status=403, match="GET /headrace-test/counts/npz/r005")]
    )
    with pytest.raises(PermissionDeniedError, match=r"counts/npz/r005\.npz"):
        on_s3(s3, "npz", proxy.endpoint)
    # Retried failures: the count is read as if none had failed. Three at most, so no GET
    # can fail all 4 of its tries.
    proxy.set_faults(
        [
            FaultRule(
                kind="status", status=503, match="GET /headrace-test/counts/npy/", every=3, limit=3
            )
        ]
    )
    assert on_s3(s3, "npy", proxy.endpoint).counts.tolist() == COUNTS


def test_an_object_replaced_since_it_was_listed_is_refused(
    s3: S3Fixture, local: Path, tmp_path: Path
) -> None:
    client = s3.server.info.boto3_client()
    for path in sorted(dataset(tmp_path / "v", "npy").iterdir()):
        client.put_object(Bucket=BUCKET, Key=f"replaced/{path.name}", Body=path.read_bytes())
    options = {**s3.options(), "retry": FAST_RETRY}
    files = list_files(f"s3://{BUCKET}/replaced", extensions=(".npy",), store_options=options)
    try:
        body = (tmp_path / "v" / "r004.npy").read_bytes()
        client.put_object(Bucket=BUCKET, Key="replaced/r004.npy", Body=body[:-4] + b"\0\0\0\1")
        with pytest.raises(StorageError, match=r"replaced/r004\.npy.*changed while open"):
            header_counts(files, file_format("npy"), None, 4)
    finally:
        files.close()


@pytest.mark.parametrize("kind", ["npy", "npz", "hdf5"])
def test_a_warm_cache_serves_the_headers_with_no_get(
    s3: S3Fixture, local: Path, proxy: LatencyProxy, tmp_path: Path, kind: str
) -> None:
    # A restart over a warm cache_dir: every file is there whole, so counting its header
    # is a read of that entry, not a ranged GET (10,000 files were 10,000 GETs before the
    # first batch).
    cold = on_s3(s3, kind, proxy.endpoint, cache_dir=tmp_path / "c", samples_per_file=COUNTS)
    for i in range(len(cold.files)):  # a run that read every file (the empty one too)
        cold.files.fetch(i)
    want = digest(cold)
    assert cold.cache_stats is not None and cold.cache_stats.written == len(COUNTS)
    proxy.reset_stats()
    warm = on_s3(s3, kind, proxy.endpoint, cache_dir=tmp_path / "c")
    assert proxy.stats.requests == 1  # the LIST: before, 1 + a GET or two per file
    assert warm.counts.tolist() == COUNTS
    assert digest(warm) == want
    assert proxy.stats.requests == 1
    assert warm.files.store.stats.bytes == 0
    cold.close()
    warm.close()


def test_a_damaged_cache_entry_is_counted_from_the_store(
    s3: S3Fixture, local: Path, proxy: LatencyProxy, tmp_path: Path
) -> None:
    # The first run knew its counts: no count entry (that would serve the restart), so
    # the restart counts from each file's entry.
    cold = on_s3(s3, "npz", proxy.endpoint, cache_dir=tmp_path / "c", samples_per_file=COUNTS)
    want = digest(cold)
    files = cold.files
    assert files.cache is not None and files.cache_key is not None
    i = files.keys.index("r005.npz")
    etag = files.etags[i]
    assert etag is not None
    entry = Path(files.cache.path(files.cache_key(i), files.sizes[i], etag))
    data = bytearray(entry.read_bytes())
    data[files.sizes[i] - 100] ^= 0xFF  # in the zip's directory, which the count reads
    entry.write_bytes(bytes(data))
    proxy.reset_stats()
    with pytest.warns(RuntimeWarning, match=r"not what was written \(checksum\); removed"):
        warm = on_s3(s3, "npz", proxy.endpoint, cache_dir=tmp_path / "c")
    assert warm.counts.tolist() == COUNTS
    assert warm.count_stats is not None
    assert 1 < proxy.stats.requests <= 4  # the LIST and r005's header reads, from the store
    assert warm.cache_stats is not None and warm.cache_stats.bad_entries == 1
    assert not entry.exists()  # removed: the batches read r005 from the store
    assert digest(warm) == want
    cold.close()
    warm.close()


def test_a_cached_file_past_the_bound_is_counted_by_gets(
    s3: S3Fixture,
    local: Path,
    proxy: LatencyProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Reading a header from a cache entry first checks the whole entry (its checksum
    # covers every byte): past HEADERS_FROM_CACHE_UP_TO, one or two ranged GETs cost less
    # (168 cached 140 MB NPZ files were 23 GB read before planning).
    from headrace.formats import _file_counts

    cold = on_s3(s3, "npz", proxy.endpoint, cache_dir=tmp_path / "c", samples_per_file=COUNTS)
    for i in range(len(cold.files)):
        cold.files.fetch(i)
    want = digest(cold)
    monkeypatch.setattr(_file_counts, "HEADERS_FROM_CACHE_UP_TO", 0)  # below every file
    proxy.reset_stats()
    warm = on_s3(s3, "npz", proxy.endpoint, cache_dir=tmp_path / "c")
    assert warm.counts.tolist() == COUNTS
    assert proxy.stats.requests > len(COUNTS)  # the LIST, and each file's header GETs
    assert warm.cache_stats is not None and warm.cache_stats.hits == 0
    assert digest(warm) == want  # the batches still read the cached entries
    cold.close()
    warm.close()


def test_a_restart_reads_the_counts_kept_in_the_cache_and_counts_again_after_a_change(
    s3: S3Fixture, local: Path, proxy: LatencyProxy, tmp_path: Path
) -> None:
    # Counting reads each header (a ranged GET or two a file); the counts are kept as one
    # cache entry named by the whole listing, so a restart reads them with no GET, even
    # with no file read yet; an object replaced since (a new ETag) counts them again.
    client = s3.server.info.boto3_client()
    for path in sorted((local / "npy").iterdir()):
        client.put_object(Bucket=BUCKET, Key=f"kept/{path.name}", Body=path.read_bytes())
    options = {**s3.options(), "retry": FAST_RETRY, "endpoint": proxy.endpoint}

    def source() -> FileSource:
        return FileSource(
            f"s3://{BUCKET}/kept", store_options=options, format="npy",
            samples_per_file="header", cache_dir=tmp_path / "c",
        )  # fmt: skip

    cold = source()
    assert cold.count_stats is not None and not cold.count_stats.from_cache
    assert cold.count_stats.reads >= len(COUNTS) - 1  # every file's header but the empty one
    proxy.reset_stats()
    warm = source()
    assert proxy.stats.requests == 1  # the LIST
    assert warm.count_stats is not None and warm.count_stats.from_cache
    assert warm.count_stats.reads == 0 and warm.counts.tolist() == COUNTS
    assert digest(warm) == digest(cold)
    # Object 3 replaced by one of 7 samples (another ETag): counted again, 7 read.
    name = sorted((local / "npy").iterdir())[3].name
    body = io.BytesIO()
    np.save(body, np.zeros((7, 64, 64), np.float32))
    client.put_object(Bucket=BUCKET, Key=f"kept/{name}", Body=body.getvalue())
    again = source()
    assert again.count_stats is not None and not again.count_stats.from_cache
    assert again.counts.tolist() == [*COUNTS[:3], 7, *COUNTS[4:]]
    for src in (cold, warm, again):
        src.close()
