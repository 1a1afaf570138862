"""``headrace cache DIR``: ``--clear`` and ``--prune-days`` remove the folders they empty
(until 2026-12-07 every 2-hex-digit folder stayed behind, empty), and only those: a
user's files and folders stay, byte for byte. ``--verify`` reads every entry and checks
it against the CRC-32 its trailer holds (bound to its name), as a loader's first read
of it does: a damaged one is named and removed (its object is read from the store
again), exit status 1. Damage and a folder removed under a writer are made by hand, on
real entries; the one race (a prune's rmdir between a writer's makedirs and its
temporary) by fault injection.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import pytest

from _cache_entries import blob, fill
from headrace.cli import main
from headrace.io import ObjectCache
from headrace.io import _cache as cache_mod


def _folders(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if p.is_dir()}


def test_clear_removes_the_folders_it_emptied_and_nothing_of_the_users(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, paths = fill(tmp_path, 12)
    subs = {p.parent.name for p in paths}
    assert len(subs) > 4
    # What a user put there: a file at the top, one beside entries in a cache folder, an
    # empty folder named as the cache names its own, a git-like object (2/38 hex digits,
    # no trailer) in a folder of its own.
    (tmp_path / "notes.txt").write_text("mine")
    beside = paths[0].parent / "README"
    beside.write_text("mine too")
    mine = next(f"{i:02x}" for i in range(256) if f"{i:02x}" not in subs)
    (tmp_path / mine).mkdir()
    other = next(f"{i:02x}" for i in range(255, -1, -1) if f"{i:02x}" not in subs | {mine})
    (tmp_path / other).mkdir()
    loose = tmp_path / other / ("cd" * 19)
    loose.write_bytes(b"x\x01" + blob(300))
    kept = {p: p.read_bytes() for p in (tmp_path / "notes.txt", beside, loose)}
    assert main(["cache", str(tmp_path), "--clear"]) == 0
    assert "removed 12 entries" in capsys.readouterr().out
    assert not any(p.exists() for p in paths)
    # Before: every one of `subs` stayed, empty. Now only the users' are there.
    assert _folders(tmp_path) == {paths[0].parent.name, mine, other}
    assert {p: p.read_bytes() for p in kept} == kept
    assert sorted(os.listdir(paths[0].parent)) == ["README"]
    assert main(["cache", str(tmp_path)]) == 0
    assert "0 entries" in capsys.readouterr().out


def test_prune_days_removes_only_the_folders_it_emptied(tmp_path: Path) -> None:
    c, paths = fill(tmp_path, 12)
    old = time.time() - 30 * 86_400
    by_folder: dict[str, list[Path]] = {}
    for p in paths:
        by_folder.setdefault(p.parent.name, []).append(p)
    for p in paths[: len(paths) // 2]:
        os.utime(p, (old, old))
    assert main(["cache", str(tmp_path), "--prune-days", "7"]) == 0
    young = {p.parent.name for p in paths[len(paths) // 2 :]}
    assert _folders(tmp_path) == young
    assert all(p.exists() for p in paths[len(paths) // 2 :])
    # A write into a folder a prune emptied makes it again.
    assert c.write("|s3://b/o0", 300, "e", blob(300, 0))
    assert paths[0].read_bytes()[:300] == blob(300, 0)


def test_a_write_whose_folder_a_prune_removes_under_it_still_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A prune beside a running job: its rmdir between the writer's makedirs and the
    # creation of its temporary failed the write (a warning, the store read again).
    c = ObjectCache(tmp_path)
    real = os.makedirs
    pruned: list[str] = []

    def then_pruned(name: str, exist_ok: bool = False) -> None:
        real(name, exist_ok=exist_ok)
        if os.path.dirname(name) == str(tmp_path) and not pruned:
            os.rmdir(name)  # what a prune does to a folder it emptied (once)
            pruned.append(name)

    monkeypatch.setattr(cache_mod.os, "makedirs", then_pruned)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert c.write("|s3://b/x", 300, "e", blob(300))
    monkeypatch.undo()
    assert pruned
    got = c.read("|s3://b/x", 300, "e")
    assert got is not None and got.tobytes() == blob(300)
    assert c.stats.errors == 0


def test_verify_checks_every_entry_and_removes_the_damaged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c, paths = fill(tmp_path, 12)
    (tmp_path / "notes.txt").write_text("mine")
    loose = paths[1].parent / ("ef" * 19)  # named as an entry, no trailer: not the cache's
    loose.write_bytes(blob(500))
    assert main(["cache", str(tmp_path), "--verify", "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "checked 12 entries" in out and "all as written" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert (report["verified_entries"], report["damaged_entries"]) == (12, 0)
    # A flipped bit in one entry's data; another's first bytes zeroes (a disk that lost a
    # write); a third cut short, its trailer gone: told from a file that is not the
    # cache's by nothing, left alone as a prune leaves it (a read of it removes it).
    raw = bytearray(paths[3].read_bytes())
    raw[100] ^= 0x10
    paths[3].write_bytes(bytes(raw))
    with open(paths[5], "r+b") as f:
        f.write(bytes(200))
    with open(paths[7], "r+b") as f:
        f.truncate(100)
    assert main(["cache", str(tmp_path), "--verify", "--json", str(tmp_path / "r.json")]) == 1
    out = capsys.readouterr().out
    assert str(paths[3]) in out and str(paths[5]) in out
    assert "2 damaged" in out and "removed" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert (report["verified_entries"], report["damaged_entries"]) == (9, 2)
    assert set(report["damaged"]) == {str(paths[3]), str(paths[5])}
    assert not paths[3].exists() and not paths[5].exists() and paths[7].exists()
    folders = {p.parent.name for i, p in enumerate(paths) if i not in (3, 5)}
    assert _folders(tmp_path) == folders  # (one only they were in: removed)
    assert (tmp_path / "notes.txt").read_text() == "mine" and loose.read_bytes() == blob(500)
    with pytest.warns(RuntimeWarning, match="has 84 bytes, not 307; removed"):
        for i in range(len(paths)):  # the good ones still read as written
            got = c.read(f"|s3://b/o{i}", 300 + i, "e")
            assert (got is None) == (i in (3, 5, 7))
            assert got is None or got.tobytes() == blob(300 + i, i)
    assert not paths[7].exists()  # (removed by that read: the size is not its object's)
    assert main(["cache", str(tmp_path), "--verify"]) == 0
    assert "checked 9 entries" in capsys.readouterr().out


def test_verify_is_one_of_the_actions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fill(tmp_path, 1)
    with pytest.raises(SystemExit) as exit:
        main(["cache", str(tmp_path), "--verify", "--clear"])
    assert exit.value.code == 2
    assert "--clear: not allowed with argument --verify" in capsys.readouterr().err
