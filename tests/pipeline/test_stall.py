"""Loader(stall_warn_s=): checked, silent on a fast run, and never a change of bytes.

Its warnings on storage that stalls are tested on a slow FUSE mount and an S3
endpoint behind a latency proxy (tests/integration/test_stall_warnings.py).
"""

from __future__ import annotations

import gc
import math
import threading
import time
import warnings
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.formats import TokenSource
from headrace.io import ReadInFlight
from headrace.pipeline import Loader
from headrace.pipeline._stall import StallWatch, stall_message, worker_stall_message
from headrace.testing import batch_digest


@pytest.fixture
def tokens(tmp_path: Path) -> str:
    path = tmp_path / "t.bin"
    np.random.default_rng(3).integers(0, 2**31, 1 << 18, dtype=np.uint32).tofile(path)
    return str(path)


class _Slow(TokenSource):
    def read(self, seed: int, samples: Any) -> dict[str, Any]:
        time.sleep(0.01)  # time for the watcher thread to look, on a loaded machine too
        return super().read(seed, samples)


def _run(
    path: str, prefetch: int, stall_warn_s: float | None, *, slow: bool = False
) -> tuple[str, list[str]]:
    """The digest of 40 steps and the headrace stall warnings said meanwhile."""
    src = (_Slow if slow else TokenSource)(path, dtype="uint32", context=64)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with Loader(
            src, batch_size=8, steps=40, prefetch=prefetch, stall_warn_s=stall_warn_s
        ) as loader:
            digest = batch_digest(loader)
    return digest, [str(w.message) for w in said if "headrace: " in str(w.message)]


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, "60", True])
def test_stall_warn_s_must_be_positive_seconds_or_none(tokens: str, bad: object) -> None:
    src = TokenSource(tokens, dtype="uint32", context=64)
    with pytest.raises(ConfigError, match=r"stall_warn_s must be .*\(got "):
        Loader(src, batch_size=8, stall_warn_s=bad)  # type: ignore[arg-type]
    assert Loader(src, batch_size=8, stall_warn_s=None).stall_warn_s is None
    assert Loader(src, batch_size=8, stall_warn_s=2).stall_warn_s == 2.0
    # NumPy numbers, as the loader's integer arguments take them (np.int64 was refused).
    assert Loader(src, batch_size=8, stall_warn_s=np.int64(3)).stall_warn_s == 3.0
    assert type(Loader(src, batch_size=8, stall_warn_s=np.float32(0.5)).stall_warn_s) is float
    assert Loader(src, batch_size=8).stall_warn_s == 60.0


@pytest.mark.parametrize("prefetch", [0, 8])
def test_a_fast_run_says_nothing(tokens: str, prefetch: int) -> None:
    _, said = _run(tokens, prefetch, 5.0)
    assert said == []


@pytest.mark.parametrize("prefetch", [0, 8])
def test_warning_at_every_wait_changes_no_bytes(tokens: str, prefetch: int) -> None:
    # A threshold of a microsecond warns at every wait for a batch (the sync loader
    # waits for every chunk it reads): the batches are the same as with none.
    # Reads of 10 ms: the warnings of a read that returns before the watcher thread
    # runs at all are not said (a loaded CI machine: none, once).
    quiet, none = _run(tokens, prefetch, None, slow=True)
    noisy, said = _run(tokens, prefetch, 1e-6, slow=True)
    assert noisy == quiet and none == []
    if prefetch == 0:
        assert any(s.startswith("headrace: no batch for ") for s in said), said
        assert any(s.startswith("headrace: the batch of step ") for s in said), said


def test_the_message_names_the_oldest_reads_and_counts_the_rest() -> None:
    reads = [ReadInFlight(f"/mnt/nfs/{i}.bin", i << 22, (i + 1) << 22, 58.0 - i) for i in range(5)]
    said = stall_message(60.2, 1234, reads)
    assert said == (
        "headrace: no batch for 60.2 s (step 1234): 5 reads in flight, the oldest for "
        "58.0 s: /mnt/nfs/0.bin [0, 4194304) (58.0 s), /mnt/nfs/1.bin [4194304, 8388608) "
        "(57.0 s), /mnt/nfs/2.bin [8388608, 12582912) (56.0 s), and 2 more; stalled "
        'storage? (docs/io.md, "Stalled storage")'
    )
    whole = ReadInFlight("s3://b/k", None, None, 3.0)
    assert "1 read in flight, the oldest for 3.0 s: s3://b/k (3.0 s);" in stall_message(
        4.0, 7, [whole]
    )
    assert "no read, open or listing of this process is in flight" in stall_message(4.0, 7, [])


def test_opens_stats_and_listings_are_counted_and_named_by_what_they_do() -> None:
    reads = [
        ReadInFlight("/mnt/nfs/a.bin", None, None, 9.0, "open"),
        ReadInFlight("/mnt/nfs/b.bin", 0, 4096, 8.0),
        ReadInFlight("/mnt/nfs/d", None, None, 7.0, "list"),
        ReadInFlight("/mnt/nfs/c.bin", 0, 4096, 6.0),
    ]
    assert stall_message(9.5, 3, reads) == (
        "headrace: no batch for 9.5 s (step 3): 1 open, 2 reads and 1 listing in flight, "
        "the oldest for 9.0 s: open /mnt/nfs/a.bin (9.0 s), /mnt/nfs/b.bin [0, 4096) (8.0 s), "
        'list /mnt/nfs/d (7.0 s), and 1 more; stalled storage? (docs/io.md, "Stalled storage")'
    )


def test_the_main_process_of_workers_names_the_worker_it_waits_for() -> None:
    assert worker_stall_message(61.0, 96, 1, 4, 4242) == (
        "headrace: no batch for 61.0 s (step 96): waiting for worker 1 of 4 (pid 4242), which "
        "reads it; the worker's own warnings on stderr name its reads in flight; stalled "
        'storage? (docs/io.md, "Stalled storage")'
    )


class _Polled(StallWatch):
    """A wait due at once, whose poll notes that the watcher thread polled it."""

    def __init__(self) -> None:
        super().__init__(0.001, lambda: 0)
        self.polled = threading.Event()

    def poll(self) -> None:
        self.end(arrived=False)  # due no more: polled once
        self.polled.set()


def test_the_watcher_thread_holds_no_wait_it_polled() -> None:
    # It held the last one in a loop variable while it slept: a loader dropped without
    # close() kept its source's files open (tests/pipeline/test_loader_unclosed.py failed
    # 6 runs in 20 at load 10). The wait's end takes the lock the thread polls under.
    watch = _Polled()
    with watch.watched():
        assert watch.polled.wait(30)
    gone = weakref.ref(watch)
    del watch
    gc.collect()
    assert gone() is None
