"""A loader dropped without ``close()`` lets go of its files and threads at once, by
reference counting, not when the cyclic collector next runs.

Long runs turn the collector off (torchtitan's and Megatron's ``gc.disable()``, with a
collection of the young generations every N steps) and make a fresh loader for each
evaluation, or a notebook makes one per cell: a loader, or a ``FileSource``, held in a
reference cycle kept its source's descriptors and read threads until a full collection,
2 descriptors a token loader and 18 threads a ``FileSource`` loader, without bound
under ``gc.disable()`` (901 threads after 50 loaders, 2026-12-07).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

_CYCLES = """
import gc, json, sys, threading, time
import numpy as np
sys.path.insert(0, {tests!r})
from _fds import fds_in
from headrace.formats import FileSource, TokenSource
from headrace.pipeline import Loader

root = {root!r}
rng = np.random.default_rng(0)
rng.integers(0, 1000, 1 << 16, dtype=np.uint16).tofile(root + "/t.bin")
for i in range(32):
    np.save(f"{{root}}/f{{i:02d}}.npy", rng.standard_normal(16).astype(np.float32))
make = {{
    "tokens": lambda: TokenSource(root + "/t.bin", dtype="uint16", context=16),
    "npy": lambda: FileSource(root, format="npy"),
}}[{kind!r}]

def cycle():
    loader = Loader(make(), batch_size=4, prefetch={prefetch})
    for n, _ in enumerate(loader):
        if n == 1:
            break

def shared(thread):
    return thread.name.startswith(("headrace-io_", "headrace-deep_", "headrace-cache_"))

cycle()  # the process-wide pools start their threads on first use
gc.collect()
gc.disable()  # as a training loop that collects by itself (or never)
old = {{t.ident for t in threading.enumerate()}}
for _ in range({cycles}):
    cycle()
# Threads of a dropped pool end once told; read-ahead on the shared pool may hold a file
# a moment: wait for those (a bound on hanging, not a speed check: a loader kept alive
# by a cycle keeps both for ever here).
deadline = time.monotonic() + 30
while True:
    # (the process-wide pools' threads, started on demand up to their size, are no one's)
    threads = [t for t in threading.enumerate() if t.ident not in old and not shared(t)]
    fds = fds_in(root)
    if (not threads and not fds) or time.monotonic() > deadline:
        break
    time.sleep(0.05)
print(json.dumps({{"fds": fds, "threads": sorted(t.name for t in threads)}}))
"""


@pytest.mark.parametrize(
    ("kind", "prefetch"), [("tokens", 0), ("tokens", 8), ("npy", 0), ("npy", 8)]
)
def test_dropped_loader_frees_files_and_threads_without_the_collector(
    tmp_path: Path, kind: str, prefetch: int
) -> None:
    cycles = 20
    tests = str(Path(__file__).parent.parent)
    script = _CYCLES.format(
        tests=tests, root=str(tmp_path), kind=kind, prefetch=prefetch, cycles=cycles
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    left = json.loads(done.stdout.strip().splitlines()[-1])
    # Leaking, each of the 20 dropped loaders held 2 descriptors (tokens) or 18 threads
    # (npy) until a collection that never came.
    assert left == {"fds": 0, "threads": []}, left


_S3_CYCLES = """
import gc, json, os, sys, threading, time
import numpy as np
from headrace.emulate import LocalS3
from headrace.formats import TokenSource
from headrace.pipeline import Loader

def sockets():
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{{fd}}").startswith("socket:")
        except OSError:
            pass
    return n

with LocalS3() as server:
    server.create_bucket("dropped")
    tokens = np.random.default_rng(0).integers(0, 1000, 1 << 16, dtype=np.uint16)
    server.info.boto3_client().put_object(Bucket="dropped", Key="t.bin", Body=tokens.tobytes())
    options = server.info.store_options()

    def cycle(prefetch):
        # A raw .bin: its .json sidecar and Megatron .idx are looked for and not found.
        source = TokenSource(
            "s3://dropped/t.bin", dtype="uint16", context=16, store_options=options
        )
        for n, _ in enumerate(Loader(source, batch_size=4, prefetch=prefetch)):
            if n == 1:
                break

    left = {{}}
    for prefetch in (0, 8):  # one server for both (a moto server costs seconds to start)
        cycle(prefetch)
        gc.collect()
        gc.disable()
        before, old = sockets(), {{t.ident for t in threading.enumerate()}}
        for _ in range({cycles}):
            cycle(prefetch)
        deadline = time.monotonic() + 30  # (a bound on hanging: a leaked store never goes)
        while True:
            threads = [t.name for t in threading.enumerate() if t.ident not in old]
            grown = sockets() - before
            if (grown <= 0 and not threads) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        gc.enable()
        left[prefetch] = {{"sockets": max(0, grown), "threads": sorted(threads)}}
    print(json.dumps(left))
"""


def test_dropped_s3_token_loader_closes_its_connections_without_the_collector() -> None:
    # A missing sidecar's ObjectNotFoundError held the frame that raised it, which held
    # the error: a cycle through the store, so each dropped loader kept its connections
    # (3 sockets) and a thread until a full collection. Sync and read-ahead loaders.
    pytest.importorskip("moto")
    script = _S3_CYCLES.format(cycles=10)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    left = json.loads(done.stdout.strip().splitlines()[-1])
    clean = {"sockets": 0, "threads": []}
    assert left == {"0": clean, "8": clean}, left
