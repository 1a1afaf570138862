"""Ctrl-C and SIGTERM at random moments of a training loop: reading, or waiting on a
stuck read.

    python benchmarks/interrupt_stress.py [--runs 40] [--cases busy0,tokens0] [--ways int,term]

Each run is a child process reading a 16 MiB token file through ``Loader`` (with
``prefetch=0`` the main thread waits on the I/O pool's futures; with ``prefetch=4``
on the read-ahead's queue), over and over. Cases: ``tokens0``/``tokens4``, after a
few blocks every block read gets stuck (fault injected: it waits on an event);
``busy0``/``busy4``, every block read takes 1 ms more and none sticks, so the signal
lands wherever the loop is. Once the child says it is there, the parent waits
0.2-0.8 s (random) and sends the signal. The ways, and what each run must do:

- ``int``: SIGINT, default handler: end by SIGINT with a ``KeyboardInterrupt`` traceback;
- ``term``: SIGTERM to a handler raising ``SystemExit(143)``: exit 143;
- ``jupyter``: SIGINT caught around the loop, as a notebook cell is: un-stick the reads,
  iterate the same loader again, then a new loader over the same source: exit 0.

``--runs`` runs of each (case, way) go in two parallel loops while one CPU burner
runs (the load that found the read-ahead's bug). Prints, per (case, way), the
number of runs that did wrong and how: ``hung`` (20 s after the signal; with
``STRESS_STACKS=FILE`` every thread's stack is appended there), ``rc=N`` and the
last line of stderr.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CHILD = """
import faulthandler, signal, sys, threading, time
import numpy as np
from headrace.formats import TokenSource, _token_window
from headrace.pipeline import Loader

WAY, PATH, PREFETCH, STALL = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
faulthandler.register(signal.SIGUSR1, all_threads=True)
signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job ignores it
if WAY == "term":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
release, said, fills = threading.Event(), threading.Lock(), [0]
real = _token_window.TokenWindow._fill

def fill(self, block):
    fills[0] += 1
    if STALL == "busy":
        time.sleep(0.001)
        if fills[0] > 2 and said.acquire(blocking=False):
            print("ready", flush=True)
    elif fills[0] > 2 and not release.is_set():
        if said.acquire(blocking=False):
            print("ready", flush=True)
        release.wait()
    return real(self, block)

_token_window.TokenWindow._fill = fill
src = TokenSource(PATH, dtype="uint16", context=64, window_bytes=1 << 20,
                  block_bytes=1 << 16, reads="pread")
make = lambda: Loader(src, batch_size=4, prefetch=PREFETCH, chunk_steps=1, seed=1)
if WAY != "jupyter":
    with make() as ld:
        for epoch in range(10**6):
            for batch in ld:
                pass
else:
    ld = make()
    try:
        for epoch in range(10**6):
            for batch in ld:
                pass
    except KeyboardInterrupt:
        pass
    release.set()
    for _, batch in zip(range(20), ld):
        pass
    ld.close()
    with make() as ld2:
        for _, batch in zip(range(20), ld2):
            pass
    print("ok", flush=True)
"""

CASES = {
    "tokens0": (0, "stuck"),
    "tokens4": (4, "stuck"),
    "busy0": (0, "busy"),
    "busy4": (4, "busy"),
}
SIGNALS = {"int": signal.SIGINT, "term": signal.SIGTERM, "jupyter": signal.SIGINT}


def one(way: str, path: str, prefetch: int, stall: str, seed: int) -> str:
    """``ok`` or what went wrong."""
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, way, path, str(prefetch), stall],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        if proc.stdout.readline() != "ready\n":
            return "never ready: " + proc.communicate(timeout=30)[1][-300:]
        time.sleep(random.Random(seed).uniform(0.2, 0.8))
        proc.send_signal(SIGNALS[way])
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # every thread's stack, on stderr
            time.sleep(1)
            proc.kill()
            _, err = proc.communicate()
            if os.environ.get("STRESS_STACKS"):
                with open(os.environ["STRESS_STACKS"], "a") as f:
                    f.write(f"=== {way} {prefetch} {stall} {seed}\n{err[-6000:]}\n")
            return "hung"
        last = (err.strip().splitlines() or [""])[-1]
        rc = proc.returncode
        if way == "int" and rc == -signal.SIGINT and last == "KeyboardInterrupt":
            return "ok"
        if way == "term" and rc == 143:
            return "ok"
        if way == "jupyter" and rc == 0 and out.strip() == "ok":
            return "ok"
        return f"rc={rc} {last[:120]}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--ways", default=",".join(SIGNALS))
    args = ap.parse_args()
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "t.bin")
            import numpy as np

            np.arange(1 << 23, dtype=np.uint16).tofile(path)
            for case in args.cases.split(","):
                for way in args.ways.split(","):
                    with ThreadPoolExecutor(2) as pool:
                        got = list(
                            pool.map(
                                lambda i, w=way, c=case: one(w, path, *CASES[c], i),
                                range(args.runs),
                            )
                        )
                    bad = collections.Counter(g for g in got if g != "ok")
                    print(f"{case} {way}: {sum(bad.values())} of {len(got)} wrong {dict(bad)}")
    finally:
        burner.kill()
        burner.wait()


if __name__ == "__main__":
    main()
