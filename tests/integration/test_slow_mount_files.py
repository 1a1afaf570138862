"""Which mount a path is on, read from /proc/mounts, and what readers make of it:
file datasets on a network or FUSE mount read 64 files ahead (each read is a
round trip, as on object storage), on a local disk 16. Real mounts (slowfs,
FUSE); the speed-up is in benchmarks/files_slowfs.py (docs/emulate-slowfs.md).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from headrace.bench._probe import filesystem_of
from headrace.errors import ConfigError, StorageError
from headrace.formats import FileSource, PaddedRows, Table, TokenSource
from headrace.io._mounts import is_network_fs, mount_of
from headrace.pipeline import Loader

pytestmark = pytest.mark.integration


def _npys(root: Path, n: int = 8) -> None:
    root.mkdir()
    for i in range(n):
        np.save(root / f"{i}.npy", np.full((4,), i, dtype=np.int32))


def test_a_fuse_mount_is_found_even_with_a_space_in_its_path(slow_mount, tmp_path: Path) -> None:
    src = tmp_path / "src"
    _npys(src)
    m = slow_mount(src)
    got = mount_of(m.mnt / "3.npy")
    assert got is not None
    assert got.mount == str(m.mnt) and got.fstype.startswith("fuse")
    assert is_network_fs(m.mnt / "3.npy") and not is_network_fs(src / "3.npy")
    assert filesystem_of(str(m.mnt))["network"] is True  # what headrace probe reports
    # /proc/mounts writes a space as \\040: the path must still match.
    spaced = tmp_path / "mount point"
    spaced.mkdir()
    from headrace.emulate import SlowMount

    with SlowMount(src, spaced, stats_interval_s=0.05) as m2:
        got = mount_of(m2.mnt / "3.npy")
        assert got is not None and got.mount == str(spaced), got
        assert is_network_fs(m2.mnt)


def test_a_mount_point_with_non_ascii_characters_is_found(slow_mount, tmp_path: Path) -> None:
    del slow_mount  # skips where FUSE is unavailable
    # /proc/mounts escapes only space, tab, newline and backslash (as \\ooo octal);
    # other characters are the path's own UTF-8 bytes, which must not be taken for
    # escapes (a mount at /mnt/données was missed, and read as the local disk under it).
    src = tmp_path / "src"
    _npys(src)
    from headrace.emulate import SlowMount

    with SlowMount(src, tmp_path / "données d'entraînement 数据", stats_interval_s=0.05) as m:
        got = mount_of(m.mnt / "3.npy")
        assert got is not None and got.mount == str(m.mnt), got
        assert is_network_fs(m.mnt / "3.npy")
        with FileSource(m.mnt, format="npy") as far:
            assert far.in_flight == 64


def test_files_on_a_fuse_mount_read_64_ahead_and_16_on_local_disk(
    slow_mount, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    _npys(src)
    m = slow_mount(src)
    with FileSource(m.mnt, format="npy") as far, FileSource(src, format="npy") as near:
        assert far.in_flight == 64 and near.in_flight == 16
        assert far.read(0, np.arange(8)).keys() == near.read(0, np.arange(8)).keys()
        np.testing.assert_array_equal(
            far.read(0, np.arange(8))["data"], near.read(0, np.arange(8))["data"]
        )
    with FileSource(m.mnt, format="npy", in_flight=4) as chosen:
        assert chosen.in_flight == 4  # given: kept


def test_files_read_64_ahead_when_any_of_them_is_on_a_fuse_mount(
    slow_mount, tmp_path: Path
) -> None:
    # The first file local, the rest behind the mount: the depth follows the slowest
    # storage, not the first file's (which chose 16 for a mixed list).
    src = tmp_path / "src"
    _npys(src)
    m = slow_mount(src)
    local = [str(src / "0.npy")]
    far = [str(m.mnt / f"{i}.npy") for i in range(1, 8)]
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "5.npy").symlink_to(m.mnt / "5.npy")  # a local folder, the file remote
    with (
        FileSource(local + far, format="npy") as mixed,
        FileSource([*local, str(linked / "5.npy")], format="npy") as via_link,
        FileSource([str(src / f"{i}.npy") for i in range(8)], format="npy") as near,
    ):
        assert mixed.in_flight == 64 and via_link.in_flight == 64 and near.in_flight == 16
        # Keys sort differently across the two roots: the same files, not the same order.
        assert sorted(mixed.read(0, np.arange(8))["data"][:, 0]) == list(range(8))


def test_the_root_mount_is_local_and_a_missing_proc_says_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = mount_of("/")
    assert root is not None and root.mount == "/" and root.fstype
    import builtins

    real_open = builtins.open

    def no_proc(path, *a, **k):  # type: ignore[no-untyped-def]
        if str(path) == "/proc/mounts":
            raise FileNotFoundError(path)
        return real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", no_proc)
    assert mount_of("/") is None and not is_network_fs("/")


def test_headers_on_a_slow_mount_are_counted_many_at_once(slow_mount, tmp_path: Path) -> None:
    # Each READ waits 20 ms: one header after another would take 128 x 20 ms; on a
    # network or FUSE mount the headers are read 64 files at a time.
    src = tmp_path / "src"
    src.mkdir()
    lengths = [50 + i % 9 for i in range(128)]
    for i, n in enumerate(lengths):
        np.save(src / f"{i:03d}.npy", np.full((n, 1024), i, dtype=np.int32))  # 200 KiB
    m = slow_mount(src, read_latency_ms=20)
    before = m.stats()
    with FileSource(m.mnt, format="npy", samples_per_file="header") as far:
        assert far.counts.tolist() == lengths
        assert far.count_stats is not None and far.count_stats.depth == 64
    got = m.stats()
    assert got["max_in_flight"] > 8, got  # many READs waited at once
    # The headers only (the kernel reads ahead a page or a few per file): not 25 MiB.
    assert got["bytes_read"] - before["bytes_read"] < 128 * 128 * 1024, got


def test_npy_rows_on_a_slow_mount_are_read_all_at_once_and_from_2_mib(
    slow_mount, tmp_path: Path
) -> None:
    # Each READ waits 100 ms: on a network or FUSE mount a read's rows of a file (80 KiB
    # each, more than the 64 KiB a read joins across) are read at once, not one pread
    # after another (16 MB files at 2 ms a READ: 1.50 -> 0.33 s for 40 steps of 64). (At
    # 20 ms, one read ended before the fourth began, once, under load in CI.)
    src = tmp_path / "src"
    src.mkdir()
    np.save(src / "0.npy", np.random.default_rng(6).standard_normal((32, 20480), np.float32))
    m = slow_mount(src, read_latency_ms=100)
    kw = {"format": "npy", "samples_per_file": 32, "shuffle": "samples", "npy_ranges_above": 0}
    with FileSource(m.mnt, **kw) as far, FileSource(src, **kw) as near:
        far.read(0, np.arange(1))  # its header, read once
        before = m.stats()
        got = far.read(0, np.arange(1, 13))  # 12 of its 32 rows, several runs of them
        np.testing.assert_array_equal(got["data"], near.read(0, np.arange(1, 13))["data"])
    runs = np.sort(got["index"] % 32)
    assert (np.diff(runs) > 1).sum() >= 4, runs  # rows apart: 5 preads or more
    assert m.stats()["max_in_flight"] >= 4, (before, m.stats())
    # By default, files of 2.5 MiB are read by rows on a mount (from 2 MiB there), whole
    # on a local disk (from 3.5 MiB); the same rows either way.
    kw.pop("npy_ranges_above")
    with FileSource(m.mnt, **kw) as far, FileSource(src, **kw) as near:
        assert far._by_rows is not None and near._by_rows is None
        got = far.read(0, np.arange(1, 13))
        np.testing.assert_array_equal(got["data"], near.read(0, np.arange(1, 13))["data"])


def test_a_mount_gone_is_a_storage_error_naming_the_path_and_the_fix(
    slow_mount, tmp_path: Path
) -> None:
    # A FUSE server (or a network mount's driver) that dies leaves its mount point
    # answering ENOTCONN: listing it was a bare OSError traceback from Path.exists.
    src = tmp_path / "src"
    _npys(src)
    m = slow_mount(src)
    listed = FileSource(m.mnt, format="npy")  # listed while the mount was alive
    os.kill(m.pid, signal.SIGKILL)  # the server this test started, by PID
    deadline = time.monotonic() + 10
    while m.running and time.monotonic() < deadline:
        time.sleep(0.01)
    gone = r"Transport endpoint is not connected\); the mount it is on is gone .*fusermount3 -u"
    with pytest.raises(StorageError, match=rf"{m.mnt}: cannot open \({gone}"):
        FileSource(m.mnt, format="npy")
    with pytest.raises(StorageError, match=rf"{m.mnt}/\d\.npy: .*{gone}"):
        with Loader(listed, batch_size=2, seed=0, steps=1) as loader:
            next(iter(loader))
    listed.close()


@pytest.mark.parametrize("source", ["files", "tokens", "rows", "table"])
def test_cache_dir_on_a_fuse_mount_says_what_to_do_not_local_disk(
    slow_mount, tmp_path: Path, source: str
) -> None:
    # A scientist on a slow mount asks for cache_dir: it keeps object-store reads only,
    # and was refused as "on local disk already", which a network mount is not.
    src = tmp_path / "src"
    _npys(src)
    np.arange(4096, dtype=np.uint16).tofile(src / "t.bin")
    np.save(src / "rows.npy", np.ones((8, 16), np.int32))
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1, 2, 3]}), src / "t.parquet")
    m = slow_mount(src)
    cache = tmp_path / "cache"
    here = {
        "files": lambda root: FileSource(root, format="npy", cache_dir=cache),
        "tokens": lambda root: TokenSource(
            root / "t.bin", context=8, dtype="uint16", cache_dir=cache
        ),
        "rows": lambda root: PaddedRows(root / "rows.npy", context=16, cache_dir=cache),
        "table": lambda root: Table.open(root / "t.parquet", cache_dir=cache),
    }[source]
    mount = rf"is on a fuse\S* mount \({m.mnt}\): a file system, not an object store"
    with pytest.raises(ConfigError, match=rf"cache_dir keeps .*{mount}.*copy the files to local"):
        here(m.mnt)
    with pytest.raises(ConfigError, match="is on local disk already"):
        here(src)


def test_a_listing_on_a_slow_mount_stats_and_lists_many_at_once(slow_mount, tmp_path: Path) -> None:
    # Each stat waits 5 ms: one file after another, 400 files took 2 s, and
    # ImageNet's 1.28 million 21 minutes at 1 ms. Listed the same as the local folder.
    # (This FUSE server answers one lookup at a time within a folder: 16 folders.)
    src = tmp_path / "src"
    for c in range(16):
        (src / f"class{c:02d}").mkdir(parents=True)
        for i in range(25):
            (src / f"class{c:02d}" / f"{i:03d}.npy").write_bytes(b"x" * (c * 25 + i))
    m = slow_mount(src, stat_latency_ms=5)
    # This FUSE server also answers a folder's first lookup of each name one at a time
    # (a name's later lookups overlap; NFS's do): the folders are looked up here, so
    # that the listing's own round trips are seen.
    for c in range(16):
        os.stat(m.mnt / f"class{c:02d}")
    before = m.stats()
    with FileSource(m.mnt, format="raw", labels="folders") as far:
        got = m.stats()
        with FileSource(src, format="raw", labels="folders") as near:
            assert list(far.files.keys) == list(near.files.keys)
            assert list(far.files.sizes) == list(near.files.sizes) == list(range(400))
            assert far.classes == near.classes and len(far.classes) == 16
    assert got["stats"] - before["stats"] >= 400, got  # a stat of each file, at least
    assert got["max_stats_in_flight"] > 3, got  # many of them waited at once
    # The 16 folders' listings overlap too (one after another: 500 folders, 1.5 s).
    assert got["listings"] - before["listings"] >= 17, got
    assert got["max_listings_in_flight"] > 3, got


def test_a_table_glob_on_a_slow_mount_stats_its_matches_many_at_once(
    slow_mount, tmp_path: Path
) -> None:
    # A glob of Parquet shards (FineWeb has 25,000): one isdir() a match, one after
    # another, took 3.05 s to open 1,000 files at 1 ms a stat; now the stats overlap.
    # (Resolved alone: opening the files overlaps their lookups anyway.)
    import pyarrow as pa
    import pyarrow.parquet as pq

    from headrace.formats._table_paths import _resolve

    src = tmp_path / "src"
    for d in range(16):
        (src / f"part{d:02d}").mkdir(parents=True)
        for i in range(8):
            pq.write_table(pa.table({"x": [d, i]}), src / f"part{d:02d}" / f"{i}.parquet")
    (src / "part00" / "9.parquet").mkdir()  # a folder the glob matches: no table
    m = slow_mount(src, stat_latency_ms=5)
    before = m.stats()
    root, files = _resolve(str(m.mnt / "**" / "*.parquet"))
    got = m.stats()
    assert root == str(m.mnt) and len(files) == 128
    assert got["max_stats_in_flight"] > 3, got
    assert got["stats"] - before["stats"] >= 128, got
    far, near = (
        Table.open(str(m.mnt / "**" / "*.parquet")),
        Table.open(str(src / "**" / "*.parquet")),
    )
    assert (
        far.read_rows(np.arange(256))["x"].tolist() == near.read_rows(np.arange(256))["x"].tolist()
    )
    far.close()
    near.close()


def test_npy_rows_on_a_fuse_mount_are_read_by_pread_not_through_maps(
    slow_mount, tmp_path: Path
) -> None:
    # Rows of a local NPY file in memory are copied from a map of it; on a FUSE mount
    # they are read by pread even so (a page the storage fails to read would be SIGBUS
    # through a map, and each page a round trip). The same rows either way. (slowfs
    # drops a file's pages at each open, so here the residency check alone would keep
    # maps off; the mount check is for FUSE file systems that keep their pages.)
    src = tmp_path / "src"
    src.mkdir()
    rng = np.random.default_rng(4)
    for i in range(2):
        np.save(src / f"{i}.npy", rng.standard_normal((8, 256, 256), dtype=np.float32))
    m = slow_mount(src)
    kw = {"format": "npy", "samples_per_file": "header", "shuffle": "samples"}
    with FileSource(m.mnt, npy_ranges_above=0, **kw) as far:
        with FileSource(src, npy_ranges_above=0, **kw) as near:
            got, want = far.read(0, np.arange(16)), near.read(0, np.arange(16))
            assert near._by_rows is not None and near._by_rows.mapped == 2
            assert far._by_rows is not None and far._by_rows.mapped == 0
            np.testing.assert_array_equal(got["data"], want["data"])
