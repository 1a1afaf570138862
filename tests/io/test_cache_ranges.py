"""A whole entry read by ranges (ObjectCache.read_ranges): checked once, then only the spans."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from headrace.io import ObjectCache
from headrace.io import _cache as cache_mod
from headrace.io import _cache_files as cache_files

URL = "|s3://bucket/data/a.h5"
N = 50_000
SPANS = [(100, 200), (30_000, 30_010)]


def entry(root: Path) -> Path:
    (path,) = (p for p in root.rglob("*") if p.is_file() and p.name != cache_files.LEDGER)
    return path


def filled(c: ObjectCache, data: bytes) -> tuple[bool, np.ndarray]:
    out = np.zeros(len(data), np.uint8)
    return c.read_ranges(URL, len(data), "e", SPANS, out), out


def test_spans_of_a_whole_entry_are_read_and_the_rest_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_mod, "CHECK_PIECE", 4096)  # checked in 13 pieces
    data = np.random.default_rng(0).integers(1, 256, N, dtype=np.uint8).tobytes()
    c = ObjectCache(tmp_path)
    assert not filled(c, data)[0] and c.stats.misses == 1  # no entry yet
    assert c.write(URL, N, "e", data)
    ok, out = filled(c, data)
    assert ok and c.stats.hits == 1 and c.stats.hit_bytes == 110
    want = np.zeros(N, np.uint8)
    for a, b in SPANS:
        want[a:b] = np.frombuffer(data, np.uint8)[a:b]
    np.testing.assert_array_equal(out, want)  # only the spans written


def test_an_entry_that_fails_its_checksum_is_removed_and_a_new_one_checked_again(
    tmp_path: Path,
) -> None:
    data = np.random.default_rng(1).integers(0, 256, N, dtype=np.uint8).tobytes()
    c = ObjectCache(tmp_path)
    c.write(URL, N, "e", data)
    path = entry(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[40_000] ^= 1  # outside the spans read: only the check over all its bytes sees it
    path.write_bytes(bytes(raw))
    with pytest.warns(RuntimeWarning, match=r"bytes that are not what was written \(checksum\)"):
        assert not filled(c, data)[0]
    assert not path.exists() and c.stats.bad_entries == 1
    c.write(URL, N, "e", data)
    assert filled(c, data)[0]  # checked: good
    # Replaced by another file (another inode) of bad bytes: checked again, refused.
    tmp = tmp_path / "swap"
    tmp.write_bytes(bytes(raw))
    os.replace(tmp, path)
    assert not filled(c, data)[0] and c.stats.bad_entries == 2


def test_an_entry_of_another_size_is_refused(tmp_path: Path) -> None:
    c = ObjectCache(tmp_path)
    c.write(URL, N, "e", bytes(N))
    path = entry(tmp_path)
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.warns(RuntimeWarning, match=rf"{N - 1} bytes, not {N}"):
        assert not filled(c, bytes(N))[0]
    assert not path.exists() and c.stats.bad_entries == 1


def test_a_block_entry_is_checked_once_then_only_its_spans_are_read(tmp_path: Path) -> None:
    # A 64 KiB block entry holds ~20 samples of 3 KB that a shuffle spreads over many
    # reads: each read of one read all 64 KiB and its checksum (a warm MDS epoch read
    # 591.6 MB of entries for 60.4 MB of data); now the spans alone, once checked.
    data = np.random.default_rng(2).integers(0, 256, N, dtype=np.uint8)
    c = ObjectCache(tmp_path)
    assert c.write(URL, N, "e", data[4096:8192], 4096)
    out = np.zeros(N, np.uint8)
    spans = [(4100, 4200), (8000, 8100)]
    assert c.read_ranges(URL, N, "e", spans, out, 4096, 4096)
    assert c.stats.hits == 1 and c.stats.hit_bytes == 200
    want = np.zeros(N, np.uint8)
    for a, b in spans:
        want[a:b] = data[a:b]
    np.testing.assert_array_equal(out, want)
    # Another block's entry is not this one: a miss.
    assert not c.read_ranges(URL, N, "e", [(9000, 9010)], out, 8192, 4096)
    # A byte changed outside the spans: the first read of the entry in a process (a
    # fresh cache) checks all of it, and refuses it.
    path = entry(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[1000] ^= 1
    path.write_bytes(bytes(raw))
    fresh = ObjectCache(tmp_path)
    with pytest.warns(RuntimeWarning, match=r"not what was written \(checksum\)"):
        assert not fresh.read_ranges(URL, N, "e", spans, out, 4096, 4096)
    assert fresh.stats.bad_entries == 1 and not path.exists()


@pytest.mark.parametrize("fault", ["eio", "short"])
def test_a_checked_entry_whose_read_fails_is_a_miss_and_then_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    # Once checked, an entry's spans are read by a pread each on a bare descriptor (no
    # LocalFile): a read failing (EIO), or cut short (the entry truncated since it was
    # opened), is a miss, counted and said once: the store's bytes are read instead.
    data = np.random.default_rng(3).integers(0, 256, N, dtype=np.uint8)
    c = ObjectCache(tmp_path)
    assert c.write(URL, N, "e", data[4096:8192], 4096)
    out = np.zeros(N, np.uint8)
    spans = [(4100, 4200), (8000, 8100)]
    assert c.read_ranges(URL, N, "e", spans, out, 4096, 4096)  # checked now
    real = os.preadv

    def failing(fd: int, buffers: list[np.ndarray], offset: int) -> int:
        if fault == "eio":
            raise OSError(5, "Input/output error")
        return real(fd, [buffers[0][:10]], offset)  # 10 bytes, not the span's 100

    monkeypatch.setattr(cache_mod.os, "preadv", failing)
    out[:] = 0
    with pytest.warns(RuntimeWarning, match=r"a local read of .* failed"):
        assert not c.read_ranges(URL, N, "e", spans, out, 4096, 4096)
    assert c.stats.errors == 1 and c.stats.misses == 1 and c.stats.hits == 1
    monkeypatch.setattr(cache_mod.os, "preadv", real)
    assert c.read_ranges(URL, N, "e", spans, out, 4096, 4096)  # the entry is kept: read
    for a, b in spans:
        np.testing.assert_array_equal(out[a:b], data[a:b])
    # Truncated in place (same inode, checked): not the size checked; removed as such.
    path = entry(tmp_path)
    os.truncate(path, path.stat().st_size - 1)
    with pytest.warns(RuntimeWarning, match=r"4095 bytes, not 4096"):
        assert not c.read_ranges(URL, N, "e", spans, out, 4096, 4096)
    assert not path.exists() and c.stats.bad_entries == 1


def test_checked_entries_are_remembered_up_to_checked_then_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process remembers CHECKED entries as checked (a hash of each one's name and
    # file); one more forgets another, which the next read of it checks again whole.
    monkeypatch.setattr(cache_mod, "CHECKED", 1)
    data = np.random.default_rng(4).integers(0, 256, N, dtype=np.uint8)
    c = ObjectCache(tmp_path)
    for at in (0, 4096):
        assert c.write(URL, N, "e", data[at : at + 4096], at)
    first = c.path(URL, N, "e", 0, 4096)
    out = np.zeros(N, np.uint8)
    assert c.read_ranges(URL, N, "e", [(10, 20)], out, 0, 4096)  # checked
    key = cache_mod._checked_key(first, os.stat(first))
    assert key in c._checked
    assert c.read_ranges(URL, N, "e", [(10, 20)], out, 0, 4096)  # remembered: not again
    assert c.read_ranges(URL, N, "e", [(4100, 4110)], out, 4096, 4096)  # forgets the first
    assert key not in c._checked
    raw = bytearray(Path(first).read_bytes())
    raw[3000] ^= 1  # outside the span read: found by the whole entry's check
    Path(first).write_bytes(bytes(raw))
    with pytest.warns(RuntimeWarning, match=r"not what was written \(checksum\)"):
        assert not c.read_ranges(URL, N, "e", [(10, 20)], out, 0, 4096)  # checked again
    assert c.stats.bad_entries == 1 and not os.path.exists(first)


def test_an_entry_that_cannot_be_opened_is_a_miss_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not "no such entry" (a plain miss) but an open that fails (EACCES: another
    # user's cache): counted as an error, said once naming the entry, read from the store.
    data = np.random.default_rng(5).integers(0, 256, N, dtype=np.uint8)
    c = ObjectCache(tmp_path)
    assert c.write(URL, N, "e", data[:4096], 0)
    path = c.path(URL, N, "e", 0, 4096)
    real = os.open

    def refused(name: str, *args: object, **kw: object) -> int:
        if os.fspath(name) == path:
            raise PermissionError(13, "Permission denied", name)
        return real(name, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(cache_mod.os, "open", refused)
    out = np.zeros(N, np.uint8)
    with pytest.warns(RuntimeWarning, match=rf"a local read of {path} failed .*ermission denied"):
        assert not c.read_ranges(URL, N, "e", [(10, 20)], out, 0, 4096)
    assert c.stats.errors == 1 and c.stats.misses == 1 and c.stats.bad_entries == 0
    monkeypatch.setattr(cache_mod.os, "open", real)
    assert c.read_ranges(URL, N, "e", [(10, 20)], out, 0, 4096)  # kept: read once allowed
    np.testing.assert_array_equal(out[10:20], data[10:20])


def test_an_entry_read_whole_is_checked_at_its_first_read_in_a_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A token file's 4 MiB blocks are read again at every visit of their window: each
    # read paid the checksum (~1 ms a block). Now the first read in a process checks it;
    # a file put in its place (another inode) is checked again, as is any entry in
    # another process (a new cache).
    data = np.random.default_rng(2).integers(0, 256, N, dtype=np.uint8)
    c = ObjectCache(tmp_path)
    assert c.write(URL, N + 4096, "e", data, 4096)  # the object's bytes from 4096 on
    sums = []
    crc32 = cache_mod.zlib.crc32

    def counted(buf: object, seed: int = 0) -> int:
        n = memoryview(buf).nbytes  # type: ignore[arg-type]
        if n > 100:  # (not an entry's name: its seed)
            sums.append(n)
        return crc32(buf, seed)  # type: ignore[arg-type]

    monkeypatch.setattr(cache_mod.zlib, "crc32", counted)
    out = np.zeros(N, np.uint8)
    for _ in range(3):
        assert c.read_into(out, URL, N + 4096, "e", 4096)
        np.testing.assert_array_equal(out, data)
    assert sums == [N] and c.stats.hits == 3
    path = entry(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[7] ^= 1
    swap = tmp_path / "swap"
    swap.write_bytes(bytes(raw))
    os.replace(swap, path)  # another file: checked again, refused
    with pytest.warns(RuntimeWarning, match=r"checksum"):
        assert not c.read_into(out, URL, N + 4096, "e", 4096)
    assert c.stats.bad_entries == 1
