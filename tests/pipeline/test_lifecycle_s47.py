"""Loader and worker-ring lifecycles: forks, closes and failures at a given step."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _fds import fds_in
from headrace._shm_ring import RingConfig, WorkerBatches
from headrace.errors import StateError, StorageError
from headrace.formats import TokenSource
from headrace.pipeline import Loader
from headrace.pipeline._stall import StallWatch, _Watcher
from headrace.testing import batch_digest

RING_FORK = textwrap.dedent(
    """
    import os, signal, sys
    from headrace._shm_ring import RingConfig, WorkerBatches
    from headrace.errors import StateError
    from headrace.formats import TokenSource
    from headrace.pipeline import Loader
    from headrace.testing import batch_digest

    src = TokenSource(sys.argv[1], dtype="uint16", context=16)
    opts = dict(batch_size=4, seed=3, steps=12, prefetch=0, chunk_steps=1)
    with Loader(src, **opts) as ld:
        want = [batch_digest([b]) for b in ld]
    wb = WorkerBatches(RingConfig(source=src, loader=opts, workers=2, slots=2))
    it = iter(wb)
    got = [batch_digest([next(it)]) for _ in range(3)]
    pid = os.fork()
    if pid == 0:
        signal.alarm(30)  # a hang fails the test instead of stalling it
        try:
            next(it)
            print("CHILD took a batch of the parent's workers", flush=True)
            os._exit(1)
        except StateError as exc:
            assert "forked" in str(exc), exc
        wb.close()  # the parent's workers are the parent's: left running
        print("CHILD OK", flush=True)
        sys.exit(0)  # and so are they at its exit (multiprocessing's exit handler too)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status), flush=True)
    got += [batch_digest([b]) for b in it]
    assert got == want, "the parent's batches changed"
    print("PARENT OK", flush=True)
    """
)


def test_a_forked_child_neither_reads_nor_stops_the_parents_ring_workers(
    tmp_path: Path,
) -> None:
    # The child's next() read the parent's pipes, taking a batch meant for the parent
    # (which then failed: "worker 1 sent step 7, expected step 3"), and its close(), or
    # its exit, terminated them ("AssertionError: can only join a child process"; the
    # parent's next batch: "worker 0 was killed by signal 15 (SIGTERM)").
    path = tmp_path / "t.bin"
    np.random.default_rng(0).integers(0, 1000, 1 << 15, dtype=np.uint16).tofile(path)
    out = subprocess.run(
        [sys.executable, "-c", RING_FORK, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "CHILD OK\nchild 0\nPARENT OK" in out.stdout, out.stdout + out.stderr


class _AheadRefuses(TokenSource):
    """Fault injection: storage that fails for ``bad`` (one sample), in the read-ahead
    started for it and, with ``read_too``, in its read."""

    def __init__(self, path: Path, bad: int, *, read_too: bool) -> None:
        super().__init__(path, dtype="uint16", context=16)
        self.bad, self.read_too = bad, read_too

    def prefetch(self, seed: int, samples: Any, share: Any = (0.0, 1.0)) -> None:
        if self.bad in samples:
            raise StorageError(f"sample {self.bad}: no such block (read-ahead)")
        super().prefetch(seed, samples, share)

    def read(self, seed: int, samples: Any) -> Any:
        if self.read_too and self.bad in samples:
            raise StorageError(f"sample {self.bad}: no such block")
        return super().read(seed, samples)


@pytest.mark.parametrize("prefetch", [0, 8])
@pytest.mark.parametrize("read_too", [True, False])
def test_a_failed_read_ahead_surfaces_at_the_chunk_it_was_for(
    tmp_path: Path, prefetch: int, read_too: bool
) -> None:
    # The read-ahead of the next chunk (source.prefetch) failed the chunk being handed
    # out: with step 40 bad, the run stopped at step 15, its 25 readable steps lost.
    path = tmp_path / "t.bin"
    np.random.default_rng(0).integers(0, 1000, 1 << 16, dtype=np.uint16).tofile(path)
    b, bad_step = 4, 40
    # Chunks of 1, 2, 4, 8, 16, 32 steps: step 40 lies in the chunk of steps 31-62. A
    # read that fails too is found a step at a time; a read-ahead alone, at its chunk.
    at = bad_step if read_too else 31
    src = _AheadRefuses(path, bad_step * b + 1, read_too=read_too)
    with Loader(src, batch_size=b, prefetch=prefetch) as ld:
        got = 0
        with pytest.raises(StorageError, match="no such block") as info:
            for _ in ld:
                got += 1
        assert (got, ld.step) == (at, at)
        assert info.value.__notes__ == [f"while reading step {at} (rank 0)"]
        assert ("read-ahead" in str(info.value)) is not read_too


class Records:
    """Rows of a structured dtype (named fields), as a transform may build them, beside
    plain ones (module level: worker processes import it by name)."""

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": "records-test"}

    def read(self, seed: int, samples: Any) -> dict[str, Any]:
        s = np.asarray(samples, dtype=np.int64)
        rec = np.zeros(len(s), dtype=[("id", "<i4"), ("w", "<f8")])
        rec["id"], rec["w"] = s, s / 4
        return {"rec": rec, "v": s[:, None] * 3}


def test_fields_of_a_structured_dtype_cross_from_workers_as_they_were_read() -> None:
    # A slot keeps each region's dtype by its string, which drops a structured dtype's
    # fields ("|V12"): the worker failed copying into its slot ("TypeError: Cannot cast
    # array data from dtype([('id', '<i4'), ('w', '<f8')]) to dtype('V12')").
    opts = {"batch_size": 4, "seed": 1, "steps": 6, "prefetch": 0}
    with Loader(Records(), **opts) as ld:  # type: ignore[arg-type]
        want = list(ld)
    wb = WorkerBatches(RingConfig(source=Records(), loader=opts, workers=1, slots=2))
    got = list(wb)
    assert [b["rec"].dtype for b in got] == [w["rec"].dtype for w in want]
    assert batch_digest(got) == batch_digest(want)
    assert all(b["rec"].flags.writeable for b in got)
    assert wb.shm_names and wb.pickled_chunks == 0  # in the slots, not pickled


@pytest.mark.parametrize("prefetch", [0, 8])
@pytest.mark.parametrize("how", ["load_state_dict", "close", "iter"])
def test_an_iterator_past_its_last_batch_is_stale_after_the_state_changes(
    tmp_path: Path, prefetch: int, how: str
) -> None:
    # A loop rolled back (load_state_dict) after its last batch ended without a word
    # without read-ahead (StopIteration: the steps from the loaded state were never
    # read), where read-ahead's iterator said it was stale.
    path = tmp_path / "t.bin"
    np.random.default_rng(0).integers(0, 1000, 1 << 12, dtype=np.uint16).tofile(path)
    src = TokenSource(path, dtype="uint16", context=16)
    with Loader(src, batch_size=4, steps=3, prefetch=prefetch) as ld:
        it = iter(ld)
        for _ in range(3):
            next(it)
        if how == "load_state_dict":
            ld.load_state_dict({**ld.state_dict(), "step": 1})
        elif how == "close":
            ld.close()
        else:
            with pytest.warns(RuntimeWarning, match="yields nothing"):
                iter(ld)
        with pytest.raises(StateError, match="this iterator is stale"):
            next(it)


@pytest.mark.parametrize("prefetch", [0, 8])
def test_an_iterator_begun_before_close_reopens_no_file(tmp_path: Path, prefetch: int) -> None:
    # Its first next() told the closed source its share (host_order="address") before
    # it found itself stale: the source opened its file again, for good.
    path = tmp_path / "t.bin"
    np.random.default_rng(0).integers(0, 1000, 1 << 12, dtype=np.uint16).tofile(path)
    src = TokenSource(path, dtype="uint16", context=16)
    ld = Loader(src, batch_size=4, rank=0, world_size=2, host_order="address", prefetch=prefetch)
    it = iter(ld)
    ld.close()
    with pytest.raises(StateError, match="the loader is closed"):
        next(it)
    assert fds_in(tmp_path) == 0


class StuckFrom:
    """Fault injection: reads of step 2 on never return (a hung mount), in a worker."""

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": "stuck-test"}

    def read(self, seed: int, samples: Any) -> dict[str, Any]:
        s = np.asarray(samples, dtype=np.int64)
        if (s >= 2 * 4).any():
            threading.Event().wait()  # the worker is ended by its lifeline, not by this
        return {"v": s[:, None] * 3}


@pytest.mark.parametrize("stall_warn_s", [None, 60.0])
def test_a_ring_closed_from_another_thread_while_its_consumer_waits_says_so(
    stall_warn_s: float | None,
) -> None:
    # A watchdog's close() while the consumer waited for a stuck worker: the consumer
    # got "IndexError: list index out of range" (the worker's pipe at EOF, its process
    # already forgotten) or "OSError: handle is closed".
    opts = {"batch_size": 4, "steps": 8, "prefetch": 0, "chunk_steps": 1}
    opts["stall_warn_s"] = stall_warn_s
    wb = WorkerBatches(RingConfig(source=StuckFrom(), loader=opts, workers=1, slots=2))
    it = iter(wb)
    next(it)
    next(it)
    closing = threading.Timer(0.2, wb.close)  # may come before the wait too: stale then
    closing.start()
    try:
        with pytest.raises(StateError, match="this iteration"):
            next(it)
    finally:
        closing.join()
    assert wb._procs == []


def test_a_wait_longer_than_a_lock_can_wait_leaves_the_watcher_warning_for_others() -> None:
    # stall_warn_s=1e12 ("never, in practice"): the process's one watcher thread asked a
    # lock to wait that long and died ("OverflowError: timestamp out of range for
    # platform time_t"), and no loader of the process was warned of a stall again.
    watcher = _Watcher()  # not the process's: that one may sleep until another's wait
    far = StallWatch(1e12, lambda: 1, say=lambda waited, step: f"far {step}")
    soon = StallWatch(0.05, lambda: 2, say=lambda waited, step: f"soon {step}")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        far.begin()
        watcher.add(far)
        deadline = time.monotonic() + 10  # a bound on hanging, not a speed check
        while watcher._wakes_at == math.inf and time.monotonic() < deadline:
            time.sleep(0.01)  # until the thread has taken the far wait as its next
        assert watcher._thread is not None
        watcher._thread.join(0.2)  # it died of it at once; else it sleeps on
        soon.begin()
        watcher.add(soon)
        while not said and time.monotonic() < deadline:
            time.sleep(0.01)
        watcher.discard(soon)
        watcher.discard(far)
    assert [str(w.message) for w in said][:1] == ["soon 2"]


def test_ring_workers_take_a_stall_warning_that_never_comes() -> None:
    # The main process polled each worker's pipe for stall_warn_s: 1e12 s overflowed
    # there ("OverflowError: timestamp too large to convert to C _PyTime_t").
    opts = {"batch_size": 4, "seed": 1, "steps": 2, "prefetch": 0, "stall_warn_s": 1e12}
    with Loader(Records(), **opts) as ld:  # type: ignore[arg-type]
        want = list(ld)
    wb = WorkerBatches(RingConfig(source=Records(), loader=opts, workers=1, slots=2))
    assert batch_digest(list(wb)) == batch_digest(want)


def test_len_of_more_steps_than_len_can_return_says_so(tmp_path: Path) -> None:
    # len() of steps=2**70 was Python's bare "cannot fit 'int' into an index-sized integer".
    path = tmp_path / "t.bin"
    np.arange(4096, dtype=np.uint16).tofile(path)
    src = TokenSource(path, context=8, dtype="uint16")
    with Loader(src, batch_size=1, seed=0, steps=2**70) as ld:
        with pytest.raises(OverflowError, match=r"len\(\): 1,180,591,620,717,411,303,424 steps"):
            len(ld)
        assert ld.steps == 2**70
