"""A token source's cache_dir when its disk fails it, against a real S3 endpoint (moto).

Disk full while an entry is written, a directory that turns read-only or is removed
while the run goes on, a process killed while it fills the cache, entries damaged
between runs: every batch is the store's bytes, the warning says what happened,
and nothing half-written is ever served to a later run.
"""

from __future__ import annotations

import errno
import multiprocessing as mp
import os
import shutil
import signal
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture, upload_token_file

from headrace.io import ObjectCache
from headrace.io import _cache_files as cache_files
from headrace.pipeline import DEFAULT_CHUNK_STEPS, Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

TOKENS = 40_001  # uint32: 160 KB, 20 blocks of 8 KiB, each an entry
TOKEN_KW: dict[str, Any] = {"context": 32, "window_bytes": 32 << 10, "block_bytes": 8 << 10}
PREFIX = "faulty-cache"
BLOCKS = 20
TRAILER = ObjectCache.TRAILER_BYTES


@pytest.fixture(scope="module")
def token_file(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return upload_token_file(s3, tmp_path_factory.mktemp(PREFIX), PREFIX, TOKENS, 5)


@pytest.fixture(scope="module")
def clean(token_file: Path) -> str:
    """The digest of the run from the local file: what every cached run must give."""
    from headrace.formats import TokenSource

    return run(TokenSource(token_file, **TOKEN_KW))


def tokens(s3: S3Fixture, cache: Path, **kw: Any) -> Any:
    from headrace.formats import TokenSource

    return TokenSource(
        f"s3://{BUCKET}/{PREFIX}/tok.bin",
        store_options={**s3.options(), "retry": FAST_RETRY},
        cache_dir=cache,
        **TOKEN_KW,
        **kw,
    )


def run(src: Any, steps: int = 80, at_step: Callable[[int], None] | None = None) -> str:
    """80 steps of 16 (a pass over the file and a bit), digested; ``at_step(i)`` runs
    before step ``i`` is taken, with the loader's reads ahead of it bounded by steps
    (chunks of one step, 8 queued): in chunks of up to 32 the last chunk's reads (steps
    63-79) may start when step 31 is taken."""
    chunk_steps = DEFAULT_CHUNK_STEPS if at_step is None else 1
    with Loader(src, batch_size=16, seed=4, steps=steps, chunk_steps=chunk_steps) as loader:
        if at_step is None:
            return batch_digest(loader)

        def batches() -> Any:
            for i, batch in enumerate(loader):
                at_step(i)
                yield batch

        return batch_digest(batches())


def files(cache: Path) -> dict[str, list[Path]]:
    """The cache directory's entries and writers' temporaries."""
    out: dict[str, list[Path]] = {"entry": [], "tmp": []}
    for path, st, kind in cache_files.scan(str(cache)):
        if st is not None:
            out[kind].append(Path(path))
    return out


def good(entry: Path, token_file: Path) -> bool:
    """Whether an entry holds bytes of the token file and its trailer says so."""
    raw = entry.read_bytes()
    body = raw[:-TRAILER]
    return cache_files.is_entry(str(entry), len(raw)) and body in token_file.read_bytes()


class TmpFaults:
    """Fail the cache's writes of its temporary files (and nothing else in the process:
    the store's client and the loader write too)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fds: set[int] = set()
        self.real_open, self.real_write, self.real_close = os.open, os.write, os.close
        self.monkeypatch = monkeypatch
        self.fail_close: Callable[[int], None] = self.real_close
        monkeypatch.setattr(os, "open", self._open)
        monkeypatch.setattr(os, "close", self._close)

    def _open(self, path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = self.real_open(path, flags, *args, **kwargs)
        if cache_files.TMP in os.fspath(path):
            self.fds.add(fd)
        return fd

    def on_write(self, fail: Callable[[int, Any], int]) -> None:
        def write(fd: int, data: Any) -> int:
            return fail(fd, data) if fd in self.fds else self.real_write(fd, data)

        self.monkeypatch.setattr(os, "write", write)

    def _close(self, fd: int) -> None:
        if fd in self.fds:  # (its number may be another file's next)
            self.fds.discard(fd)
            self.fail_close(fd)
        else:
            self.real_close(fd)


@pytest.mark.parametrize("where", ["write", "close"])
def test_a_full_disk_mid_entry_serves_the_stores_bytes_and_keeps_nothing_half_written(
    s3: S3Fixture,
    token_file: Path,
    clean: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    cache = tmp_path / "cache"
    faults = TmpFaults(monkeypatch)
    enospc = OSError(errno.ENOSPC, "No space left on device")

    def half_then_full(fd: int, data: Any) -> int:
        view = memoryview(data).cast("B")
        if len(view) > 1:
            return faults.real_write(fd, view[: len(view) // 2])  # a short write: retried
        raise enospc

    def full_at_close(fd: int) -> None:  # NFS and quotas say so when the file is closed
        faults.real_close(fd)
        raise enospc

    if where == "write":
        faults.on_write(half_then_full)
    else:
        faults.fail_close = full_at_close
    src = tokens(s3, cache, cache_bytes=1 << 20)
    with pytest.warns(RuntimeWarning, match=r"stopped writing in this process: No space left"):
        assert run(src) == clean
    assert src.cache_stats is not None
    assert src.cache_stats.written == 0 and src.cache_stats.errors >= 1
    assert files(cache) == {"entry": [], "tmp": []}  # the half-written temporaries are gone
    assert ObjectCache(cache).summary()["bytes"] == 0
    monkeypatch.undo()

    # Room again: the next run fills the cache within its cap (the failed writes gave
    # their bytes back), and the one after reads every block from it.
    again = tokens(s3, cache, cache_bytes=BLOCKS * (12 << 10))
    assert run(again) == clean
    assert again.cache_stats is not None and again.cache_stats.written == BLOCKS
    warm = tokens(s3, cache, cache_bytes=BLOCKS * (12 << 10))
    assert run(warm) == clean
    assert warm.cache_stats is not None
    assert (warm.cache_stats.written, warm.cache_stats.misses, warm.cache_stats.bad_entries) == (
        0,
        0,
        0,
    )


def flip(entry: Path) -> None:
    raw = bytearray(entry.read_bytes())
    raw[len(raw) // 3] ^= 0x10
    entry.write_bytes(bytes(raw))


def test_a_cache_turned_read_only_serves_its_entries_and_says_a_bad_one_stays(
    s3: S3Fixture, token_file: Path, clean: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Mounted read-only (or another user's, read-only to this one): emulated, since the
    # tests may run as root, whom permissions do not stop.
    cache = tmp_path / "cache"
    assert run(tokens(s3, cache, cache_bytes=1 << 20)) == clean
    entries = files(cache)["entry"]
    assert len(entries) == BLOCKS
    flip(entries[0])  # damaged before the mount turned read-only
    root = str(cache)
    real_open, real_unlink, real_replace, real_mkdir = os.open, os.unlink, os.replace, os.mkdir
    erofs = OSError(errno.EROFS, "Read-only file system")

    def ro_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path).startswith(root) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise erofs
        return real_open(path, flags, *args, **kwargs)

    def ro(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(path: Any, *args: Any, **kwargs: Any) -> Any:
            if os.fspath(path).startswith(root):
                raise erofs
            return real(path, *args, **kwargs)

        return call

    monkeypatch.setattr(os, "open", ro_open)
    monkeypatch.setattr(os, "unlink", ro(real_unlink))
    monkeypatch.setattr(os, "replace", ro(real_replace))
    monkeypatch.setattr(os, "mkdir", ro(real_mkdir))
    src = tokens(s3, cache, cache_bytes=1 << 20)
    with pytest.warns(RuntimeWarning) as caught:
        assert run(src) == clean
    messages = [str(w.message) for w in caught]
    assert any(
        f"entry {entries[0]} has bytes that are not what was written (checksum); it could "
        "not be removed (Read-only file system)" in m
        for m in messages
    ), messages
    assert not any("removed, its bytes" in m for m in messages)  # it was not
    assert src.cache_stats is not None
    st = src.cache_stats
    assert st.written == 0 and st.bad_entries >= 1 and st.hits >= BLOCKS - 1
    monkeypatch.undo()
    assert entries[0].exists()  # still there: read-only
    warm = tokens(s3, cache, cache_bytes=1 << 20)  # writable again: removed, rewritten
    with pytest.warns(RuntimeWarning, match="removed, its bytes are read from the store"):
        assert run(warm) == clean
    assert good(entries[0], token_file)


def test_a_cache_dir_removed_while_running_is_made_again(
    s3: S3Fixture, token_file: Path, clean: str, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    assert run(tokens(s3, cache, cache_bytes=1 << 20)) == clean

    def remove(step: int) -> None:
        # By `rm -r`, another job's clean-up. When step 40 is taken the loader has read
        # at most 10 steps ahead, and steps 63-79 need blocks not read yet: entries are
        # written after the second removal (in chunks of 32 steps, a loaded machine
        # read them before it, and left none).
        if step in (10, 40):
            shutil.rmtree(cache, ignore_errors=True)

    src = tokens(s3, cache, cache_bytes=1 << 20)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert run(src, at_step=remove) == clean
    # A write under way as the folder went may fail: said, and the run goes on.
    assert all(f"headrace cache {cache}: a local write" in str(w.message) for w in caught)
    assert src.cache_stats is not None and src.cache_stats.misses > 0
    made = files(cache)
    assert made["tmp"] == [] and 0 < len(made["entry"]) <= BLOCKS
    assert all(good(e, token_file) for e in made["entry"])
    warm = tokens(s3, cache, cache_bytes=1 << 20)
    assert run(warm) == clean
    assert warm.cache_stats is not None and warm.cache_stats.bad_entries == 0


def _fill_until_killed(options: dict[str, Any], cache: str, marker: str) -> None:
    """A rank that fills the cache and stops for good halfway through its fourth entry
    (every thread that writes one after it too), to be killed there."""
    from headrace.formats import TokenSource

    real_open, real_write = os.open, os.write
    fds: set[int] = set()
    started = [0]

    def opener(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = real_open(path, flags, *args, **kwargs)
        if cache_files.TMP in os.fspath(path):
            fds.add(fd)
            started[0] += 1
        return fd

    def write(fd: int, data: Any) -> int:
        if fd in fds and started[0] >= 4:
            view = memoryview(data).cast("B")
            real_write(fd, view[: len(view) // 2])
            Path(marker).touch()
            time.sleep(600)
        return real_write(fd, data)

    os.open = opener  # type: ignore[assignment]
    os.write = write  # type: ignore[assignment]
    src = TokenSource(
        f"s3://{BUCKET}/{PREFIX}/tok.bin",
        store_options=options,
        cache_dir=cache,
        cache_bytes=1 << 20,
        **TOKEN_KW,
    )
    run(src)


def test_a_rank_killed_while_filling_leaves_nothing_a_later_run_serves(
    s3: S3Fixture, token_file: Path, clean: str, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    marker = tmp_path / "stopped"
    options = {**s3.options(), "retry": FAST_RETRY}
    proc = mp.get_context("spawn").Process(
        target=_fill_until_killed, args=(options, str(cache), str(marker))
    )
    proc.start()
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and proc.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists()
        # A writer alive (here stopped mid-entry) keeps its temporaries, however old.
        writing = files(cache)["tmp"]
        assert writing
        backdate(writing, 60)
        assert cache_files.remove_dead(str(cache)) == 0
        assert files(cache)["tmp"] == writing
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # preempted: no handler, no clean-up
        proc.join(10)
    left = files(cache)
    assert len(left["tmp"]) >= 1  # the half-written entries: left, as a kill leaves them
    assert all(good(e, token_file) for e in left["entry"])
    assert all(p.stat().st_size < (8 << 10) + TRAILER for p in left["tmp"])

    # Restarted after the preemption (the temporaries now older than DEAD_TMP_S): the
    # later run's first write removes them. Until 2026-12-03 they stayed an hour at
    # least, and for good once the cache was complete (no write, no measure after).
    backdate(left["tmp"], 60)
    later = tokens(s3, cache, cache_bytes=1 << 20)
    assert run(later) == clean
    assert later.cache_stats is not None
    assert later.cache_stats.bad_entries == 0 and later.cache_stats.hits > 0
    assert later.cache_stats.written == BLOCKS - len(left["entry"])
    assert files(cache)["tmp"] == []
    assert all(good(e, token_file) for e in files(cache)["entry"])


def backdate(paths: list[Path], seconds: float) -> None:
    """Make files ``seconds`` older (as a restart that long after a kill finds them)."""
    for path in paths:
        t = path.stat().st_mtime - seconds
        os.utime(path, (t, t))


def swap(entries: list[Path]) -> None:
    """Two entries of the same size exchange their files (each intact, under the other's
    name: a misdirected write, a restore gone wrong)."""
    # Any two of one size: which entries a run leaves (a tail block, a piece read on its
    # own) depends on timing, so the first one listed may have no twin.
    by_size: dict[int, list[Path]] = {}
    for e in entries:
        by_size.setdefault(e.stat().st_size, []).append(e)
    a, b = next(same[:2] for same in by_size.values() if len(same) >= 2)
    ra, rb = a.read_bytes(), b.read_bytes()
    assert ra != rb
    a.write_bytes(rb)
    b.write_bytes(ra)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(flip, id="a-flipped-bit"),
        pytest.param(lambda e: e.write_bytes(b""), id="emptied"),
        pytest.param(lambda e: e.write_bytes(e.read_bytes()[: 4 << 10]), id="cut-short"),
        pytest.param(lambda e: e.write_bytes(e.read_bytes()[:-TRAILER]), id="no-trailer"),
    ],
)
def test_an_entry_damaged_between_runs_is_read_again_not_served(
    s3: S3Fixture, token_file: Path, clean: str, tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    cache = tmp_path / "cache"
    assert run(tokens(s3, cache)) == clean
    entries = files(cache)["entry"]
    for e in entries[::4]:
        damage(e)
    src = tokens(s3, cache)
    with pytest.warns(RuntimeWarning, match="removed, its bytes are read from the store"):
        assert run(src) == clean
    assert src.cache_stats is not None
    assert src.cache_stats.bad_entries == src.cache_stats.written == len(entries[::4])
    assert all(good(e, token_file) for e in entries)
    warm = tokens(s3, cache)
    assert run(warm) == clean
    assert warm.cache_stats is not None and warm.cache_stats.misses == 0


def test_entries_swapped_between_runs_are_read_again_not_served(
    s3: S3Fixture, token_file: Path, clean: str, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    assert run(tokens(s3, cache)) == clean
    entries = files(cache)["entry"]
    swap(entries)
    src = tokens(s3, cache)
    with pytest.warns(RuntimeWarning, match="removed, its bytes are read from the store"):
        assert run(src) == clean
    assert src.cache_stats is not None and src.cache_stats.bad_entries == 2
