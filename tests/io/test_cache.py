"""ObjectCache on local disk: entries, sizes, limits, and every failure falling back."""

from __future__ import annotations

import errno
import os
import pickle
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError, StorageError
from headrace.io import LocalFile, ObjectCache
from headrace.io import _cache as cache_mod
from headrace.io import _cache_files as cache_files
from headrace.io import _cache_space as cache_space

URL = "|s3://bucket/data/a.jpg"


def blob(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def entries(root: Path) -> list[Path]:
    """Every file the cache keeps (its shared byte count aside)."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != cache_files.LEDGER)


TRAILER = ObjectCache.TRAILER_BYTES  # every entry's checksum trailer


def on_disk(root: Path, n: int) -> int:
    """The disk space the cache counts for an entry of ``n`` bytes: whole blocks."""
    block = os.statvfs(root).f_frsize
    return -(-(n + TRAILER) // block) * block


def disk_bytes(root: Path) -> int:
    """What the cache's entries take on disk (whole blocks), by the filesystem's count."""
    return sum(p.stat().st_blocks * 512 for p in entries(root))


def payload(entry: Path) -> bytes:
    return entry.read_bytes()[:-TRAILER]


def test_an_entry_is_written_whole_and_read_back(tmp_path: Path) -> None:
    c = ObjectCache(tmp_path / "c")
    data = blob(10_000)
    assert c.read(URL, len(data), "e1") is None  # nothing yet
    assert c.write(URL, len(data), "e1", data)
    got = c.read(URL, len(data), "e1")
    assert got is not None and got.tobytes() == data
    (entry,) = entries(tmp_path / "c")  # one file, no temporary left behind
    assert entry == Path(c.path(URL, len(data), "e1"))
    s = c.stats
    assert (s.misses, s.hits, s.hit_bytes, s.written, s.written_bytes) == (1, 1, 10_000, 1, 10_000)
    # Another version of the object (new ETag or size) is another entry: never the old bytes.
    assert c.read(URL, len(data), "e2") is None
    assert c.read(URL, len(data) + 1, "e1") is None
    # An empty object is cached too.
    assert c.write(URL, 0, "empty", b"")
    got = c.read(URL, 0, "empty")
    assert got is not None and got.size == 0


def test_a_copy_in_another_process_reads_the_same_entries(tmp_path: Path) -> None:
    c = ObjectCache(tmp_path, max_bytes=1 << 20)
    data = blob(5000, 1)
    c.write(URL, len(data), "e", data)
    copy = pickle.loads(pickle.dumps(c))
    assert (copy.directory, copy.max_bytes) == (c.directory, c.max_bytes)
    assert copy.stats.written == 0  # counters are per process
    got = copy.read(URL, len(data), "e")
    assert got is not None and got.tobytes() == data


def test_no_strong_etag_no_entry(tmp_path: Path) -> None:
    c = ObjectCache(tmp_path)
    assert not c.cacheable(None) and c.cacheable("e")
    assert not c.cacheable('W/"5f3a-3e8"') and c.cacheable('"W/"')  # weak; strong (quoted)
    assert c.stats.uncacheable == 2 and entries(tmp_path) == []


def test_an_entry_of_the_wrong_size_is_removed_and_missed(tmp_path: Path) -> None:
    c = ObjectCache(tmp_path)
    data = blob(4096)
    c.write(URL, len(data), "e", data)
    path = Path(c.path(URL, len(data), "e"))
    with open(path, "r+b") as fh:
        fh.truncate(1000)  # a disk that lost the end of a write
    with pytest.warns(
        RuntimeWarning, match=f"has {1000 - TRAILER} bytes, not 4096; removed"
    ) as said:
        assert c.read(URL, len(data), "e") is None
    assert said[0].filename == __file__  # the caller's line (was headrace/io/_cache.py)
    assert not path.exists()
    assert c.stats.bad_entries == 1 and c.stats.misses == 1
    assert c.write(URL, len(data), "e", data)  # written again from the store's bytes
    got = c.read(URL, len(data), "e")
    assert got is not None and got.tobytes() == data


def test_a_failed_local_read_falls_back_to_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = ObjectCache(tmp_path)
    data = blob(3000)
    c.write(URL, len(data), "e", data)

    def eio(self: LocalFile, out: object, offset: int) -> None:
        raise StorageError(errno.EIO, f"{self.path}: pread of bytes [0, 3000) failed: I/O error")

    monkeypatch.setattr(LocalFile, "pread_into", eio)
    with pytest.warns(RuntimeWarning, match="a local read of .* failed .*I/O error") as said:
        assert c.read(URL, len(data), "e") is None
    assert said[0].filename == __file__
    assert c.read(URL, len(data), "e") is None  # warned once, counted each time
    assert (c.stats.errors, c.stats.misses, c.stats.hits) == (2, 2, 0)


def test_disk_full_stops_writing_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = ObjectCache(tmp_path)
    real_write = os.write
    calls = []

    def full(fd: int, data: object) -> int:
        calls.append(fd)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache_mod.os, "write", full)
    with pytest.warns(
        RuntimeWarning, match="stopped writing in this process: No space left"
    ) as said:
        assert not c.write(URL, 100, "e", blob(100))
    assert said[0].filename == __file__
    monkeypatch.setattr(cache_mod.os, "write", real_write)
    assert not c.write(URL, 100, "e2", blob(100))  # stopped: not even tried
    assert len(calls) == 1
    assert entries(tmp_path) == []
    assert (c.stats.errors, c.stats.full, c.stats.written) == (1, 1, 0)


def test_a_directory_that_cannot_be_made_stops_writing(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    c = ObjectCache(tmp_path / "file" / "cache")
    with pytest.warns(RuntimeWarning, match="stopped writing"):
        assert not c.write(URL, 3, "e", b"abc")
    assert c.read(URL, 3, "e") is None
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        ObjectCache(tmp_path / "file")
    with pytest.raises(ConfigError, match="cache_bytes must be an integer >= 0"):
        ObjectCache(tmp_path, max_bytes=-1)


def test_max_bytes_counts_what_other_processes_wrote(tmp_path: Path) -> None:
    cap = on_disk(tmp_path, 6000) + on_disk(tmp_path, 4000)  # room for these two
    first = ObjectCache(tmp_path, max_bytes=cap)
    assert first.write("|a", 6000, "e", blob(6000))
    # A second process: sizes the directory (first's entry) before its first write.
    second = ObjectCache(tmp_path, max_bytes=cap)
    assert not second.write("|b", 6000, "e", blob(6000))
    assert second.write("|c", 4000, "e", blob(4000))
    assert not second.write("|d", 1, "e", b"x")
    assert (second.stats.written, second.stats.full) == (1, 2)
    assert disk_bytes(tmp_path) == cap


@pytest.mark.parametrize("fault", ["write", "read", "lock"])
def test_a_ledger_that_fails_leaves_the_count_to_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    # The shared count of the cache's bytes (a file under flock) not written (disk full)
    # or not lockable: this process counts the directory itself; not read (EIO): the
    # directory is measured again. max_bytes holds either way, and nothing fails.
    import fcntl

    cap = on_disk(tmp_path, 6000) + on_disk(tmp_path, 4000)  # room for these two
    real = {"write": os.pwrite, "read": os.pread, "lock": fcntl.flock}[fault]

    def ledger(fd: int) -> bool:
        return os.readlink(f"/proc/self/fd/{fd}").endswith(cache_files.LEDGER)

    def failing(fd: int, *args: Any) -> Any:
        if ledger(fd):
            raise OSError(errno.ENOSPC if fault == "write" else errno.EIO, "injected")
        return real(fd, *args)

    if fault == "lock":
        monkeypatch.setattr(cache_space.fcntl, "flock", failing)
    else:
        monkeypatch.setattr(cache_space.os, f"p{fault}", failing)
    c = ObjectCache(tmp_path, max_bytes=cap)
    assert c.write("|a", 6000, "e", blob(6000))
    assert c.write("|c", 4000, "e", blob(4000))
    assert not c.write("|d", 1, "e", b"x")  # full, by its own count
    assert (c.stats.written, c.stats.full) == (2, 1)
    assert c.read("|a", 6000, "e").tobytes() == blob(6000)
    assert disk_bytes(tmp_path) == cap


def test_a_dead_writers_temporary_is_removed_when_sized(tmp_path: Path) -> None:
    cap = on_disk(tmp_path, 9000)
    c = ObjectCache(tmp_path, max_bytes=cap)
    sub = tmp_path / "ab"
    sub.mkdir()
    old = sub / f"{'cd' * 19}{cache_files.TMP}123-dead0000"
    old.write_bytes(b"x" * 5000)
    past = time.time() - 2 * cache_files.STALE_TMP_S
    os.utime(old, (past, past))
    # A live writer's: left alone, not counted.
    fresh = sub / f"{'ef' * 19}{cache_files.TMP}456-11ae0000"
    fresh.write_bytes(b"y" * 5000)
    assert c.write(URL, 9000, "e", blob(9000))
    assert not old.exists() and fresh.exists()
    # A later process (a job restarted after a preemption) removes, at its first write,
    # the temporaries whose writer is dead: their lock is free. Until 2026-12-03 such a
    # temporary stayed until the shared count was measured again, hourly (and for good
    # once the cache was complete: no write, no measure).
    c.prune(0)
    os.replace(fresh, old)
    ago = time.time() - 2 * cache_files.DEAD_TMP_S
    os.utime(old, (ago, ago))
    live = sub / f"{'12' * 19}{cache_files.TMP}789-11ae0000"
    fd = os.open(live, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    held = cache_files.hold(fd)  # a writer alive, as ObjectCache.write holds its temporary
    assert held is not None
    try:
        os.write(fd, b"z" * 5000)
        os.close(fd)  # as a writer closes it before the rename: its lock's copy stays
        os.utime(live, (past, past))  # however old: its writer lives
        assert ObjectCache(tmp_path, max_bytes=cap).write("|b", 10, "e", blob(10))
        assert not old.exists() and live.exists()
    finally:
        os.close(held)  # the writer is gone: its lock with it
    assert ObjectCache(tmp_path, max_bytes=cap).write("|c", 10, "e", blob(10))
    assert not live.exists()


def test_the_filesystem_reserve_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = ObjectCache(tmp_path)
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    monkeypatch.setattr(cache_space, "RESERVE_BYTES", free)  # any write would dip below it
    # Said once (before: nothing was ever cached on a nearly full disk, without a word).
    with pytest.warns(
        RuntimeWarning,
        match=r"cache .*: not writing: its filesystem has [0-9.]+ GiB free, under the [0-9.]+ GiB",
    ) as said:
        assert not c.write(URL, 3, "e", b"abc")
    assert len(said) == 1 and str(tmp_path) in str(said[0].message)
    assert said[0].filename == __file__
    # A cache_dir not made yet is on its parent's filesystem: its first write passed the
    # reserve (statvfs of a missing folder failed) and went on a nearly full disk.
    later = ObjectCache(tmp_path / "not-made")
    with pytest.warns(RuntimeWarning, match="not writing"):
        assert not later.write(URL, 3, "e", b"abc")
    assert not (tmp_path / "not-made").exists()
    monkeypatch.setattr(cache_space, "RESERVE_BYTES", 0)
    monkeypatch.setattr(cache_space, "RESERVE_FRACTION", 1.0)  # keep the whole disk free
    assert not c.write(URL, 3, "e", b"abc")  # not said again
    assert c.stats.full == 2 and entries(tmp_path) == []
    monkeypatch.setattr(cache_space, "RESERVE_FRACTION", 0.0)
    assert c.write(URL, 3, "e", b"abc")
    monkeypatch.undo()
    assert cache_space.reserve_bytes(10**12) == 5 * 10**10
    assert cache_space.reserve_bytes(10**9) == 1 << 30


def test_writers_of_the_same_entry_race_safely(tmp_path: Path) -> None:
    c = ObjectCache(tmp_path)
    data = blob(200_000, 3)
    barrier = threading.Barrier(8)

    def write() -> None:
        barrier.wait()
        c.write(URL, len(data), "e", data)

    threads = [threading.Thread(target=write) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (entry,) = entries(tmp_path)
    assert payload(entry) == data


def test_ranges_of_an_object_are_entries_of_their_own(tmp_path: Path) -> None:
    c = ObjectCache(tmp_path)
    data = blob(1000, 5)
    assert not c.has(URL, 1000, "e", 100, 50)
    assert c.write(URL, 1000, "e", data[100:150], offset=100)
    assert c.has(URL, 1000, "e", 100, 50)
    out = np.zeros(50, np.uint8)
    assert c.read_into(out, URL, 1000, "e", offset=100)
    assert out.tobytes() == data[100:150]
    # Another range (or the whole object) is another entry, never these bytes.
    assert not c.read_into(np.zeros(50, np.uint8), URL, 1000, "e", offset=101)
    assert not c.read_into(np.zeros(40, np.uint8), URL, 1000, "e", offset=100)
    assert c.read(URL, 1000, "e") is None
    # The whole object's entry serves a read of all its bytes as a range too.
    assert c.write(URL, 1000, "e", data)
    whole = np.zeros(1000, np.uint8)
    assert c.has(URL, 1000, "e", 0, 1000) and c.read_into(whole, URL, 1000, "e", offset=0)
    assert whole.tobytes() == data


def test_typed_buffers_are_counted_in_bytes(tmp_path: Path) -> None:
    # Row windows read rows of uint16 tokens straight into typed arrays: an entry is
    # named and checked by its bytes, not its element count.
    c = ObjectCache(tmp_path)
    rows = np.arange(60, dtype=np.uint16).reshape(6, 10)
    assert c.write(URL, 5000, "e", rows, offset=200)  # 120 bytes at byte 200
    got = np.zeros((6, 10), np.uint16)
    assert c.has(URL, 5000, "e", 200, 120)
    assert c.read_into(got, URL, 5000, "e", offset=200)
    np.testing.assert_array_equal(got, rows)
    assert c.stats.bad_entries == 0
    with pytest.raises(ConfigError, match="C-contiguous"):
        c.read_into(np.zeros((6, 20), np.uint16)[:, ::2], URL, 5000, "e", offset=200)


def test_cache_bytes_without_a_cache_dir_is_refused(tmp_path: Path) -> None:
    from headrace.formats import FileSource, TokenSource
    from headrace.io import open_cache

    assert open_cache(None) is None
    assert isinstance(open_cache(tmp_path, 10), ObjectCache)
    with pytest.raises(ConfigError, match=r"cache_bytes=10 needs cache_dir="):
        open_cache(None, 10)
    np.arange(100, dtype=np.uint16).tofile(tmp_path / "t.bin")
    with pytest.raises(ConfigError, match=r"cache_bytes=10 needs cache_dir="):
        TokenSource(tmp_path / "t.bin", dtype="uint16", context=8, cache_bytes=10)
    with pytest.raises(ConfigError, match=r"cache_bytes=10 needs cache_dir="):
        FileSource(tmp_path, format="raw", cache_bytes=10)


def test_prune_removes_what_was_not_used_and_the_cli_reports_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from headrace.cli import main

    c = ObjectCache(tmp_path, max_bytes=on_disk(tmp_path, 3000) + on_disk(tmp_path, 6000))
    old, new = blob(3000, 1), blob(2000, 2)
    c.write("|old", 3000, "e", old)
    c.write("|new", 2000, "e", new)
    past = time.time() - 10 * 86_400
    os.utime(c.path("|old", 3000, "e"), (past, past))  # neither read nor written for 10 days
    s = c.summary()
    assert (s["entries"], s["temporaries"]) == (2, 0)
    assert s["bytes"] == on_disk(tmp_path, 3000) + on_disk(tmp_path, 2000) == disk_bytes(tmp_path)
    assert s["oldest_use"] == pytest.approx(past) and s["filesystem_free_bytes"] > 0

    assert main(["cache", str(tmp_path), "--prune-days", "7", "--json", str(tmp_path / "r.j")]) == 0
    printed = capsys.readouterr().out
    assert "removed 1 entries" in printed and "1 entries" in printed
    report = json.loads((tmp_path / "r.j").read_text())
    removed = (report["removed_entries"], report["removed_bytes"], report["entries"])
    assert removed == (1, on_disk(tmp_path, 3000), 1)
    assert c.read("|old", 3000, "e") is None  # gone: read from the store next time
    got = c.read("|new", 2000, "e")
    assert got is not None and got.tobytes() == new
    # The prune counted the directory again for every process: room at once.
    assert c.write("|again", 6000, "e", blob(6000))
    os.unlink(c.path("|again", 6000, "e"))  # removed by hand: still counted ...
    assert not c.write("|more", 6000, "e", blob(6000))
    monkeypatch.setattr(cache_space, "_RECOUNT_S", -1.0)  # ... until counted again (a minute)
    assert c.write("|more", 6000, "e", blob(6000))
    monkeypatch.undo()
    (tmp_path / "r.j").unlink()

    kept = entries(tmp_path)
    for days in ("nan", "inf", "-1"):  # nan removed every entry, as --clear, until 2026-12-06
        assert main(["cache", str(tmp_path), "--prune-days", days]) == 2
        # "must be a number >= 0 (got inf)": inf is one; the message now says finite, and how
        err = capsys.readouterr().err
        assert f"--prune-days {days}: expected a finite number of days >= 0, e.g." in err
    assert entries(tmp_path) == kept and kept
    assert main(["cache", str(tmp_path), "--clear"]) == 0
    assert entries(tmp_path) == []
    assert main(["cache", str(tmp_path / "nowhere")]) == 2
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "afile").write_bytes(b"x")
    assert main(["cache", str(tmp_path / "afile")]) == 2  # a file, not "no such directory"
    assert "afile: not a directory" in capsys.readouterr().err
    assert main(["cache", str(tmp_path), "--prune-days", "-1"]) == 2
    capsys.readouterr()
    assert main(["cache", str(tmp_path), "--json", str(tmp_path / "no" / "r.json")]) == 2
    assert "r.json': folder" in capsys.readouterr().err  # refused before it reads


def test_the_cli_shows_a_small_cache_in_bytes_and_kilobytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "2 entries, 0.0 MB" said nothing of a cache of a few small objects.
    from headrace._messages import byte_size
    from headrace.cli import main

    c = ObjectCache(tmp_path)
    c.write("|a", 300, "e", blob(300))
    c.write("|b", 200, "e", blob(200))
    assert main(["cache", str(tmp_path)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    counted = c.summary()["bytes"]  # two blocks on disk: 8,192 bytes on ext4
    assert counted == on_disk(tmp_path, 300) + on_disk(tmp_path, 200) < 100_000
    assert first == f"{tmp_path}: 2 entries, {byte_size(counted)}"
    assert " 0.0 " not in first
    assert main(["cache", str(tmp_path), "--clear"]) == 0
    assert capsys.readouterr().out.startswith(f"removed 2 entries, {byte_size(counted)}\n")


@pytest.mark.parametrize("shared", [True, False], ids=["ledger", "no-ledger"])
def test_the_budget_bounds_the_disk_space_small_entries_take(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared: bool
) -> None:
    # 500-byte entries take a whole block each (4 KiB on ext4): counting their sizes let
    # a 64 KiB budget hold 127 of them, 508 KiB on disk.
    if not shared:  # a directory without a ledger (one that cannot be locked)
        monkeypatch.setattr(cache_space.CacheSpace, "_count_shared", lambda self, size: None)
    budget = 64 << 10
    c = ObjectCache(tmp_path, max_bytes=budget)
    written = sum(c.write(f"|k{i}", 500, "e", blob(500, i)) for i in range(200))
    block = os.statvfs(tmp_path).f_frsize
    assert 0 < disk_bytes(tmp_path) <= budget
    assert written == budget // max(block, 512)  # the budget is used, whole blocks at a time
    s = c.summary()
    assert (s["entries"], s["bytes"]) == (written, disk_bytes(tmp_path))
    assert c.stats.full == 200 - written
    removed, freed = c.prune()
    assert (removed, freed) == (written, s["bytes"])


def test_an_entry_changed_in_place_fails_its_checksum(tmp_path: Path) -> None:
    # Same size, other bytes (bit rot, a torn write the filesystem filled): never served.
    c = ObjectCache(tmp_path)
    data = blob(50_000, 9)
    c.write(URL, 50_000, "e", data)
    (entry,) = entries(tmp_path)
    raw = bytearray(entry.read_bytes())
    raw[25_000] ^= 0x01
    entry.write_bytes(bytes(raw))
    with pytest.warns(RuntimeWarning, match=r"bytes that are not what was written \(checksum\)"):
        assert c.read(URL, 50_000, "e") is None
    assert not entry.exists() and c.stats.bad_entries == 1
    c.write(URL, 50_000, "e", data)
    raw = bytearray(entries(tmp_path)[0].read_bytes())
    raw[-TRAILER : -TRAILER + 4] = b"XXXX"  # not a trailer at all
    entries(tmp_path)[0].write_bytes(bytes(raw))
    assert c.read(URL, 50_000, "e") is None and c.stats.bad_entries == 2


def test_a_write_that_fails_once_warns_and_the_next_is_tried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # EIO is not "every write will fail": unlike ENOSPC, writing goes on.
    c = ObjectCache(tmp_path)
    real_write = os.write
    fail = [True]

    def flaky(fd: int, data: object) -> int:
        if fail[0]:
            fail[0] = False
            raise OSError(errno.EIO, "Input/output error")
        return real_write(fd, data)  # type: ignore[arg-type]

    monkeypatch.setattr(cache_mod.os, "write", flaky)
    with pytest.warns(RuntimeWarning, match=r"a local write of .* failed .*Input/output error"):
        assert not c.write(URL, 100, "e", blob(100))
    assert entries(tmp_path) == []  # no temporary left behind
    assert c.write(URL, 100, "e", blob(100))  # not stopped: this one is written
    assert (c.stats.errors, c.stats.written, c.stats.full) == (1, 1, 0)


def test_a_remote_read_into_a_strided_buffer_is_refused() -> None:
    from headrace.formats._object_files import RemoteFile
    from headrace.io import ObjectInfo

    f = RemoteFile(None, "k", "s3://b/k", ObjectInfo(100, "e"), None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="C-contiguous"):
        f.read_into(np.zeros(20, np.uint8)[::2], 0)


def test_the_summary_of_a_cache_whose_directory_was_removed(tmp_path: Path) -> None:
    c = ObjectCache(tmp_path / "c")
    assert c.write(URL, 100, "e1", blob(100))
    assert c.summary()["entries"] == 1 and "filesystem_free_bytes" in c.summary()
    for entry in entries(tmp_path / "c"):
        entry.unlink()
    for sub in sorted((tmp_path / "c").rglob("*"), reverse=True):
        sub.rmdir()
    (tmp_path / "c").rmdir()  # by `rm -r` or another prune: nothing to list, no statvfs
    got = c.summary()
    assert (got["entries"], got["bytes"]) == (0, 0)
    assert "filesystem_free_bytes" not in got and "reserve_bytes" not in got


def test_prune_and_clear_leave_a_directory_that_is_not_a_cache_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `headrace cache ~/project --clear` (a wrong path) removed every file one level down.
    import json

    from headrace.cli import main

    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "train.py").write_text("print('hi')\n")
    (project / "README").write_text("top\n")
    # A git object store has the cache's very layout: 2 hex digits / 38 hex digits.
    objects = tmp_path / "repo" / ".git" / "objects"
    (objects / "ab").mkdir(parents=True)
    loose = objects / "ab" / ("cd" * 19)
    loose.write_bytes(b"x\x01" + blob(300))
    before = {p: p.read_bytes() for p in (*entries(project), loose)}
    for d in (project, objects):
        assert main(["cache", str(d), "--clear", "--json", str(tmp_path / "r.json")]) == 0
        out = capsys.readouterr().out
        assert "removed 0 entries" in out
        report = json.loads((tmp_path / "r.json").read_text())
        assert (report["removed_entries"], report["removed_bytes"]) == (0, 0)
        assert ObjectCache(d).prune(0) == (0, 0)
    assert main(["cache", str(project)]) == 0
    assert "2 files or folders that are not the cache's (left alone)" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in before} == before
    # A cache in the same directory as other files: only its entries go.
    c = ObjectCache(project)
    assert c.write(URL, 100, "e", blob(100))
    assert c.summary()["entries"] == 1
    assert c.summary()["other_files"] == 2
    assert c.prune(0) == (1, on_disk(project, 100))
    assert {p: p.read_bytes() for p in before} == before


def _fill(directory: str, rank: int, cap: int, barrier: Any) -> int:
    c = ObjectCache(directory, max_bytes=cap)
    barrier.wait()
    for i in range(20):
        c.write(f"|s3://b/{rank}/{i}", 2000, "e", blob(2000, i))
        time.sleep(0.002)  # ranks interleave, as their GETs do
    return c.stats.written


def test_max_bytes_holds_across_processes_filling_it_at_once(tmp_path: Path) -> None:
    # 8 ranks x 2 workers on one host each counted the directory once, at its first
    # write, then only its own writes: 6 processes filled 6x cache_bytes.
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    procs = 6
    cap = 10 * on_disk(tmp_path, 2000)
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager, ProcessPoolExecutor(procs, mp_context=ctx) as pool:
        barrier = manager.Barrier(procs)
        futures = [pool.submit(_fill, str(tmp_path), r, cap, barrier) for r in range(procs)]
        written = sum(f.result() for f in futures)
    assert written == 10 and disk_bytes(tmp_path) == cap


def test_a_clear_that_cannot_remove_entries_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A read-only mount (or another user's cache): `--clear` printed "removed 0 entries"
    # and exited 0 with every entry still there.
    from headrace.cli import main

    c = ObjectCache(tmp_path, max_bytes=1 << 20)
    for i in range(3):
        c.write(f"|o{i}", 100, "e", blob(100, i))
    real_unlink = os.unlink

    def read_only(path: str) -> None:
        if "o1" in path or path == c.path("|o1", 100, "e"):
            raise OSError(errno.EROFS, "Read-only file system")
        real_unlink(path)

    monkeypatch.setattr(cache_mod.os, "unlink", read_only)
    with pytest.raises(StorageError, match=r"1 entries could not be removed \(Read-only file"):
        c.prune(0)
    assert len(entries(tmp_path)) == 1
    assert main(["cache", str(tmp_path), "--clear"]) == 2
    assert "1 entries could not be removed" in capsys.readouterr().err
    monkeypatch.undo()
    assert c.prune(0) == (1, on_disk(tmp_path, 100))
    assert c.write("|o4", 100, "e", blob(100))  # the count was measured again


def test_cache_bytes_zero_reads_what_is_there_and_adds_nothing(tmp_path: Path) -> None:
    data = blob(100)
    assert ObjectCache(tmp_path / "c").write(URL, 100, "e", data)
    reader = ObjectCache(tmp_path / "c", max_bytes=0)
    got = reader.read(URL, 100, "e")
    assert got is not None and got.tobytes() == data
    assert not reader.write("|other", 100, "e", data)
    # Under one object's block (100 bytes and the trailer fit, a block does not).
    small = ObjectCache(tmp_path / "small", max_bytes=on_disk(tmp_path, 100) - 1)
    assert not small.write(URL, 100, "e", data)
    assert (reader.stats.full, small.stats.full) == (1, 1)
    assert entries(tmp_path / "c") == [Path(reader.path(URL, 100, "e"))]
    assert not (tmp_path / "small").exists()  # nothing made for what can never fit


@pytest.mark.parametrize(
    "refusal",
    [
        "no locks",  # flock: ENOLCK (some NFS setups), EOPNOTSUPP
        "not ours",  # another user's temporary: opening it for writing is refused
    ],
)
def test_a_temporary_whose_lock_cannot_be_tried_is_dead_only_when_an_hour_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refusal: str
) -> None:
    # Where no lock can be tried, a temporary's age is all there is: a writer may take
    # minutes, so it is a dead writer's only past STALE_TMP_S. A writer's own lock
    # (hold) is then none, and its temporary is left to that rule.
    import fcntl

    tmp = tmp_path / "t"
    tmp.write_bytes(b"x")
    flock, open_ = fcntl.flock, os.open

    def no_lock(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    def refused(path: Any, flags: int, *a: Any) -> int:
        if os.fspath(path) == str(tmp):
            raise PermissionError(errno.EACCES, "Permission denied")
        return open_(path, flags, *a)

    if refusal == "no locks":
        monkeypatch.setattr(cache_files.fcntl, "flock", no_lock)
        fd = os.open(tmp, os.O_RDWR)
        assert cache_files.hold(fd) is None
        os.close(fd)
    else:
        monkeypatch.setattr(cache_files.os, "open", refused)
    now = time.time()
    young = os.stat(tmp)
    assert not cache_files._dead(str(tmp), young, now + 20 * 60)  # 20 minutes old
    assert cache_files._dead(str(tmp), young, now + 2 * cache_files.STALE_TMP_S)
    monkeypatch.setattr(cache_files.fcntl, "flock", flock)
    monkeypatch.setattr(cache_files.os, "open", open_)
    # Renamed into place between the listing and the look: not a dead writer's.
    tmp.unlink()
    assert not cache_files._dead(str(tmp), young, now + 2 * cache_files.STALE_TMP_S)


def test_sweeping_a_cache_that_is_not_there_or_not_readable_removes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cache_files.remove_dead(str(tmp_path / "none")) == 0
    sub = tmp_path / "ab"
    sub.mkdir()
    dead = sub / f"{'cd' * 19}{cache_files.TMP}123-dead0000"
    dead.write_bytes(b"x")
    past = time.time() - 2 * cache_files.STALE_TMP_S
    os.utime(dead, (past, past))
    scandir = os.scandir

    def unreadable(path: Any) -> Any:
        if os.fspath(path) == str(sub):
            raise PermissionError(errno.EACCES, "Permission denied")
        return scandir(path)

    monkeypatch.setattr(cache_files.os, "scandir", unreadable)
    assert cache_files.remove_dead(str(tmp_path)) == 0 and dead.exists()
    assert list(cache_files.scan(str(tmp_path))) == []  # (its sub-folder unreadable)
    monkeypatch.setattr(cache_files.os, "scandir", scandir)
    assert cache_files.remove_dead(str(tmp_path)) == 1 and not dead.exists()


def test_a_sweep_beside_another_counts_only_what_it_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two processes sweep at once: a temporary listed by this one is gone before its stat
    # (the other removed it), and another cannot be unlinked (EACCES: a folder another
    # user's process made read-only). Neither fails the sweep; only the third is counted.
    sub = tmp_path / "ab"
    sub.mkdir()
    dead = [sub / f"{'cd' * 19}{cache_files.TMP}12{i}-dead000{i}" for i in range(3)]
    past = time.time() - 2 * cache_files.STALE_TMP_S
    for path in dead:
        path.write_bytes(b"x")
        os.utime(path, (past, past))
    scandir, unlink = os.scandir, os.unlink

    def listed_then_removed(path: Any) -> Any:
        entries = list(scandir(path))
        if os.fspath(path) == str(sub):
            unlink(dead[0])  # after the listing, before the stat: the other sweeper's
        return iter(entries)

    def refused(path: Any) -> None:
        if os.fspath(path) == str(dead[1]):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        unlink(path)

    monkeypatch.setattr(cache_files.os, "scandir", listed_then_removed)
    monkeypatch.setattr(cache_files.os, "unlink", refused)
    assert cache_files.remove_dead(str(tmp_path)) == 1
    assert [p.exists() for p in dead] == [False, True, False]


def test_hits_do_not_wait_while_another_process_holds_the_byte_count(tmp_path: Path) -> None:
    import fcntl

    c = ObjectCache(tmp_path, max_bytes=1 << 20)
    data = blob(1000)
    assert c.write(URL, 1000, "e", data)
    # Another process measuring a large directory holds the ledger's lock for seconds.
    fd = os.open(tmp_path / cache_files.LEDGER, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        writer = threading.Thread(target=c.write, args=("|w", 10, "e", blob(10)))
        writer.start()
        time.sleep(0.05)  # the writer is waiting for the lock
        assert writer.is_alive()
        hit: list[bytes] = []
        reader = threading.Thread(target=lambda: hit.append(c.read(URL, 1000, "e").tobytes()))
        reader.start()
        reader.join(5.0)
        assert hit == [data]  # served meanwhile
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    writer.join(5.0)
    assert not writer.is_alive() and c.stats.written == 2


def test_the_cli_names_a_cache_dir_that_is_a_file_or_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from headrace.cli import main

    (tmp_path / "f").write_bytes(b"x")
    assert main(["cache", str(tmp_path / "f")]) == 2
    assert f"{tmp_path / 'f'}: not a directory; give the cache_dir" in capsys.readouterr().err
    assert main(["cache", str(tmp_path / "none")]) == 2
    assert f"{tmp_path / 'none'}: no such directory (nothing cached" in capsys.readouterr().err


def test_an_entry_of_an_earlier_format_is_read_again_and_pruned_as_ours(tmp_path: Path) -> None:
    # HRC1 entries' checksums did not cover their names (an intact entry under another's
    # name passed): each is read from the store again once, and `--clear` still knows it.
    c = ObjectCache(tmp_path)
    data = blob(3000)
    path = Path(c.path(URL, 3000, "e"))
    path.parent.mkdir(parents=True)
    trailer = cache_files.TRAILER.pack(cache_files.MAGIC_V1, zlib.crc32(data), 3000)
    path.write_bytes(data + trailer)
    with pytest.warns(RuntimeWarning, match="has the format of an earlier headrace"):
        assert c.read(URL, 3000, "e") is None
    assert not path.exists() and c.stats.bad_entries == 1
    path.write_bytes(data + trailer)
    assert c.prune(0) == (1, on_disk(tmp_path, 3000))


def test_cache_cli_refuses_an_unwritable_json_path_before_it_removes_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `headrace cache DIR --clear --json /missing/r.json` cleared the cache, then failed to
    # write the report and exited 2: what was removed was not told (fails before: the
    # entry gone).
    from headrace.cli import main

    c = ObjectCache(tmp_path / "c")
    assert c.write(URL, 100, "e1", blob(100))
    bad = tmp_path / "missing" / "r.json"
    assert main(["cache", str(tmp_path / "c"), "--clear", "--json", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"--json {str(bad)!r}" in err and "does not exist; create it first" in err
    assert c.summary()["entries"] == 1


def test_cache_cli_says_when_its_filesystem_is_below_the_reserve_already(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # On a 10 MB filesystem: "10.5 MB free; the cache stops writing at 1.07 GB free", and
    # nothing said that the cache would never write there (fails before: no such words).
    from headrace._cache_cli import _print

    summary = {
        "directory": "/small",
        "entries": 0,
        "bytes": 0,
        "max_bytes": None,
        "oldest_use": None,
        "newest_use": None,
        "other_files": 0,
        "temporaries": 0,
        "filesystem_free_bytes": 10_500_000,
        "reserve_bytes": 1 << 30,
    }
    _print(summary)
    assert capsys.readouterr().out.splitlines()[-1] == (
        "filesystem: 10.5 MB free; the cache stops writing at 1.07 GB free: below that "
        "already, so nothing is cached there"
    )
    _print({**summary, "filesystem_free_bytes": 5 << 30})
    assert capsys.readouterr().out.splitlines()[-1].endswith("stops writing at 1.07 GB free")


def test_a_clock_set_back_does_not_keep_a_full_count_for_ever(tmp_path: Path) -> None:
    cap = on_disk(tmp_path, 6000) + on_disk(tmp_path, 4000)
    c = ObjectCache(tmp_path, max_bytes=cap)
    assert c.write("|a", 6000, "e", blob(6000)) and c.write("|b", 4000, "e", blob(4000))
    # The clock was a day ahead when the shared count was last measured (NTP then set it
    # back), and an entry has been removed since by hand.
    fd = os.open(tmp_path / cache_files.LEDGER, os.O_RDWR)
    try:
        used, _, generation = cache_space._read_ledger(fd)
        assert used == cap
        assert cache_space._write_ledger(fd, used, time.time() + 86400, generation)
    finally:
        os.close(fd)
    next(p for p in entries(tmp_path) if p.stat().st_size > 6000).unlink()
    # Until 2026-12-03 the count was measured again only once it was a minute old, so
    # it said full, and nothing was cached, until the clock had caught up a day later.
    later = ObjectCache(tmp_path, max_bytes=cap)
    assert later.write("|c", 6000, "e", blob(6000))
    assert later.stats.written == 1


def test_a_dead_writers_temporary_from_before_the_clock_was_set_back_is_removed(
    tmp_path: Path,
) -> None:
    # Its mtime a day ahead of the clock: until 2026-12-03 it stayed until the clock
    # had caught up, however free its lock.
    sub = tmp_path / "ab"
    sub.mkdir()
    dead = sub / f"{'cd' * 19}{cache_files.TMP}123-dead0000"
    dead.write_bytes(b"x" * 5000)
    ahead = time.time() + 86400
    os.utime(dead, (ahead, ahead))
    assert ObjectCache(tmp_path, max_bytes=1 << 20).write(URL, 10, "e", blob(10))
    assert not dead.exists()
