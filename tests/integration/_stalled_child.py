"""A training run in a child process whose storage the test stalls, then ends: the
script, its start (it prints "ready" at step 3 and waits for a line on stdin), and the
timing of its exit."""

from __future__ import annotations

import contextlib
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from headrace.emulate import LatencyProxy

_HEAD = """
import atexit, json, signal, sys, time
atexit.register(print, "exiting", flush=True)  # the last exit handler: all joins are done
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (not inherited)
from headrace.formats import FileSource, TokenSource
from headrace.pipeline import Loader
how = sys.argv[1]
"""

_LOOP = """
with Loader(src, batch_size=8, chunk_steps=4) as ld:
    for i, batch in enumerate(ld):
        if i == 3:
            print("ready", flush=True)
            sys.stdin.readline()  # the storage is stalled now
        if i > 3:
            time.sleep(0.05)  # the training step: behind the read-ahead until it stalls
        if i > 3 and how == "error":
            time.sleep(1.0)  # the read-ahead waits on a stalled read by now
            raise SystemExit(3)  # the training step fails
"""


def write_script(path: Path, source: str) -> Path:
    """A training script at ``path``: ``python path HOW ARGS...`` makes ``src`` by the
    lines ``source`` (which read ``sys.argv[2:]``) and runs its loop; "error" as HOW
    makes a training step after the stall raise ``SystemExit(3)``."""
    path.write_text(_HEAD + source + _LOOP)
    return path


@contextlib.contextmanager
def ready_child(argv: list[str]) -> Iterator[subprocess.Popen[str]]:
    """``argv`` started with text pipes, once it has printed "ready" (its stderr, if it
    ends first); killed on the way out."""
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as p:
        try:
            assert p.stdout is not None and p.stdin is not None and p.stderr is not None
            assert p.stdout.readline() == "ready\n", p.stderr.read()
            yield p
        finally:
            p.kill()


def go_on(p: subprocess.Popen[str]) -> None:
    """The line the child waits for at step 3."""
    assert p.stdin is not None
    p.stdin.write("go\n")
    p.stdin.flush()


def wait_for_stalled_get(proxy: LatencyProxy) -> None:
    """Until a GET has reached the stalling proxy (a bound on hanging: 30 s), and half a
    second more: the run waits on a stalled read by now."""
    deadline = time.monotonic() + 30
    while proxy.stats.faults == 0:
        assert time.monotonic() < deadline, "no GET reached the stalling proxy"
        time.sleep(0.01)
    time.sleep(0.5)


def timed_exit(p: subprocess.Popen[str], sig: int | None) -> float:
    """Send ``sig`` (``None``: none, the child ends on its own) and return the seconds
    until its last exit handler printed "exiting" (60 s at most)."""
    assert p.stdout is not None
    t0 = time.monotonic()
    if sig is not None:
        p.send_signal(sig)
    ready, _, _ = select.select([p.stdout], [], [], 60)
    took = time.monotonic() - t0
    assert ready and p.stdout.readline() == "exiting\n", took
    return took
