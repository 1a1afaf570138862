"""NPY files of many samples on S3 (moto) under shuffle="samples": ranged GETs of the
header and the rows a read asks, not one whole-object GET per sample."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _cache_passes import later_passes_hit_the_cache
from s3util import BUCKET, FAST_RETRY, S3Fixture

from headrace.errors import FormatError, StorageError
from headrace.formats import FileSource
from headrace.formats._sparse import MappedImage
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration


def _digest(src: FileSource, steps: int = 3, batch: int = 4) -> str:
    with Loader(src, batch_size=batch, seed=5, steps=steps) as loader:
        return batch_digest(loader)


def _put(s3: S3Fixture, root: Path, prefix: str) -> None:
    client = s3.server.info.boto3_client()
    for p in sorted(root.glob("*.npy")):
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{p.name}", Body=p.read_bytes())


def _source(s3: S3Fixture, prefix: str, **kw: Any) -> FileSource:
    options = {**s3.options(), "retry": FAST_RETRY}
    return FileSource(f"s3://{BUCKET}/{prefix}", store_options=options, format="npy", **kw)


def _rows_of_4_kib(s3: S3Fixture, root: Path, prefix: str, files: int, seed: int) -> None:
    """``files`` NPY files of 1,024 float32 rows of 4 KiB (4 MiB each) in ``root``, and
    as objects under ``prefix``."""
    rng = np.random.default_rng(seed)
    for i in range(files):
        np.save(root / f"{i}.npy", rng.standard_normal((1024, 1024)).astype(np.float32))
    _put(s3, root, prefix)


def _joined_entries(src: FileSource) -> set[str]:
    """The entries a cache holds for ``src``'s objects once each was joined: its whole
    entry and its table of block checksums."""
    files, cache = src.files, src.files.cache
    assert cache is not None and files.cache_key is not None
    out = set()
    for i in range(len(files.sizes)):
        key, size, etag = files.cache_key(i), files.sizes[i], files.etags[i]
        assert etag is not None
        out |= {cache.path(key, size, etag), cache._table_path(key, size, etag)}
    return out


def test_rows_by_ranged_gets_give_the_local_batches(s3: S3Fixture, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    for i in range(5):  # 5 files of 64 samples of 64x64 float32 (1 MiB an object)
        np.save(tmp_path / f"{i}.npy", rng.standard_normal((64, 64, 64), dtype=np.float32))
    _put(s3, tmp_path, "npyrows/a")
    local = _digest(FileSource(tmp_path, format="npy", samples_per_file=64, shuffle="samples"))
    whole = _source(s3, "npyrows/a", samples_per_file=64, shuffle="samples", mode="map-style")
    # 1 MiB objects are read whole by default (from 8 MiB by rows on object storage).
    assert _source(s3, "npyrows/a", samples_per_file=64, shuffle="samples")._by_rows is None
    ranged = _source(s3, "npyrows/a", samples_per_file=64, shuffle="samples", npy_ranges_above=0)
    assert _digest(whole) == local
    assert _digest(ranged) == local
    # 12 rows of 16 KiB (each joined with at most a 64 KiB gap) and 5 headers, where
    # whole objects were one 1 MiB GET per sample (map-style) or per file and read.
    row = 64 * 64 * 4
    assert ranged.files.store.stats.bytes <= 12 * (row + (64 << 10)) + 5 * 4096
    assert whole.files.store.stats.bytes >= 12 * (1 << 20)
    # Counted from the headers too, and a worker's copy reads the same.
    counted = _source(
        s3, "npyrows/a", samples_per_file="header", shuffle="samples", npy_ranges_above=0
    )
    assert _digest(counted) == local
    whole.close()
    ranged.close()
    counted.close()


def test_header_counts_hand_their_headers_to_the_reads_by_rows(
    s3: S3Fixture, tmp_path: Path
) -> None:
    # samples_per_file="header" GETs every header to count; the reads by rows then
    # GET each file's header again at its first read (where no file of its size was
    # read yet, before its rows: a round trip of its own). Rows of 80 KiB, more than
    # the 64 KiB gap a GET joins across, and objects of other sizes (no layout to
    # guess): 3 steps of 4 samples from 4 objects.
    rng = np.random.default_rng(1)
    for i in range(4):
        np.save(tmp_path / f"{i}.npy", rng.standard_normal((24 + i, 20480), dtype=np.float32))
    _put(s3, tmp_path, "npyrows/heads")
    kw: dict[str, Any] = {"shuffle": "samples", "npy_ranges_above": 0}
    local = FileSource(tmp_path, format="npy", samples_per_file="header", **kw)
    counted = _source(s3, "npyrows/heads", samples_per_file="header", **kw)
    given = _source(s3, "npyrows/heads", samples_per_file=(24, 25, 26, 27), **kw)
    assert counted.count_stats is not None and counted.count_stats.reads == 4
    opened = counted.files.store.stats.requests  # the LIST and the count's 4 header GETs
    assert opened == 5
    samples = np.arange(0, 102, 9)  # 12 samples, from every file
    want = local.read(5, samples)["data"]
    for src in (counted, given):  # read directly: no read-ahead to vary the GETs
        np.testing.assert_array_equal(src.read(5, samples)["data"], want)
    rows = counted.files.store.stats
    ranged = given.files.store.stats
    # The same row GETs, and the headers only where no count read them: 128 bytes each
    # (the given source's 1 request before its reads: the LIST). The counts given place
    # the rows, so each header is fetched with them (its own GET only where no row asked
    # lies within 64 KiB of it), not a round trip before them: 3 more GETs, 4 before.
    assert 0 < ranged.requests - 1 - (rows.requests - opened) <= 4
    assert ranged.bytes - (rows.bytes - 4 * 128) == 4 * 128
    local.close()
    counted.close()
    given.close()


def test_a_worker_copy_reads_rows_without_reading_the_headers_again(
    s3: S3Fixture, tmp_path: Path
) -> None:
    # A DataLoader worker's copy (pickled) carried the counts, not the headers: its
    # first read of each file GET the header again (4 GETs more here, a round trip each
    # before the rows). Now the headers travel with it, deduplicated: same bytes read.
    rng = np.random.default_rng(2)
    for i in range(4):
        np.save(tmp_path / f"{i}.npy", rng.standard_normal((24 + i, 20480), dtype=np.float32))
    _put(s3, tmp_path, "npyrows/copy")
    kw: dict[str, Any] = {"shuffle": "samples", "npy_ranges_above": 0}
    parent = _source(s3, "npyrows/copy", samples_per_file="header", **kw)
    opened = parent.files.store.stats.requests  # the LIST and the count's 4 header GETs
    samples = np.arange(0, 102, 9)  # 12 samples, from every file
    want = parent.read(5, samples)["data"]
    reads = parent.files.store.stats.requests - opened
    copy = pickle.loads(pickle.dumps(parent))
    assert copy.fingerprint() == parent.fingerprint()
    np.testing.assert_array_equal(copy.read(5, samples)["data"], want)
    assert copy.files.store.stats.requests == reads  # no LIST, no header GET
    assert copy.files.store.stats.bytes == parent.files.store.stats.bytes - 4 * 128
    parent.close()
    copy.close()


def test_a_truncated_object_is_refused_by_name(s3: S3Fixture, tmp_path: Path) -> None:
    np.save(tmp_path / "0.npy", np.zeros((16, 256), np.float32))
    np.save(tmp_path / "1.npy", np.zeros((16, 256), np.float32))
    body = (tmp_path / "1.npy").read_bytes()
    (tmp_path / "1.npy").write_bytes(body[: len(body) - 1000])  # cut short on upload
    _put(s3, tmp_path, "npyrows/cut")
    src = _source(s3, "npyrows/cut", samples_per_file=16, shuffle="samples", npy_ranges_above=0)
    with pytest.raises(FormatError, match=r"npyrows/cut/1\.npy: truncated: header says 16384"):
        src.read(0, np.arange(32))
    src.close()


def test_npz_rows_by_ranged_gets_give_the_local_batches(s3: S3Fixture, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    for i in range(4):  # np.savez: stored members, 1 MiB of x a file
        x = rng.standard_normal((64, 64, 64), dtype=np.float32)
        np.savez(tmp_path / f"{i}.npz", x=x, y=np.arange(64) + 100 * i)
    client = s3.server.info.boto3_client()
    for p in sorted(tmp_path.glob("*.npz")):
        client.put_object(Bucket=BUCKET, Key=f"npzrows/{p.name}", Body=p.read_bytes())
    options = {**s3.options(), "retry": FAST_RETRY}
    kw: dict[str, Any] = {"format": "npz", "samples_per_file": 64, "shuffle": "samples"}
    local = _digest(FileSource(tmp_path, **kw))
    whole = FileSource(f"s3://{BUCKET}/npzrows", store_options=options, **kw)
    ranged = FileSource(f"s3://{BUCKET}/npzrows", store_options=options, npz_ranges_above=0, **kw)
    assert whole._by_rows is None and ranged._by_rows is not None
    assert _digest(whole) == local
    assert _digest(ranged) == local
    assert ranged.files.store.stats.bytes < 0.3 * whole.files.store.stats.bytes
    whole.close()
    ranged.close()


@pytest.mark.parametrize("fmt", ["npy", "npz"])
def test_rows_through_cache_dir_are_found_again_in_any_later_epoch(
    s3: S3Fixture, tmp_path: Path, fmt: str
) -> None:
    # Entries were the spans one read joined, which differ with the rows that share a
    # read: epoch 1 found 11-22 of 66 reads in the cache and wrote ~13 MB more for 4 MiB
    # of rows (fails before: misses in every later pass). Now entries are the 64 KiB
    # blocks the rows touch: a later pass (other epoch, other seed) reads none from S3.
    rng = np.random.default_rng(3)
    client = s3.server.info.boto3_client()
    for i in range(4):  # 4 objects of 256 rows of 4 KiB (NPZ: stored, one member)
        x = rng.standard_normal((256, 1024)).astype(np.float32)
        path = tmp_path / f"{i}.{fmt}"
        if fmt == "npy":
            np.save(path, x)
        else:
            np.savez(path, x=x)
        client.put_object(Bucket=BUCKET, Key=f"cached/{fmt}/{path.name}", Body=path.read_bytes())
    kw: dict[str, Any] = {"format": fmt, "samples_per_file": 256, "shuffle": "samples"}
    local = FileSource(tmp_path, **kw)

    def cached() -> FileSource:
        options = {**s3.options(), "retry": FAST_RETRY}
        return FileSource(
            f"s3://{BUCKET}/cached/{fmt}",
            store_options=options,
            cache_dir=tmp_path / "cache",
            **{f"{fmt}_ranges_above": 0},
            **kw,
        )

    later_passes_hit_the_cache(local, cached, 1024, "_by_rows")
    # By then each object's blocks were all there, and joined into its whole entry: a
    # read opens one entry, not one a block (and the blocks are gone).
    src = cached()
    held = {str(p) for p in (tmp_path / "cache").rglob("*") if p.is_file()}
    assert held - {str(tmp_path / "cache" / ".headrace-bytes")} == _joined_entries(src)
    src.close()


def test_rows_of_objects_whose_blocks_were_joined_are_read_through_a_map(
    s3: S3Fixture, tmp_path: Path
) -> None:
    # Once joined, an object's whole entry is a local file: a read whose rows' pages are
    # in memory maps it and the decode copies the rows from the page cache, as for a
    # local file (a warm epoch of 4 KiB rows: 0.22 -> ~0.12 s), not one pread a row
    # into a buffer of the object's size. An entry cut short under the map is refused.
    _rows_of_4_kib(s3, tmp_path, "npyrows/mapped", 4, seed=6)
    kw: dict[str, Any] = {"samples_per_file": 1024, "shuffle": "samples", "npy_ranges_above": 0}
    local = FileSource(tmp_path, format="npy", **kw)
    want = _digest(local, steps=64, batch=64)

    def cached() -> FileSource:
        return _source(s3, "npyrows/mapped", cache_dir=tmp_path / "cache", **kw)

    for _ in range(2):  # fills the blocks, then joins them
        src = cached()
        assert _digest(src, steps=64, batch=64) == want
        src.close()
    src = cached()
    assert _digest(src, steps=64, batch=64) == want
    assert src._by_rows is not None and src._by_rows.mapped > 0
    stats = src.cache_stats
    assert stats is not None and stats.misses == 0 and stats.hit_bytes >= 4 * (4 << 20)
    assert src.files.store.stats.bytes == 0
    image = src._by_rows.image(0, np.arange(0, 1024, 4))
    assert isinstance(image, MappedImage)
    entry = src.files.cache.path(src.files.cache_key(0), src.files.sizes[0], src.files.etags[0])
    os.truncate(entry, 1 << 20)
    with pytest.raises(StorageError, match=r"0\.npy: its cache entry was cut to 1048576 bytes"):
        image.want(np.arange(4))
    image.file.close()
    src.close()
    local.close()


def test_a_joined_entrys_map_is_kept_and_its_blocks_still_checked(
    s3: S3Fixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As a local file's, an entry's map is kept between visits (opened once), but the
    # blocks a visit reads are checked as before, once a process: a block damaged after
    # the map was kept is found at the visit that first reads it, the entry removed,
    # and the rows read from the store; also where the read before read the same
    # object (until 2026-12-06 its image was kept for the next read as it was, and the
    # rows that read asked were copied from unchecked blocks).
    import headrace.formats._file_list as file_list

    _rows_of_4_kib(s3, tmp_path, "npyrows/kept", 2, seed=7)
    kw: dict[str, Any] = {"samples_per_file": 1024, "shuffle": "samples", "npy_ranges_above": 0}
    local = FileSource(tmp_path, format="npy", **kw)

    def cached() -> FileSource:
        return _source(s3, "npyrows/kept", cache_dir=tmp_path / "cache", **kw)

    for _ in range(2):  # fills the blocks, then joins them
        src = cached()
        _digest(src, steps=32, batch=64)
        src.close()
    opened: list[int] = []
    cached_map = file_list.FileList.cached_map

    def counted(self: file_list.FileList, i: int, spans: Any) -> Any:
        opened.append(i)
        return cached_map(self, i, spans)

    monkeypatch.setattr(file_list.FileList, "cached_map", counted)
    src = cached()
    files, items = src.plan.locate(0, np.arange(src.samples_per_epoch))

    def rows_of(f: int, rows: range) -> np.ndarray:
        """The samples of object ``f``'s rows ``rows`` (4 KiB each: 16 a 64 KiB block;
        through a map where they join into 1 MiB or more)."""
        return np.flatnonzero((files == f) & np.isin(items, list(rows)))

    def read(asked: np.ndarray) -> None:
        assert batch_digest([src.read(0, asked)]) == batch_digest([local.read(0, asked)])

    # The objects take turns (the last file of a read is kept for the next as it is,
    # not visited again): read by ranges first (learning each header), then through
    # a map, then through the map kept.
    for rows in (range(0, 512, 2), range(1, 512, 2), range(0, 512, 4)):
        for f in (0, 1):
            read(rows_of(f, rows))
    assert src._by_rows is not None and src._by_rows.mapped == 4
    assert opened == [0, 1]
    # A read through a map counts the bytes it copies as the cache's hits: its header
    # and rows (each visit counted the rows noted when the map was made, or the whole
    # entry where none were; a read of an image kept from the last read, nothing).
    stats = src.cache_stats
    assert stats is not None
    before = stats.hit_bytes
    read(rows_of(0, range(1, 512, 4)))
    assert stats.hit_bytes - before == 128 + 128 * 4096  # its header and rows
    before = stats.hit_bytes
    read(rows_of(0, range(3, 512, 4)))  # the same image, kept from that read
    assert stats.hit_bytes - before == 128 + 128 * 4096  # (the decode reads the header)
    entry = src.files.cache.path(src.files.cache_key(0), src.files.sizes[0], src.files.etags[0])
    with open(entry, "r+b") as f:  # in block 37 (rows 608-623), not read yet
        f.seek(128 + 612 * 4096)
        f.write(b"\xff" * 64)
    with pytest.warns(RuntimeWarning, match=r"has bytes that are not what was written"):
        read(rows_of(0, range(512, 1024, 2)))
    assert not os.path.exists(entry)
    assert src.files.store.stats.bytes > 0  # the rows came from the store
    src.close()
    local.close()


_READER = """
import json, sys
from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest
url, options, cache, seeds = sys.argv[1:]
src = FileSource(url, store_options=json.loads(options), cache_dir=cache, format="npy",
                 samples_per_file=1024, shuffle="samples", npy_ranges_above=0)
