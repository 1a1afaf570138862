"""EIO on a byte range of a real file (FUSE), for every local read path.

PYTHONPATH=src python audit/eio_probe.py CASE      (one case per process: a SIGBUS kills it)
PYTHONPATH=src python audit/eio_probe.py all       (runs each case in a subprocess, summarises)
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

sys.path.insert(0, str(Path(__file__).parent))
from faultfs import FaultMount  # noqa: E402

TOKENS = 1 << 20  # uint16 tokens: 2 MiB
BAD = (1 << 20, (1 << 20) + 4096)  # one page in the middle of the file


def data(root: Path) -> None:
    rng = np.random.default_rng(0)
    rng.integers(0, 50_000, TOKENS, dtype=np.uint16).tofile(root / "t.bin")
    np.save(root / "rows.npy", rng.integers(1, 1000, (8192, 64), dtype=np.int32))  # 2 MiB
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = [rng.integers(0, 1000, 30, dtype=np.int32) for _ in range(40_000)]
    pq.write_table(
        pa.table({"input_ids": pa.array(ids, type=pa.list_(pa.int32()))}),
        root / "t.parquet", row_group_size=2000, compression="none",
    )
    (root / "npy").mkdir()
    for i in range(8):
        np.save(root / "npy" / f"s{i}.npy", rng.integers(0, 255, (2, 256, 1024), dtype=np.uint8))


def run_case(case: str) -> None:
    import faulthandler

    # A hang is a finding too: dump every thread's stack, then exit (the mount is
    # still unmounted by FaultMount's finally in the parent? no: by the exit path below).
    faulthandler.dump_traceback_later(20, exit=False)
    from headrace.formats import PaddedRows, TokenSource
    from headrace.pipeline import Loader

    src_dir = Path(tempfile.mkdtemp(prefix="eio-src-"))
    mnt = Path(tempfile.mkdtemp(prefix="eio-mnt-"))
    data(src_dir)
    bad = [f"t.bin:{BAD[0]}:{BAD[1]}", f"rows.npy:{BAD[0]}:{BAD[1]}",
           f"t.parquet:{BAD[0]}:{BAD[1]}", "npy/s5.npy:200000:204096"]
    with FaultMount(src_dir, mnt, bad):
        threads = threading.active_count()
        kind, _, opt = case.partition(":")
        if kind == "tokens":
            source = TokenSource(
                mnt / "t.bin", dtype="uint16", context=64, reads=opt, shuffle=False,
                window_bytes=4 << 20, block_bytes=64 << 10,
            )
        elif kind == "table":
            from headrace.formats import TableSource

            source = TableSource(mnt / "t.parquet", columns=["input_ids"], width=30, shuffle=False)
        elif kind == "files":
            from headrace.formats import FileSource

            source = FileSource(mnt / "npy", format="npy", samples_per_file=2, shuffle="none")
        else:
            source = PaddedRows(mnt / "rows.npy", context=63, reader=opt, shuffle=False)
        ld = Loader(source, batch_size=64, prefetch=2)
        t0 = time.monotonic()
        try:
            n = 0
            for _ in ld:
                n += 1
                if n > 2000:
                    break
            print(f"RESULT {case}: NO ERROR after {n} batches")
        except BaseException as exc:  # noqa: BLE001
            print(f"RESULT {case}: {type(exc).__name__}: {exc}  [{time.monotonic() - t0:.2f}s]")
        t1 = time.monotonic()
        ld.close()
        print(f"  close took {time.monotonic() - t1:.2f}s; prefetch threads left: "
              f"{sum(t.name == 'headrace-prefetch' for t in threading.enumerate())}")


def main() -> None:
    cases = [
        "tokens:populate", "tokens:pread",
        "rows:mmap", "rows:pread", "rows:adaptive", "rows:odirect", "table:", "files:",
    ]
    if sys.argv[1] != "all":
        run_case(sys.argv[1])
        return
    for case in cases:
        p = subprocess.run(
            [sys.executable, __file__, case], capture_output=True, text=True, timeout=120
        )
        for ln in p.stdout.splitlines():  # a case killed by SIGBUS leaves its mount
            if ln.startswith("MOUNT "):
                _, mnt, pid = ln.split()
                if mnt in Path("/proc/self/mounts").read_text():
                    subprocess.run(["fusermount3", "-u", "-z", mnt], check=False)
                try:
                    os.kill(int(pid), 15)
                except ProcessLookupError:
                    pass
        out = [ln for ln in p.stdout.splitlines() if ln.startswith(("RESULT", "  close"))]
        print("\n".join(out) or f"RESULT {case}: (no output)")
        if p.returncode:
            print(f"  exit code {p.returncode} ({'SIGBUS' if p.returncode == -7 else ''})"
                  f" stderr tail: {p.stderr.strip().splitlines()[-1:] }")


if __name__ == "__main__":
    main()
