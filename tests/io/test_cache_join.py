"""An object's block entries joined into its whole entry (ObjectCache.blocks_read): once,
when every block is there and good, streaming them (no object-sized buffer), counted
in the shared byte count, and never where the whole would not fit."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import StorageError
from headrace.io import ObjectCache
from headrace.io import _cache as cache_mod
from headrace.io import _cache_files as cache_files
from headrace.io import _file as file_mod

URL = "|s3://bucket/data/rows.npy"
BLOCK = 4096
SIZE = 10 * BLOCK + 100  # 11 blocks, the last short
DATA = np.random.default_rng(0).integers(0, 256, SIZE, dtype=np.uint8)


def entries(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != cache_files.LEDGER)


def with_blocks(root: Path, cache_bytes: int | None = None, skip: int | None = None) -> ObjectCache:
    c = ObjectCache(root, cache_bytes)
    for a in range(0, SIZE, BLOCK):
        if a != skip:
            assert c.write(URL, SIZE, "e", DATA[a : a + BLOCK], a)
    return c


def spans_read(c: ObjectCache, spans: list[tuple[int, int]]) -> np.ndarray:
    out = np.zeros(SIZE, np.uint8)
    assert c.read_ranges(URL, SIZE, "e", spans, out)
    return out


def test_blocks_are_joined_once_as_many_block_reads_as_blocks_were_counted(
    tmp_path: Path,
) -> None:
    c = with_blocks(tmp_path)
    blocks = entries(tmp_path)
    assert len(blocks) == 11
    c.blocks_read(URL, SIZE, "e", BLOCK, 10)  # one short of a read a block: not looked at
    assert c.stats.joined == 0 and entries(tmp_path) == blocks
    c.blocks_read(URL, SIZE, "e", BLOCK, 1)
    assert c.stats.joined == 1 and c.stats.written == 11  # (the join's bytes were local)
    whole, table = Path(c.path(URL, SIZE, "e")), Path(c._table_path(URL, SIZE, "e"))
    assert entries(tmp_path) == sorted([whole, table])  # the blocks gone
    assert table.stat().st_size == 4 * 12 + ObjectCache.TRAILER_BYTES  # block size, 11 CRCs
    spans = [(0, 10), (5000, 9000), (SIZE - 7, SIZE)]
    out = spans_read(c, spans)
    for a, b in spans:
        np.testing.assert_array_equal(out[a:b], DATA[a:b])
    # The byte count took the blocks off and the whole on: as measured again.
    assert c._space._used == cache_files.measure(str(tmp_path))
    # Another process's count (a new cache) finds the whole and writes nothing.
    again = ObjectCache(tmp_path)
    again.blocks_read(URL, SIZE, "e", BLOCK, 11)
    assert again.stats.joined == 0 and entries(tmp_path) == sorted([whole, table])


def test_a_join_keeps_the_shared_byte_count_exact(tmp_path: Path) -> None:
    # cache_bytes: every process adds to one ledger; the join adds the whole and its
    # table, and takes each block off.
    c = with_blocks(tmp_path, cache_bytes=10 << 20)
    c.blocks_read(URL, SIZE, "e", BLOCK, 11)
    assert c.stats.joined == 1 and len(entries(tmp_path)) == 2
    ledger = (tmp_path / cache_files.LEDGER).read_bytes()
    assert struct.unpack_from("<q", ledger, 4)[0] == cache_files.measure(str(tmp_path))


def test_an_object_missing_a_block_is_looked_at_again_after_twice_the_reads(
    tmp_path: Path,
) -> None:
    c = with_blocks(tmp_path, skip=3 * BLOCK)
    c.blocks_read(URL, SIZE, "e", BLOCK, 11)
    assert c.stats.joined == 0 and len(entries(tmp_path)) == 10
    assert c.write(URL, SIZE, "e", DATA[3 * BLOCK : 4 * BLOCK], 3 * BLOCK)
    c.blocks_read(URL, SIZE, "e", BLOCK, 10)  # 21 reads: next look at 22
    assert c.stats.joined == 0
    c.blocks_read(URL, SIZE, "e", BLOCK, 1)
    assert c.stats.joined == 1 and len(entries(tmp_path)) == 2  # the whole, its table


@pytest.mark.parametrize("damage", ["flipped", "short", "gone", "eio"])
def test_a_bad_block_stops_the_join_and_leaves_no_temporary(tmp_path: Path, damage: str) -> None:
    c = with_blocks(tmp_path)
    path = Path(c.path(URL, SIZE, "e", 7 * BLOCK, BLOCK))
    raw = bytearray(path.read_bytes())
    if damage == "flipped":
        raw[100] ^= 1
        path.write_bytes(bytes(raw))
    elif damage == "short":
        path.write_bytes(bytes(raw[:-1]))
    # "gone": removed by a prune after the join saw every block there.
    real = os.path.exists

    def exists(p: object) -> bool:
        found = real(p)  # type: ignore[arg-type]
        if damage == "gone" and str(p) == str(path) and found:
            path.unlink()  # looked at, then removed before the join reads it
        return found

    preadv = os.preadv

    def failing(fd: int, buffers: list[object], offset: int) -> int:
        if damage == "eio" and os.fstat(fd).st_ino == path.stat().st_ino:
            raise OSError(errno.EIO, "Input/output error")
        return preadv(fd, buffers, offset)  # type: ignore[arg-type]

    used = c._space._used
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os.path, "exists", exists)
        mp.setattr(os, "preadv", failing)
        c.blocks_read(URL, SIZE, "e", BLOCK, 11)
    assert c.stats.joined == 0 and not Path(c.path(URL, SIZE, "e")).exists()
    assert not any(cache_files.TMP in p.name for p in entries(tmp_path))
    assert len(entries(tmp_path)) == (10 if damage == "gone" else 11)  # the rest kept
    assert c._space._used == used  # the whole's room given back
    assert c.writing  # nothing said full or stopped
    if damage == "flipped":  # the read that finds it removes it, as for any entry
        out = np.zeros(SIZE, np.uint8)
        with pytest.warns(RuntimeWarning, match="checksum"):
            assert not c.read_ranges(URL, SIZE, "e", [(0, 10)], out, 7 * BLOCK, BLOCK)


def test_no_join_where_the_whole_would_not_fit_and_blocks_still_fit(tmp_path: Path) -> None:
    # 11 blocks of 4 KiB take 88 KiB of disk (8 KiB each with its trailer); the whole
    # another 44 KiB, over cache_bytes: the
    # blocks stay, and the cache is not full for the next objects' blocks.
    c = with_blocks(tmp_path, cache_bytes=100 << 10)
    c.blocks_read(URL, SIZE, "e", BLOCK, 11)
    assert c.stats.joined == 0 and c.stats.full == 0 and c.writing
    assert len(entries(tmp_path)) == 11
    assert c.write(URL + "2", SIZE, "e", DATA[:BLOCK], 0)  # room for a block still


def test_a_one_block_object_is_its_own_whole_entry(tmp_path: Path) -> None:
    c = ObjectCache(tmp_path)
    assert c.write(URL, 1000, "e", DATA[:1000], 0)
    c.blocks_read(URL, 1000, "e", BLOCK, 5)
    assert c.stats.joined == 0 and entries(tmp_path) == [Path(c.path(URL, 1000, "e"))]


def test_a_whole_entry_is_opened_to_map_once_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = ObjectCache(tmp_path)
    spans = [(0, SIZE)]
    assert c.open_whole(URL, SIZE, "e", spans) is None and c.stats.misses == 0  # not a miss
    assert c.write(URL, SIZE, "e", DATA)
    f = c.open_whole(URL, SIZE, "e", spans)
    assert f is not None
    with f:
        np.testing.assert_array_equal(np.frombuffer(f.mapped, np.uint8)[:SIZE], DATA)
    # On a network or FUSE mount (a page the storage fails is SIGBUS there): not mapped.
    monkeypatch.setattr(file_mod, "on_network_fs", lambda path: True)
    assert c.open_whole(URL, SIZE, "e", spans) is None
    monkeypatch.undo()
    # A map refused (out of descriptors, say): not mapped, the failure counted, nothing
    # left open.
    opened = len(os.listdir("/proc/self/fd"))

    def refused(self: file_mod.LocalFile) -> Any:
        raise StorageError(errno.EMFILE, f"{self.path}: cannot memory-map the file")

    monkeypatch.setattr(file_mod.LocalFile, "_map_file", refused)
    misses = c.stats.misses
    with pytest.warns(RuntimeWarning, match="cannot memory-map"):
        assert c.open_whole(URL, SIZE, "e", spans) is None
    assert c.stats.misses == misses + 1 and len(os.listdir("/proc/self/fd")) == opened
    monkeypatch.undo()
    # A damaged one is removed, as by any read.
    path = Path(c.path(URL, SIZE, "e"))
    flip(path, 5)
    with pytest.warns(RuntimeWarning, match="checksum"):
        assert ObjectCache(tmp_path).open_whole(URL, SIZE, "e", spans) is None
    assert not path.exists()


def test_a_kept_entry_whose_block_cannot_be_read_is_not_good(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A whole entry kept open by its reader (a map kept between visits) has the blocks
    # each visit reads checked; a block whose read fails (EIO) is counted as a failed
    # read, and the visit reads the store instead (whole_checked: False).
    c = joined(tmp_path)
    f = c.open_whole(URL, SIZE, "e", [(0, 10)])
    assert f is not None
    with f:
        assert c.whole_checked(URL, SIZE, "e", f, [(0, 10)])  # checked at the open

        def eio(self: file_mod.LocalFile, out: Any, offset: int) -> None:
            raise StorageError(errno.EIO, f"{self.path}: input/output error")

        monkeypatch.setattr(file_mod.LocalFile, "pread_into", eio)
        misses, errors = c.stats.misses, c.stats.errors
        with pytest.warns(RuntimeWarning, match="input/output error"):
            assert not c.whole_checked(URL, SIZE, "e", f, [(5 * BLOCK, 5 * BLOCK + 10)])
        assert (c.stats.misses, c.stats.errors) == (misses + 1, errors + 1)


def joined(root: Path) -> ObjectCache:
    c = with_blocks(root)
    c.blocks_read(URL, SIZE, "e", BLOCK, 11)
    assert c.stats.joined == 1
    return ObjectCache(root)  # another process: nothing checked yet


def flip(path: Path, at: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[at] ^= 1
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("how", ["ranges", "map"])
def test_a_joined_entry_is_checked_a_block_at_a_time_as_its_blocks_are_read(
    tmp_path: Path, how: str
) -> None:
    # A whole entry's own checksum covers all of it: each process read it through at its
    # first read, where before the join it checked only the blocks it touched (64
    # processes reading a sixty-fourth of the rows each: every object 64 times over).
    c = joined(tmp_path)
    whole = Path(c.path(URL, SIZE, "e"))
    flip(whole, 8 * BLOCK + 5)  # damage in block 8 only

    def read(spans: list[tuple[int, int]]) -> bool:
        if how == "ranges":
            out = np.zeros(SIZE, np.uint8)
            ok = c.read_ranges(URL, SIZE, "e", spans, out)
            for a, b in spans if ok else ():
                np.testing.assert_array_equal(out[a:b], DATA[a:b])
            return ok
        f = c.open_whole(URL, SIZE, "e", spans)
        if f is not None:
            f.close()
        return f is not None

    assert read([(10, 20), (3 * BLOCK + 1, 3 * BLOCK + 9)])  # blocks 0 and 3: good
    assert read([(5 * BLOCK, 5 * BLOCK + 1)])
    with pytest.warns(RuntimeWarning, match=r"checksum"):
        assert not read([(8 * BLOCK, 8 * BLOCK + 1)])  # the damaged block: refused
    assert not whole.exists() and c.stats.bad_entries == 1


def test_without_its_table_a_joined_entry_is_checked_whole(tmp_path: Path) -> None:
    c = joined(tmp_path)
    Path(c._table_path(URL, SIZE, "e")).unlink()  # pruned, say
    flip(Path(c.path(URL, SIZE, "e")), 8 * BLOCK + 5)
    out = np.zeros(SIZE, np.uint8)
    with pytest.warns(RuntimeWarning, match=r"checksum"):
        assert not c.read_ranges(URL, SIZE, "e", [(10, 20)], out)  # block 0, damage in 8


@pytest.mark.parametrize("damage", ["flipped", "short"])
def test_a_damaged_table_is_removed_and_the_entry_checked_whole(
    tmp_path: Path, damage: str
) -> None:
    c = joined(tmp_path)
    table = Path(c._table_path(URL, SIZE, "e"))
    if damage == "flipped":
        flip(table, 9)
    else:
        table.write_bytes(table.read_bytes()[4:])
    out = np.zeros(SIZE, np.uint8)
    with pytest.warns(RuntimeWarning, match=r"block checksums that are not what was written"):
        assert c.read_ranges(URL, SIZE, "e", [(10, 20)], out)  # the entry itself is good
    assert not table.exists() and c.stats.bad_entries == 1
    np.testing.assert_array_equal(out[10:20], DATA[10:20])


def test_once_each_of_its_blocks_was_checked_a_joined_entry_is_checked(tmp_path: Path) -> None:
    # Then its reads take the quick way (no look-up of each read's blocks: a warm epoch
    # that did took 1.18x as long); a block checked twice counts once.
    c = joined(tmp_path)
    path = c.path(URL, SIZE, "e")
    st = os.stat(path)
    key = cache_mod._checked_key(path, st)
    out = np.zeros(SIZE, np.uint8)
    for k in [*range(10), 3, 3]:  # all but the last block, 3 thrice
        assert c.read_ranges(URL, SIZE, "e", [(k * BLOCK, k * BLOCK + 1)], out)
    assert key not in c._checked
    assert c.read_ranges(URL, SIZE, "e", [(SIZE - 1, SIZE)], out)
    assert key in c._checked and key not in c._tables


@pytest.mark.parametrize("how", ["ranges", "map"])
def test_a_block_check_that_fails_eio_reads_from_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    c = joined(tmp_path)

    def eio(self: object, out: object, offset: int) -> None:
        raise StorageError(errno.EIO, f"read at {offset}: Input/output error")

    monkeypatch.setattr(file_mod.LocalFile, "pread_into", eio)
    with pytest.warns(RuntimeWarning, match=r"a local read of .* failed .*Input/output error"):
        if how == "ranges":
            out = np.zeros(SIZE, np.uint8)
            assert not c.read_ranges(URL, SIZE, "e", [(10, 20)], out)
        else:
            assert c.open_whole(URL, SIZE, "e", [(10, 20)]) is None
    assert c.stats.errors == 1 and c.stats.misses == 1
    assert Path(c.path(URL, SIZE, "e")).exists()  # not damaged: kept


def test_a_block_written_after_another_process_joined_the_object_is_removed_again(
    tmp_path: Path,
) -> None:
    # Two processes fetch block 3 at once; one writes it and joins the object (removing
    # the blocks); the other's write of block 3 then finds no entry and put it back, where
    # no read would open it again (seen: 2 processes on moto left 5 such blocks).
    first = with_blocks(tmp_path, skip=3 * BLOCK)
    other = ObjectCache(tmp_path)
    block3 = [(3 * BLOCK, 4 * BLOCK)]
    first.write_blocks(URL, SIZE, "e", BLOCK, block3, DATA)
    first.blocks_read(URL, SIZE, "e", BLOCK, 11)
    assert first.stats.joined == 1 and len(entries(tmp_path)) == 2
    other.write_blocks(URL, SIZE, "e", BLOCK, block3, DATA)
    assert other.stats.written == 1  # put, then removed: the whole is there
    whole, table = Path(other.path(URL, SIZE, "e")), Path(other._table_path(URL, SIZE, "e"))
    assert entries(tmp_path) == sorted([whole, table])
    assert other._space._used == cache_files.measure(str(tmp_path))  # its block taken off


def test_the_one_block_of_a_small_object_is_kept(tmp_path: Path) -> None:
    # Its block is its whole entry: written, it was taken for a block written after a
    # join, and removed (an MDS test's rerun found its shards gone).
    c = ObjectCache(tmp_path)
    c.write_blocks(URL, 1000, "e", BLOCK, [(0, 1000)], DATA)
    assert entries(tmp_path) == [Path(c.path(URL, 1000, "e"))]


def test_an_object_another_process_is_joining_is_left_to_it(tmp_path: Path) -> None:
    # Its claim (the join's one temporary name) is there and locked, as the joining
    # process holds it: this one writes no copy and keeps reading the blocks.
    c = with_blocks(tmp_path, cache_bytes=10 << 20)
    claim = Path(f"{c.path(URL, SIZE, 'e')}{cache_files.TMP}{cache_mod.CLAIM}")
    claim.parent.mkdir(exist_ok=True)
    fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    held = cache_files.hold(fd)
    assert held is not None
    try:
        used = c._space._used
        c.blocks_read(URL, SIZE, "e", BLOCK, 11)
        assert c.stats.joined == 0 and c._space._used == used  # its room given back
        assert len(entries(tmp_path)) == 12  # the blocks (which serve) and the claim
        # A new process's first join sweeps dead writers' temporaries: not a live one's,
        # even one older than DEAD_TMP_S.
        old = os.stat(claim).st_mtime - 2 * cache_files.DEAD_TMP_S
        os.utime(claim, (old, old))
        again = ObjectCache(tmp_path)
        again.blocks_read(URL, SIZE, "e", BLOCK, 11)
        assert again.stats.joined == 0 and claim.exists()
    finally:
        os.close(fd)
        os.close(held)  # the joiner "dies"
    # Dead (its lock free, older than DEAD_TMP_S): the next process's sweep removes it.
    later = ObjectCache(tmp_path)
    later.blocks_read(URL, SIZE, "e", BLOCK, 11)
    assert later.stats.joined == 1 and not claim.exists()
    assert len(entries(tmp_path)) == 2  # the whole and its table
    np.testing.assert_array_equal(spans_read(later, [(0, SIZE)]), DATA)


def test_two_joins_of_one_object_at_once_write_one_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two caches of one directory (two processes) count enough reads together: the
    # first join is held mid-copy while the second looks; the second writes nothing.
    import threading

    first, second = with_blocks(tmp_path), ObjectCache(tmp_path)
    copying, go_on = threading.Event(), threading.Event()
    crc32 = cache_mod.zlib.crc32

    def slow_crc(data: object, seed: int = 0) -> int:
        if threading.current_thread().name == "first-join":
            copying.set()
            assert go_on.wait(10)
        return crc32(data, seed)  # type: ignore[arg-type]

    monkeypatch.setattr(cache_mod.zlib, "crc32", slow_crc)
    t = threading.Thread(
        target=first.blocks_read, args=(URL, SIZE, "e", BLOCK, 11), name="first-join"
    )
    t.start()
    assert copying.wait(10)
    written = entries(tmp_path)  # the blocks and the first join's temporary
    assert len(written) == 12
    second.blocks_read(URL, SIZE, "e", BLOCK, 11)
    assert entries(tmp_path) == written  # no second copy
    go_on.set()
    t.join(10)
    assert first.stats.joined == 1 and second.stats.joined == 0
    assert len(entries(tmp_path)) == 2
    np.testing.assert_array_equal(spans_read(second, [(0, SIZE)]), DATA)
