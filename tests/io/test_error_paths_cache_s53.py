"""Error paths of ``headrace cache --verify`` (``_cache_cli._verify``/``_damage``), on
real entries: one that cannot be read (EIO at open or at read: fault injection of
``os.open``/``os.pread``), one removed or cut short between the scan's stat and the
check (made on the real file, from inside ``os.open``/``os.pread``), and a damaged one
that cannot be removed (a folder made immutable, or read-only where not root).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from _cache_entries import blob, fill
from headrace.cli import main


def _on_open(monkeypatch: pytest.MonkeyPatch, target: Path, act: Callable[[], None]) -> None:
    """Run ``act`` when ``target`` is opened (before the real open)."""
    real = os.open

    def opened(path: str, flags: int, *a: int) -> int:
        if os.fspath(path) == str(target):
            act()
        return real(path, flags, *a)

    monkeypatch.setattr(os, "open", opened)


def _is(fd: int, target: Path) -> bool:
    """Whether ``fd`` is open on ``target`` now (fd numbers are used again)."""
    return os.readlink(f"/proc/self/fd/{fd}") == str(target)


def test_verify_names_an_entry_that_fails_with_eio_and_checks_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    c, paths = fill(tmp_path, 6)
    real = os.pread

    def pread(fd: int, n: int, at: int) -> bytes:
        if at == 0 and _is(fd, paths[2]):  # its trailer reads; its data does not
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd, n, at)

    monkeypatch.setattr(os, "pread", pread)
    assert main(["cache", str(tmp_path), "--verify"]) == 1
    monkeypatch.undo()
    out = capsys.readouterr().out
    assert f"damaged: {paths[2]}: cannot be read (Input/output error); removed" in out
    assert "checked 6 entries" in out and "1 damaged" in out
    assert not paths[2].exists() and all(p.exists() for p in paths if p != paths[2])
    assert c.read("|s3://b/o3", 303, "e").tobytes() == blob(303, 3)  # type: ignore[union-attr]


def test_verify_names_an_entry_that_cannot_be_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, paths = fill(tmp_path, 6)

    def fail() -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    _on_open(monkeypatch, paths[4], fail)
    assert main(["cache", str(tmp_path), "--verify"]) == 1
    monkeypatch.undo()
    out = capsys.readouterr().out
    assert f"damaged: {paths[4]}: cannot be read (Input/output error)" in out
    assert "checked 6 entries" in out


def test_verify_skips_an_entry_removed_after_the_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A prune, or a reader that found it bad, between the scan's stat and the check.
    _, paths = fill(tmp_path, 6)
    _on_open(monkeypatch, paths[1], paths[1].unlink)
    assert main(["cache", str(tmp_path), "--verify"]) == 0
    monkeypatch.undo()
    out = capsys.readouterr().out
    assert "checked 5 entries" in out and "all as written" in out
    assert "damaged" not in out


def test_verify_an_entry_cut_short_after_the_scan_is_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Cut to 100 bytes between the scan's stat (its whole size) and the trailer's read:
    # the read came back short and struct.unpack raised (a traceback, nothing checked
    # after it). Its trailer gone, it is what a file cut short before the scan is: not
    # told from a file that is not the cache's, left alone (a read of it removes it).
    c, paths = fill(tmp_path, 6)

    def cut() -> None:
        with open(paths[0], "r+b") as f:
            f.truncate(100)

    _on_open(monkeypatch, paths[0], cut)
    assert main(["cache", str(tmp_path), "--verify"]) == 0
    monkeypatch.undo()
    out = capsys.readouterr().out
    assert "checked 5 entries" in out and "all as written" in out
    assert paths[0].stat().st_size == 100
    assert main(["cache", str(tmp_path), "--verify"]) == 0  # the same as a second run
    assert "checked 5 entries" in capsys.readouterr().out
    with pytest.warns(RuntimeWarning, match="has 84 bytes, not 300; removed"):
        assert c.read("|s3://b/o0", 300, "e") is None


def test_verify_an_entry_cut_short_while_it_is_read_is_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Cut after its trailer was read: its data ends early (a short read, then EOF).
    _, paths = fill(tmp_path, 6)
    real = os.pread

    def pread(fd: int, n: int, at: int) -> bytes:
        if at == 0 and _is(fd, paths[5]):
            with open(paths[5], "r+b") as f:
                f.truncate(0)
        return real(fd, n, at)

    monkeypatch.setattr(os, "pread", pread)
    assert main(["cache", str(tmp_path), "--verify"]) == 1
    monkeypatch.undo()
    out = capsys.readouterr().out
    assert f"damaged: {paths[5]}: 0 bytes, its trailer says 305 (cut short); removed" in out
    assert not paths[5].exists()


def test_verify_an_empty_entry_is_damaged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A crash's entry: renamed into place, its bytes never flushed.
    _, paths = fill(tmp_path, 6)
    paths[3].write_bytes(b"")
    assert main(["cache", str(tmp_path), "--verify"]) == 1
    assert f"damaged: {paths[3]}: empty (written, never flushed); removed" in (
        capsys.readouterr().out
    )
    assert not paths[3].exists()


@pytest.fixture
def unremovable() -> Iterator[Callable[[Path], None]]:
    """Make a folder's files unremovable: read-only (not root) or immutable (root)."""
    made: list[tuple[Path, bool]] = []

    def make(folder: Path) -> None:
        if os.geteuid() != 0:
            folder.chmod(0o555)
            made.append((folder, False))
            return
        chattr = shutil.which("chattr")
        if chattr is None:
            pytest.skip("root, and no chattr to make a folder immutable")
        if subprocess.run([chattr, "+i", str(folder)], capture_output=True).returncode:
            pytest.skip("root, and this filesystem or container refuses chattr +i")
        made.append((folder, True))

    yield make
    for folder, immutable in made:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        else:
            folder.chmod(0o755)