for seed in seeds.split(","):
    with Loader(src, batch_size=64, seed=int(seed), steps=64) as loader:
        print(batch_digest(loader), flush=True)
print(json.dumps(src.cache_stats.to_dict()))
"""


def test_processes_reading_one_cache_join_each_object_once_and_lose_nothing(
    s3: S3Fixture, tmp_path: Path
) -> None:
    # Two processes (ranks, workers) fill one cache and join its objects side by side:
    # one's join removes blocks the other may be reading (it then reads the whole entry),
    # and a join claimed by one is left to it by the other. The batches are the local files', and
    # the cache ends holding each object's whole entry and table: no block, no temporary.
    _rows_of_4_kib(s3, tmp_path, "npyrows/shared", 3, seed=9)
    kw: dict[str, Any] = {"samples_per_file": 1024, "shuffle": "samples", "npy_ranges_above": 0}
    local = FileSource(tmp_path, format="npy", **kw)
    want = {}
    for seed in (1, 2, 3, 4):
        with Loader(local, batch_size=64, seed=seed, steps=64) as loader:
            want[seed] = batch_digest(loader)
    cache = tmp_path / "cache"
    options = json.dumps(s3.options())
    argv = [sys.executable, "-c", _READER, f"s3://{BUCKET}/npyrows/shared", options, str(cache)]
    runs = [subprocess.Popen([*argv, seeds], stdout=subprocess.PIPE, text=True)
            for seeds in ("1,2,3", "2,3,4")]  # fmt: skip
    outs = [p.communicate(timeout=120)[0].splitlines() for p in runs]
    assert [p.returncode for p in runs] == [0, 0]
    assert outs[0][:3] == [want[1], want[2], want[3]]
    assert outs[1][:3] == [want[2], want[3], want[4]]
    joined = sum(json.loads(out[3])["joined"] for out in outs)
    assert joined == 3  # each object once: one join a time, a second copy never placed
    held = [p for p in cache.rglob("*") if p.is_file()]
    assert not [p for p in held if ".tmp-" in p.name]
    src = _source(s3, "npyrows/shared", cache_dir=cache, **kw)
    assert {str(p) for p in held} == _joined_entries(src)
    src.close()
    local.close()


def test_rows_through_a_full_cache_fetch_their_own_bytes_not_blocks(
    s3: S3Fixture, tmp_path: Path
) -> None:
    # A cache that cannot write (full: it never evicts) keeps no block, so fetching one
    # for each row would cost 16 times a 4 KiB row's bytes on every read, for nothing.
    _rows_of_4_kib(s3, tmp_path, "npyrows/full", 2, seed=4)
    kw: dict[str, Any] = {"samples_per_file": 1024, "shuffle": "samples", "npy_ranges_above": 0}
    local = _digest(FileSource(tmp_path, format="npy", **kw), steps=32, batch=16)
    bare = _source(s3, "npyrows/full", **kw)
    assert _digest(bare, steps=32, batch=16) == local
    full = _source(s3, "npyrows/full", cache_dir=tmp_path / "c", cache_bytes=200_000, **kw)
    assert _digest(full, steps=32, batch=16) == local
    assert full.cache_stats.full > 0 and full.cache_stats.written <= 3
    # 1.13x the bare reads' bytes here (the blocks of the first reads, in flight before
    # it filled up); a block a row would have been ~33 MB, 3.4x.
    assert full.files.store.stats.bytes <= 1.5 * bare.files.store.stats.bytes
    bare.close()
    full.close()


@pytest.mark.parametrize("header", [128, 256])
def test_files_of_sizes_not_seen_yet_are_one_batch_of_gets(
    s3: S3Fixture, tmp_path: Path, header: int
) -> None:
    # A file of a size not seen yet read its header, then its rows: two GETs in series
    # (10,000 local files of 1,000 sizes: 868 header reads for 1,985 files read; fails
    # before: 36 GETs for 23 files here). Now the count given (samples_per_file=8) places
    # the rows after the last header length seen: one GET; a header longer than guessed
    # (256 bytes: a structured dtype's long field names) costs the files in flight before
    # the first header came back a second one.
    if header == 128:
        dtype = np.dtype("<f4")
    else:
        dtype = np.dtype([(f"a_rather_long_field_name_{k}", "<f4") for k in range(4)])
    for i in range(24):  # 24 objects of 24 sizes, 8 samples each
        n = 8 * (50 + 3 * i) * dtype.itemsize
        raw = np.random.default_rng(i).integers(0, 255, n, np.uint8)
        np.save(tmp_path / f"{i:02d}.npy", raw.view(dtype).reshape(8, 50 + 3 * i))
    _put(s3, tmp_path, f"npyrows/sizes{header}")
    kw: dict[str, Any] = {"samples_per_file": 8, "shuffle": "samples", "npy_ranges_above": 0}
    local = _digest(FileSource(tmp_path, format="npy", **kw), steps=4, batch=6)
    src = _source(s3, f"npyrows/sizes{header}", **kw)
    assert _digest(src, steps=4, batch=6) == local
    files, gets = src.stats.fetches, src.files.store.stats.requests - 1  # less the listing
    if header == 128:
        assert gets == files
    else:  # the files in flight before the first header came back guessed 128
        assert gets <= files + src.in_flight
        assert src._by_rows is not None and src._by_rows._offset == header
    src.close()
