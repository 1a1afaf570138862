"""The cache directory as it is found: files that are not the cache's, files that go
while it is walked, and entries that cannot be read or removed
(``headrace.io._cache_files``). Races are made by fault injection: the file removed
between the listing and the look."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Any

import pytest

from headrace.io import ObjectCache
from headrace.io import _cache_files as cache_files

URL = "|s3://bucket/data/a.jpg"
OLD = time.time() - 2 * cache_files.STALE_TMP_S


def _cache(root: Path, n: int = 3) -> tuple[ObjectCache, list[Path]]:
    c = ObjectCache(root, max_bytes=1 << 20)
    for i in range(n):
        assert c.write(f"{URL}{i}", 100, "e", bytes([i]) * 100)
    return c, [Path(c.path(f"{URL}{i}", 100, "e")) for i in range(n)]


def _old(path: Path) -> Path:
    os.utime(path, (OLD, OLD))
    return path


def test_what_is_not_the_caches_is_listed_as_other_and_left_alone(tmp_path: Path) -> None:
    c, (entry, *_) = _cache(tmp_path)
    sub = entry.parent
    (tmp_path / "notes.txt").write_text("mine")  # beside the sub-folders
    (tmp_path / "ef").write_text("a file named as a sub-folder")
    (sub / "README").write_text("mine too")  # in a sub-folder, named as no entry
    (sub / ("0" * 38)).mkdir()  # a folder named as an entry
    os.symlink(entry, sub / ("1" * 38))  # a link named as an entry: not followed
    os.mkfifo(sub / ("2" * 38))
    kinds = {
        os.path.basename(p): (st is None, kind) for p, st, kind in cache_files.scan(str(tmp_path))
    }
    others = {"notes.txt", "ef", "README", "0" * 38, "1" * 38, "2" * 38}
    assert {k for k, (_, kind) in kinds.items() if kind == "other"} == others
    assert all(no_stat for k, (no_stat, _) in kinds.items() if k in others)
    assert kinds[entry.name] == (False, "entry")
    size = cache_files.disk_bytes(os.stat(entry))
    assert c.prune(0) == (3, 3 * size)
    assert sorted(os.listdir(sub)) == sorted(["README", "0" * 38, "1" * 38, "2" * 38])
    assert (tmp_path / "notes.txt").read_text() == "mine" and (tmp_path / "ef").exists()


def test_a_file_removed_while_the_directory_is_walked_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, entries = _cache(tmp_path)
    gone = entries[1]
    gone_sub = tmp_path / "9f"  # a sub-folder removed (an rm -r) after the top listing
    gone_sub.mkdir()
    real_scandir = os.scandir

    class Vanishing:
        """A directory entry whose file was removed after the listing named it."""

        def __init__(self, e: Any) -> None:
            self._e, self.name, self.path = e, e.name, e.path

        def stat(self, **kw: Any) -> os.stat_result:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", self.path)

        def is_dir(self, **kw: Any) -> bool:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", self.path)

    def scandir(path: Any) -> Any:
        if os.fspath(path) == str(gone_sub):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        out = list(real_scandir(path))
        return [Vanishing(e) if e.path in (str(gone), str(gone_sub)) else e for e in out]

    monkeypatch.setattr(cache_files.os, "scandir", scandir)
    listed = [(os.path.basename(p), kind) for p, _, kind in cache_files.scan(str(tmp_path))]
    # The vanished entry is not listed; the sub-folder that went is "other" (not walked).
    assert sorted(listed) == sorted(
        [(entries[0].name, "entry"), (entries[2].name, "entry"), ("9f", "other")]
    )
    assert cache_files.measure(str(tmp_path)) == 2 * cache_files.disk_bytes(os.stat(entries[0]))


def test_an_entry_removed_by_another_prune_meanwhile_is_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c, entries = _cache(tmp_path)
    real_unlink = os.unlink

    def raced(path: Any) -> None:
        real_unlink(path)  # removed by the other prune first
        if os.fspath(path) == str(entries[0]):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)

    monkeypatch.setattr(cache_files.os, "unlink", raced)
    removed, _ = c.prune(0)
    assert removed == 2 and not any(p.exists() for p in entries)


def test_a_dead_writers_temporary_goes_with_a_prune_a_live_ones_stays(tmp_path: Path) -> None:
    c, (entry, *_) = _cache(tmp_path, 1)
    dead = entry.parent / f"{entry.name}{cache_files.TMP}4242-deadbeef"
    dead.write_bytes(b"partial")
    _old(dead)
    live = entry.parent / f"{entry.name}{cache_files.TMP}4243-0123abcd"
    fd = os.open(live, os.O_CREAT | os.O_RDWR)
    try:
        assert cache_files.hold(fd) is not None
        _old(live)
        assert c.prune(3600) == (0, 0)  # the entry is young: kept
        assert not dead.exists() and live.exists()
        # measure() too removes the dead ones, counting the entries only.
        dead.write_bytes(b"partial")
        _old(dead)
        assert cache_files.measure(str(tmp_path)) == cache_files.disk_bytes(os.stat(entry))
        assert not dead.exists() and live.exists()
    finally:
        os.close(fd)


@pytest.mark.parametrize("fails", ["open", "pread"])
def test_an_entry_that_cannot_be_read_is_not_taken_for_the_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: str
) -> None:
    _, (entry, *_) = _cache(tmp_path, 1)
    size = entry.stat().st_size
    assert cache_files.is_entry(str(entry), size)
    assert not cache_files.is_entry(str(entry), size + 5)  # the length must match
    assert cache_files.is_entry(str(tmp_path / "empty"), 0)  # a crash's empty entry

    def broken(*args: Any) -> Any:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(cache_files.os, fails, broken)
    assert not cache_files.is_entry(str(entry), size)


def test_a_short_tail_is_not_an_entry(tmp_path: Path) -> None:
    f = tmp_path / "short"
    f.write_bytes(b"x" * (cache_files.TRAILER.size + 3))
    # Told it is longer than it is (it shrank since its stat): the tail read comes back short.
    assert not cache_files.is_entry(str(f), cache_files.TRAILER.size + 10)