def test_verify_a_damaged_entry_it_cannot_remove_is_named_as_not_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], unremovable: Callable[[Path], None]
) -> None:
    _, paths = fill(tmp_path, 6)
    raw = bytearray(paths[2].read_bytes())
    raw[10] ^= 1
    paths[2].write_bytes(bytes(raw))
    unremovable(paths[2].parent)
    assert main(["cache", str(tmp_path), "--verify"]) == 1
    out = capsys.readouterr().out
    assert f"damaged: {paths[2]}: bytes that are not what was written (checksum); NOT " in out
    assert "(Operation not permitted)" in out or "(Permission denied)" in out
    assert paths[2].exists()


def test_a_clear_while_a_writer_holds_its_temporary_keeps_the_folder_and_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # ``--clear`` between a writer's temporary made and its rename: the folder it empties
    # of entries holds the temporary, so stays (its rmdir fails: not an error), the
    # temporary's writer is alive (its lock held), so it stays, and the write lands.
    c, paths = fill(tmp_path, 2)
    # A new object whose entry goes into the folder of paths[0] (which the clear empties).
    key = next(
        f"|s3://b/n{j}"
        for j in range(10_000)
        if Path(c.path(f"|s3://b/n{j}", 300, "e")).parent == paths[0].parent
    )
    real = os.open
    cleared: list[int] = []

    def opened(path: str, flags: int, *a: int) -> int:
        fd = real(path, flags, *a)
        if flags & os.O_CREAT and not cleared:
            cleared.append(main(["cache", str(tmp_path), "--clear"]))
        return fd

    monkeypatch.setattr(os, "open", opened)
    assert c.write(key, 300, "e", blob(300, 9))
    monkeypatch.undo()
    assert cleared == [0]
    assert "removed 2 entries" in capsys.readouterr().out
    assert not any(p.exists() for p in paths)
    assert os.listdir(paths[0].parent) == [Path(c.path(key, 300, "e")).name]
    got = c.read(key, 300, "e")
    assert got is not None and got.tobytes() == blob(300, 9)
    assert c.stats.errors == 0


def test_verify_reads_an_entry_it_may_not_open_without_atime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # O_NOATIME is the file owner's (EPERM for another user's entry): opened without it.
    _, paths = fill(tmp_path, 6)
    real = os.open
    refused: list[str] = []

    def opened(path: str, flags: int, *a: int) -> int:
        noatime = getattr(os, "O_NOATIME", 0)
        if noatime and flags & noatime and os.fspath(path) == str(paths[0]):
            refused.append(path)
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), path)
        return real(path, flags, *a)

    monkeypatch.setattr(os, "open", opened)
    assert main(["cache", str(tmp_path), "--verify"]) == 0
    monkeypatch.undo()
    assert "checked 6 entries" in capsys.readouterr().out and paths[0].exists()
    assert refused or not getattr(os, "O_NOATIME", 0)
