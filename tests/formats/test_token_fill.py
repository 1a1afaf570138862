"""A mapped token window's batch waits for its samples' pages, not their whole blocks.

Real token files on local disk; ``madvise`` is wrapped only to count and hold
populates (a gate, never a clock) and to inject failures.
"""

from __future__ import annotations

import errno
import gc
import hashlib
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from _fds import fds_in
from headrace.errors import StorageError
from headrace.formats import TokenSource, _token_window
from headrace.io import PAGE, deep_io_threads, io_threads

L = 64  # context: a sample is 65 uint32 tokens, 260 bytes
BLOCK = 256 << 10


SHARED_POOLS = ("headrace-io", "headrace-deep", "headrace-cache")


def filling_a_block() -> bool:
    """Whether this populate is a block's (on the I/O pool), not a sample's (deep pool)."""
    return threading.current_thread().name.startswith("headrace-io")


@contextmanager
def no_collections() -> Iterator[None]:
    """Count descriptors with no garbage collection in between: sources that other tests
    dropped unclosed are collected first, not by chance during a count (which then fell)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def write_tokens(path: Path, n: int) -> np.ndarray:
    t = np.random.default_rng(3).integers(0, 2**31 - 1, n, dtype=np.int64).astype(np.uint32)
    t.tofile(path)
    return t


def source(path: Path) -> TokenSource:
    # One 4 MiB window of 16 blocks of 256 KiB.
    return TokenSource(path, dtype="uint32", context=L, window_bytes=4 << 20, block_bytes=BLOCK)


def expected(src: TokenSource, tokens: np.ndarray, seed: int, samples: np.ndarray) -> np.ndarray:
    _, offsets = src.starts(seed, samples)
    return np.stack([tokens[o : o + L + 1] for o in offsets.tolist()])


def test_the_batch_waits_for_its_samples_pages_while_the_blocks_fill_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = write_tokens(tmp_path / "t.bin", 1 << 20)
    samples = np.arange(12, dtype=np.int64)
    real = _token_window.madvise
    gate = threading.Event()
    lock = threading.Lock()
    populated: list[tuple[int, bool]] = []  # (bytes, whether the gate was open by then)

    def counting(view, start, length, advice):  # type: ignore[no-untyped-def]
        if advice == _token_window.MADV_POPULATE_READ and filling_a_block():
            gate.wait(timeout=20)  # held until the batch is back (20 s: no hang)
        real(view, start, length, advice)
        if advice == _token_window.MADV_POPULATE_READ:
            with lock:
                populated.append((length, gate.is_set()))

    src = source(tmp_path / "t.bin")
    monkeypatch.setattr(_token_window, "madvise", counting)
    batch = src.read(5, samples)
    gate.set()
    want = expected(src, tokens, 5, samples)
    assert np.array_equal(batch["x"], want[:, :-1])
    assert np.array_equal(batch["y"], want[:, 1:])
    _, offsets = src.starts(5, samples)
    touched = np.unique(
        np.concatenate([offsets * 4 // BLOCK, ((offsets + L + 1) * 4 - 1) // BLOCK])
    )
    with lock:
        first = [n for n, opened in populated if not opened]
    # Every populate before the batch came back was a sample's pages: at most 2 pages
    # each, against the touched blocks' 256 KiB each.
    assert 0 < len(first) <= len(samples)
    assert sum(first) <= len(samples) * 2 * PAGE < touched.size * BLOCK
    assert src.stats.bytes_read == sum(first)  # what the bench reports before a first batch
    (win,) = src._windows.values()
    assert set(win.pending) <= set(touched.tolist())  # the rest of those blocks, and no other
    src.close()
    monkeypatch.undo()

    # The same batch from whole blocks (how releases before this one read): same bytes.
    monkeypatch.setattr(_token_window, "_SAMPLE_FIRST", False)
    whole = source(tmp_path / "t.bin")
    assert np.array_equal(whole.read(5, samples)["x"], batch["x"])
    assert whole.stats.blocks_read == touched.size
    whole.close()


def test_blocks_filled_behind_are_counted_and_not_read_again(tmp_path: Path) -> None:
    tokens = write_tokens(tmp_path / "t.bin", 1 << 20)
    src = source(tmp_path / "t.bin")
    samples = np.arange(40, dtype=np.int64)
    first = src.read(1, samples)["x"].copy()
    (win,) = src._windows.values()
    requested = set(win.pending) | set(np.flatnonzero(win.filled).tolist())
    # Wait for the blocks behind: the next batch records them and reads nothing.
    for fut in list(win.pending.values()):
        fut.result()
    again = src.read(1, samples)["x"]
    assert np.array_equal(again, first)
    assert np.array_equal(first, expected(src, tokens, 1, samples)[:, :-1])
    assert win.pending == {}
    assert set(np.flatnonzero(win.filled).tolist()) == requested
    assert src.stats.blocks_read == len(requested)
    assert src.stats.bytes_read == sum(win._block_len(b) for b in requested)
    src.close()


def test_a_failed_sample_read_names_the_file_and_its_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = write_tokens(tmp_path / "t.bin", 1 << 20)
    src = source(tmp_path / "t.bin")
    src.read(0, np.arange(0))  # probes populate support (not through the module's madvise)
    real = _token_window.madvise
    failed: list[tuple[int, int]] = []

    def failing(view, start, length, advice):  # type: ignore[no-untyped-def]
        if advice == _token_window.MADV_POPULATE_READ and not filling_a_block():
            failed.append((start, start + length))
            raise OSError(errno.EIO, "Input/output error")  # fault injection: a sample's pages
        real(view, start, length, advice)

    monkeypatch.setattr(_token_window, "madvise", failing)
    samples = np.arange(8, dtype=np.int64)
    with pytest.raises(
        StorageError,
        match=r"t\.bin: reading bytes \[\d+, \d+\) through the file map failed: Input/output error",
    ) as info:
        src.read(2, samples)
    assert info.value.errno == errno.EIO
    _, offsets = src.starts(2, samples)
    ranges = {(o * 4 // PAGE * PAGE, (o + L + 1) * 4) for o in offsets.tolist()}
    assert set(failed) <= ranges
    assert any(f"[{a}, {b})" in str(info.value) for a, b in ranges)
    assert "other sample reads also failed" in "".join(getattr(info.value, "__notes__", []))
    monkeypatch.undo()
    out = src.read(2, samples)  # nothing was marked filled: read again, right
    assert np.array_equal(out["y"], expected(src, tokens, 2, samples)[:, 1:])
    src.close()


def test_a_failed_block_behind_fails_no_batch_and_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = write_tokens(tmp_path / "t.bin", 1 << 20)
    src = source(tmp_path / "t.bin")
    src.read(0, np.arange(0))
    real = _token_window.madvise

    def failing(view, start, length, advice):  # type: ignore[no-untyped-def]
        if advice == _token_window.MADV_POPULATE_READ and filling_a_block():
            raise OSError(errno.EFAULT, "Bad address")  # fault injection: a block behind
        real(view, start, length, advice)

    monkeypatch.setattr(_token_window, "madvise", failing)
    samples = np.arange(16, dtype=np.int64)
    out = src.read(4, samples)  # its own pages were read: nobody waits for the blocks
    assert np.array_equal(out["x"], expected(src, tokens, 4, samples)[:, :-1])
    (win,) = src._windows.values()
    for fut in list(win.pending.values()):
        with pytest.raises(StorageError, match=r"t\.bin: .*the storage could not read them"):
            fut.result()
    monkeypatch.undo()
    src.read(4, samples)  # the failures are dropped, the blocks asked for again
    assert not win.filled.any()
    for fut in list(win.pending.values()):
        fut.result()
    assert np.array_equal(src.read(4, samples)["x"], out["x"])
    assert win.filled.sum() == src.stats.blocks_read > 0
    src.close()


def test_close_cancels_the_blocks_behind_that_have_not_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_tokens(tmp_path / "t.bin", 1 << 20)
    # 64 blocks of 64 KiB: a batch of 200 samples touches more than the pool has threads.
    src = TokenSource(
        tmp_path / "t.bin", dtype="uint32", context=L, window_bytes=4 << 20, block_bytes=64 << 10
    )
    real = _token_window.madvise
    gate = threading.Event()
    started = threading.Semaphore(0)
    ran: list[int] = []

    def holding(view, start, length, advice):  # type: ignore[no-untyped-def]
        if advice == _token_window.MADV_POPULATE_READ and filling_a_block():
            ran.append(start)
            started.release()
            gate.wait(timeout=20)  # a block: held until close has cancelled the rest
        real(view, start, length, advice)

    monkeypatch.setattr(_token_window, "madvise", holding)
    src.read(6, np.arange(200, dtype=np.int64))
    (win,) = src._windows.values()
    threads = io_threads()
    assert len(win.pending) > threads
    for _ in range(threads):  # every I/O thread holds a block; the rest wait their turn
        assert started.acquire(timeout=20)
    behind = list(win.pending.values())
    closing = threading.Thread(target=src.close)
    closing.start()
    deadline = time.monotonic() + 20  # a bound on the wait, not a measurement
    while sum(f.cancelled() for f in behind) < len(behind) - threads:
        assert time.monotonic() < deadline, "close did not cancel the blocks not started"
        time.sleep(0.001)
    gate.set()
    closing.join(timeout=20)
    assert not closing.is_alive()
    assert len(ran) == threads  # the blocks that had not started never ran
    assert src.stats.blocks_read == threads


def test_sources_opened_read_and_closed_leave_no_descriptors_or_threads(tmp_path: Path) -> None:
    tokens = write_tokens(tmp_path / "t.bin", 1 << 20)
    counts = []
    # Threads alive before are not counted: an earlier test's in this process may end
    # meanwhile (a CI run saw 21 such threads at the first count, 5 at the next).
    before = {t.ident for t in threading.enumerate()}
    with no_collections():
        for seed in range(3):
            src = source(tmp_path / "t.bin")
            out = src.read(seed, np.arange(64, dtype=np.int64))
            assert np.array_equal(out["x"], expected(src, tokens, seed, np.arange(64))[:, :-1])
            src.close()
            own = [
                t
                for t in threading.enumerate()
                if not t.name.startswith(SHARED_POOLS) and t.ident not in before
            ]
            counts.append((len(os.listdir("/proc/self/fd")), len(own)))
    assert counts[0] == counts[1] == counts[2]
    # The shared pools start threads as work comes, up to their sizes, and keep them.
    deep = [t for t in threading.enumerate() if t.name.startswith("headrace-deep")]
    assert len(deep) <= deep_io_threads()


def test_windows_off_page_bounds_count_each_filled_block_once(tmp_path: Path) -> None:
    # Windows of 84 samples of 64 tokens (21,504 bytes, not a page multiple): the later
    # windows start mid-page, and blocks of 8 KiB cut samples' page ranges in two.
    tokens = write_tokens(tmp_path / "t.bin", 3 * 84 * L + 1)
    src = TokenSource(
        tmp_path / "t.bin",
        dtype="uint32",
        context=L,
        window_bytes=84 * L * 4 + 4,
        block_bytes=8 << 10,
        max_windows=3,
        read_ahead=False,
    )
    samples = np.arange(0, src.samples_per_epoch, 3, dtype=np.int64)
    first = src.read(9, samples)["x"].copy()
    assert np.array_equal(first, expected(src, tokens, 9, samples)[:, :-1])
    assert len(src._windows) == 3 and any(w.offset % PAGE for w in src._windows.values())
    assert src.stats.bytes_read > 0
    for win in src._windows.values():
        for fut in list(win.pending.values()):
            fut.result()
    again = src.read(9, samples)["x"]  # records the blocks filled behind
    assert np.array_equal(again, first)
    filled = sum(w._block_len(b) for w in src._windows.values() for b in np.flatnonzero(w.filled))
    assert src.stats.bytes_read == filled
    assert src.stats.blocks_read == sum(int(w.filled.sum()) for w in src._windows.values())
    src.close()


def _read_all(src: TokenSource, fds: list[int], folder: Path | None = None) -> str:
    """The digest of every sample of an epoch; the descriptors on files in ``folder`` after
    each batch into ``fds`` (where given)."""
    h = hashlib.sha256()
    n = src.samples_per_epoch
    for start in range(0, n, 32):
        h.update(src.read(7, np.arange(start, min(start + 32, n), dtype=np.int64))["x"].tobytes())
        if folder is not None:
            fds.append(fds_in(folder))
    return h.hexdigest()


@pytest.mark.parametrize("reads", ["populate", "pread"])
def test_a_source_of_many_files_keeps_few_of_them_open(
    tmp_path: Path, reads: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every file a source had read stayed open until close(), two descriptors each when
    # mapped: 700 shards under `ulimit -n 1024` failed after 703 batches of 32 (EMFILE).
    # Now the files without a window are closed past MAX_IDLE_FILES; the bytes are the
    # same whatever the bound.
    from headrace.formats import _token_source

    files = []
    for i in range(150):
        write_tokens(tmp_path / f"{i:03d}.bin", 2000 + i)
        files.append(tmp_path / f"{i:03d}.bin")
    digests = []
    for bound in (_token_source.MAX_IDLE_FILES, 0):
        monkeypatch.setattr(_token_source, "MAX_IDLE_FILES", bound)
        src = TokenSource(files, dtype="uint32", context=L, window_bytes=32 << 10,
                          block_bytes=8 << 10, reads=reads)  # fmt: skip
        fds: list[int] = []
        # Descriptors on the token files, not all of the process's: one that something
        # else closed meanwhile made a total count fall (53 against 54, 2026-12-05).
        try:
            digests.append(_read_all(src, fds, tmp_path))
        finally:
            src.close()
        per_file = 2 if reads == "populate" else 1  # a map holds a second descriptor
        assert max(fds) <= per_file * (bound + 4), (bound, max(fds))
        assert fds_in(tmp_path) == 0
    assert digests[0] == digests[1]


def test_a_file_closed_while_idle_and_replaced_is_not_reopened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Idle files are closed past MAX_IDLE_FILES and opened again by path when read: a
    # file renamed over in between (same size) gave its samples from the new file.
    from headrace.errors import StorageError
    from headrace.formats import _token_source

    monkeypatch.setattr(_token_source, "MAX_IDLE_FILES", 0)
    files = [tmp_path / f"{i}.bin" for i in range(3)]

    def write(path: Path, seed: int) -> None:
        np.random.default_rng(seed).integers(0, 2**31, 3000).astype(np.uint32).tofile(path)

    for i, f in enumerate(files):
        write(f, i)
    src = TokenSource(files, dtype="uint32", context=L, window_bytes=4 << 10, max_windows=1)
    try:
        first = _read_all(src, [])
        assert _read_all(src, []) == first  # reopened, the same files
        for i, f in enumerate(files):
            write(tmp_path / "new.bin", 10 + i)
            os.replace(tmp_path / "new.bin", f)
        with pytest.raises(StorageError, match=r"\d\.bin: the file was replaced since it was"):
            _read_all(src, [])
    finally:
        src.close()
