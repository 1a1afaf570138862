"""A process that forks while a loader reads ahead: the child can read the source.

Run in a fresh interpreter: the test process has JAX's and torch's threads, which
make fork() in it unsafe for reasons of their own.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

SCRIPT = textwrap.dedent(
    """
    import itertools, os, signal, sys, threading
    from headrace.errors import StateError
    from headrace.formats import TokenSource
    from headrace.pipeline import Loader
    from headrace.testing import batch_digest

    def make():
        return TokenSource(sys.argv[1], dtype="uint32", context=64, window_bytes=1 << 16,
                           block_bytes=4096)

    kw = dict(batch_size=8, seed=1, steps=6, chunk_steps=1)
    with Loader(make(), prefetch=0, **kw) as ref:
        want = [batch_digest([b]) for b in ref]
    real = TokenSource.read
    entered = threading.Semaphore(0)
    forked = threading.Event()
    calls = itertools.count()

    def slow(self, seed, samples):  # fault injection: storage that answers only after the fork
        entered.release()
        # Every read but the first waits for the fork: the fork lands inside one for sure,
        # and the reads after it do not wait (a sleep of 1 s each took 5 s of the test).
        if next(calls):
            forked.wait(30)
        return real(self, seed, samples)

    TokenSource.read = slow
    src = make()
    ld = Loader(src, prefetch=2, **kw)
    it = iter(ld)
    got = [batch_digest([next(it)])]
    # The read-ahead thread is inside the next read, holding the source's lock (waited
    # for, not slept on: a loaded machine may not have run the thread that far yet).
    assert entered.acquire(timeout=30) and entered.acquire(timeout=30), "no second read"
    pid = os.fork()
    if pid == 0:
        signal.alarm(30)  # a hang fails the test instead of stalling it
        TokenSource.read = real
        # Random access first: batch_at takes this process's lock too (it waited for
        # ever on the parent's, held by the parent's read-ahead thread at the fork).
        assert batch_digest([ld.batch_at(3)]) == want[3]
        try:
            next(it)
            print("CHILD old iterator did not refuse", flush=True)
            os._exit(1)
        except StateError as exc:
            assert "call iter(loader) again here" in str(exc), exc
        with Loader(src, prefetch=2, **kw) as fresh:  # a new loader over the same source
            assert [batch_digest([b]) for b in fresh] == want
        assert [batch_digest([b]) for b in ld] == want[1:]  # the old loader reads on
        print("CHILD OK", flush=True)
        os._exit(0)
    forked.set()
    _, status = os.waitpid(pid, 0)
    got += [batch_digest([b]) for b in it]
    assert got == want, "the parent's batches changed"
    print("PARENT OK", os.waitstatus_to_exitcode(status), flush=True)
    ld.close()
    """
)


def test_a_fork_during_read_ahead_leaves_the_child_a_working_source(tmp_path: Path) -> None:
    path = tmp_path / "t.bin"
    np.random.default_rng(0).integers(0, 2**31, 200_000, dtype=np.uint32).tofile(path)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "CHILD OK" in out.stdout, out.stdout + out.stderr
    assert "PARENT OK 0" in out.stdout, out.stdout + out.stderr


EXIT_SCRIPT = textwrap.dedent(
    """
    import itertools, os, signal, sys, threading
    from headrace.formats import TokenSource
    from headrace.pipeline import Loader

    real = TokenSource.read
    entered, forked = threading.Event(), threading.Event()
    calls = itertools.count()

    def held(self, seed, samples):  # fault injection: reads after the first last past the fork
        if next(calls):
            entered.set()
            forked.wait(30)
        return real(self, seed, samples)

    TokenSource.read = held
    ld = Loader(TokenSource(sys.argv[1], dtype="uint32", context=64), batch_size=8)
    it = iter(ld)
    next(it)  # the read-ahead thread goes on into the next read, holding the lock
    assert entered.wait(30), "no second read"
    for how in ("close", "exit"):
        pid = os.fork()
        if pid == 0:
            signal.alarm(10)  # a hang fails the test instead of stalling it
            if how == "close":
                ld.close()
                os._exit(0)
            sys.exit(0)  # the exit handler closes the loader
        _, status = os.waitpid(pid, 0)
        print(how, os.waitstatus_to_exitcode(status), flush=True)
    forked.set()
    assert next(it)["x"].shape == (8, 64)
    ld.close()
    print("PARENT OK", flush=True)
    """
)


def test_a_child_forked_during_a_read_closes_and_exits_without_the_parents_lock(
    tmp_path: Path,
) -> None:
    # close(), and the exit handler that calls it, waited for ever in the child on the
    # source's lock, held at the fork by the parent's read-ahead thread: a child of
    # os.fork() that ended normally never exited.
    path = tmp_path / "t.bin"
    np.arange(20_000, dtype=np.uint32).tofile(path)
    out = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "close 0\nexit 0\nPARENT OK" in out.stdout, out.stdout + out.stderr
