"""ObjectCache and `headrace cache`: clears beside a clock that is off, foreign files named
as entries, and what a damaged entry is reported as."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from headrace.cli import main
from headrace.errors import ConfigError
from headrace.io import ObjectCache, open_cache

URL = "|s3://bucket/data/a.jpg"


def _write(c: ObjectCache, n: int = 3) -> list[Path]:
    for i in range(n):
        assert c.write(f"{URL}{i}", 100, "e", bytes([i]) * 100)
    return [Path(c.path(f"{URL}{i}", 100, "e")) for i in range(n)]


def test_a_clear_removes_entries_whose_times_are_ahead_of_the_clock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A cache on NFS whose server's clock is ahead (or a clock set back since): the
    # entries' times are in the future, and `--clear` kept them as "used in -5 s".
    c = ObjectCache(tmp_path)
    paths = _write(c)
    ahead = time.time() + 3600
    for p in paths:
        os.utime(p, (ahead, ahead))
    assert main(["cache", str(tmp_path), "--clear"]) == 0
    assert "removed 3 entries" in capsys.readouterr().out
    assert not any(p.exists() for p in paths)
    # --prune-days keeps them: nothing says they are unused.
    paths = _write(c)
    for p in paths:
        os.utime(p, (ahead, ahead))
    assert c.prune(86_400) == (0, 0)
    assert c.prune(0)[0] == 3


def test_a_file_named_as_an_entry_without_a_trailer_is_not_counted_as_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A git object store (2/38 hex digits) given by mistake: its objects were reported as
    # the cache's entries (and after a --clear that left them, still "1 entries").
    c = ObjectCache(tmp_path)
    (entry,) = _write(c, 1)
    loose = tmp_path / "ab" / ("cd" * 19)
    loose.parent.mkdir()
    loose.write_bytes(b"x\x01" + bytes(300))
    s = c.summary()
    assert (s["entries"], s["other_files"]) == (1, 1)
    assert s["bytes"] == os.stat(entry).st_blocks * 512
    assert main(["cache", str(tmp_path), "--clear"]) == 0
    out = capsys.readouterr().out
    assert "removed 1 entries" in out and ": 0 entries, 0 B" in out
    assert "1 files or folders that are not the cache's" in out
    assert loose.read_bytes() == b"x\x01" + bytes(300)


def test_an_empty_entry_is_reported_by_its_size_not_a_negative_count(tmp_path: Path) -> None:
    # A crash's empty entry (renamed into place, never flushed) read "has -16 bytes".
    c = ObjectCache(tmp_path)
    (entry,) = _write(c, 1)
    entry.write_bytes(b"")
    with pytest.warns(
        RuntimeWarning, match=r"has 0 bytes, fewer than its 16-byte checksum trailer"
    ) as w:
        assert c.read(f"{URL}0", 100, "e") is None
    assert "has -16 bytes" not in str(w[0].message)  # (a temp path may hold "-16")
    assert not entry.exists() and c.stats.bad_entries == 1


def test_an_empty_cache_dir_is_refused_not_taken_for_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # cache_dir=os.environ.get("CACHE_DIR", "") filled the working directory with entries.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"cache_dir='' names no directory"):
        open_cache("")
    assert os.listdir(tmp_path) == []


def test_cache_bytes_may_be_a_numpy_integer(tmp_path: Path) -> None:
    # np.int64(2**30) was refused as "must be an integer", as no other count is.
    c = open_cache(tmp_path, np.int64(1 << 20))
    assert c is not None and c.max_bytes == 1 << 20 and type(c.max_bytes) is int
    assert c.write(URL, 100, "e", bytes(100))
    with pytest.raises(ConfigError, match="cache_bytes must be an integer >= 0"):
        open_cache(tmp_path, np.int64(-1))
    with pytest.raises(ConfigError, match="cache_bytes must be an integer >= 0"):
        open_cache(tmp_path, np.float64(5))


def test_an_empty_etag_is_not_cached(tmp_path: Path) -> None:
    # A server's `ETag: ""` (listed as "") is the same for every version of the object:
    # entries keyed by it served a replaced object of the same size its old bytes.
    c = ObjectCache(tmp_path)
    assert not c.cacheable("") and c.stats.uncacheable == 1
    assert c.cacheable("abc") and not c.cacheable(None) and not c.cacheable('W/"abc"')
    assert c.stats.uncacheable == 3


def test_a_summary_reads_trailers_without_marking_entries_used(tmp_path: Path) -> None:
    # Reading each entry's trailer (to tell a git object from an entry) set its access
    # time, by which the next --prune-days tells it used: nothing was ever pruned.
    c = ObjectCache(tmp_path)
    (entry,) = _write(c, 1)
    past = time.time() - 10 * 86_400
    os.utime(entry, (past, past))
    assert c.summary()["entries"] == 1
    assert os.stat(entry).st_atime == pytest.approx(past)
    assert c.prune(7 * 86_400)[0] == 1


def test_a_cache_dir_under_home_is_expanded_as_local_paths_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # cache_dir="~/.cache/hr" made a folder named "~" in the working directory (which
    # `rm -r ~` then removes the wrong way), where FileSource("~/data") reads the home's.
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    c = open_cache("~/.cache/hr")
    assert c is not None and c.directory == str(home / ".cache" / "hr")
    assert c.write(URL, 100, "e", bytes(100))
    assert os.listdir(work) == [] and (home / ".cache" / "hr").is_dir()
    assert main(["cache", "~/.cache/hr", "--clear"]) == 0
    assert "removed 1 entries" in capsys.readouterr().out


def test_cache_json_dash_writes_the_summary_to_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # `headrace cache DIR --json -` wrote a file named "-", as check and probe did.
    import json

    monkeypatch.chdir(tmp_path)
    (tmp_path / "c").mkdir()
    assert main(["cache", str(tmp_path / "c"), "--json", "-"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["entries"] == 0 and "0 entries" in err
    assert not (tmp_path / "-").exists()
    assert main(["cache", str(tmp_path / "c"), "--json", ""]) == 2
    assert "--json '' is empty" in capsys.readouterr().err
