"""Fork safety: a loader iterated before torch's DataLoader forks its workers, and
os.fork() in user code while a loader's I/O is running.

PYTHONPATH=src python audit/fork_probe.py CASE     (CASE below; 'all' runs each with a timeout)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(tempfile.gettempdir()) / "hr-fork-probe"


def data() -> None:
    ROOT.mkdir(exist_ok=True)
    if not (ROOT / "t.bin").exists():
        rng = np.random.default_rng(0)
        rng.integers(0, 1000, 1 << 22, dtype=np.uint16).tofile(ROOT / "t.bin")  # 8 MiB
        np.save(ROOT / "rows.npy", rng.integers(1, 1000, (16384, 65), dtype=np.int32))


def token_source(**kw):
    from headrace.formats import TokenSource

    return TokenSource(ROOT / "t.bin", dtype="uint16", context=64, window_bytes=1 << 20,
                       block_bytes=64 << 10, **kw)


def rows_source():
    from headrace.formats import PaddedRows

    return PaddedRows(ROOT / "rows.npy", context=64, reader="pread")


def torch_fork(make, close_first: bool) -> None:
    from torch.utils.data import DataLoader

    from headrace.pipeline import Loader
    from headrace.torch import TorchDataset

    src = make()
    ld = Loader(src, batch_size=32, prefetch=8)
    it = iter(ld)
    for _ in range(5):
        next(it)  # the read-ahead thread is mid-read now, or about to be
    if close_first:
        del it
        ld.close()
    ds = TorchDataset(src, batch_size=32, steps=40)
    dl = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork",
                    timeout=30)
    n = sum(1 for _ in dl)
    print(f"OK: {n} batches through forked workers")


def os_fork(make) -> None:
    """Fork while the parent's loader runs; the child reads with the same source and a new one."""
    from headrace.pipeline import Loader
    from headrace.testing import batch_digest

    src = make()
    ld = Loader(src, batch_size=32, prefetch=8)
    it = iter(ld)
    next(it)
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            next(it)

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.05)
    pid = os.fork()
    if pid == 0:  # child
        import signal

        signal.alarm(20)  # a hung child ends itself (SIGALRM), so the probe leaves nothing
        try:
            with Loader(make(), batch_size=32, seed=1, steps=20) as fresh:
                a = batch_digest(fresh)
            with Loader(src, batch_size=32, seed=1, steps=20, prefetch=0) as same:
                b = batch_digest(same)
            os.write(1, f"child: fresh source ok, inherited source ok, same={a == b}\n".encode())
            os._exit(0 if a == b else 3)
        except BaseException as exc:  # noqa: BLE001
            os.write(1, f"child: {type(exc).__name__}: {exc}\n".encode())
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    stop.set()
    t.join()
    ld.close()
    code = os.waitstatus_to_exitcode(status)
    verdict = "OK" if code == 0 else "CHILD HUNG (killed by its 20 s alarm)" if code == -14 else "FAIL"
    print(f"{verdict}: child exit status {code}; parent closed fine")


CASES = {
    "torch-fork-tokens-open": lambda: torch_fork(token_source, False),
    "torch-fork-tokens-closed": lambda: torch_fork(token_source, True),
    "torch-fork-tokens-pread-open": lambda: torch_fork(lambda: token_source(reads="pread"), False),
    "torch-fork-rows-open": lambda: torch_fork(rows_source, False),
    "torch-fork-rows-closed": lambda: torch_fork(rows_source, True),
    "os-fork-tokens": lambda: os_fork(token_source),
    "os-fork-rows": lambda: os_fork(rows_source),
}


def main() -> None:
    data()
    if sys.argv[1] != "all":
        CASES[sys.argv[1]]()
        return
    for case in CASES:
        t0 = time.monotonic()
        try:
            p = subprocess.run([sys.executable, __file__, case], capture_output=True, text=True,
                               timeout=90)
            tail = (p.stdout.strip().splitlines() or p.stderr.strip().splitlines() or ["?"])[-1]
            print(f"{case}: rc={p.returncode} {tail[:300]} [{time.monotonic() - t0:.1f}s]")
        except subprocess.TimeoutExpired:
            print(f"{case}: HUNG (killed after 90 s)")


if __name__ == "__main__":
    main()
