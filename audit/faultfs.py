"""A read-only FUSE passthrough that answers EIO for READs overlapping bad byte ranges.

python audit/faultfs.py SRC MNT --bad NAME:LO:HI [--bad ...]   (serves until SIGINT/SIGTERM)

Built on headrace.emulate's slowfs operations (no latency): the kernel sees a real EIO
from the filesystem, as from a bad sector or a failing network mount, for pread,
mmap page faults and MADV_POPULATE_READ alike.
"""

from __future__ import annotations

import argparse
import errno
import os
import subprocess
import sys
import time
from pathlib import Path

from headrace.emulate._slowfs import SlowPassthrough
from headrace.emulate._slowfs_config import SlowFSConfig
from headrace.emulate._slowfs_stats import SlowFSStats


class FaultPassthrough(SlowPassthrough):
    def __init__(self, root: str, bad: dict[str, list[tuple[int, int]]]) -> None:
        cfg = SlowFSConfig()
        super().__init__(root, cfg, SlowFSStats(None, interval_s=1.0, header={}))
        self.bad = bad

    def read(self, path, size, offset, fh):
        for lo, hi in self.bad.get(path.lstrip("/"), []):
            if offset < hi and offset + size > lo:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
        return super().read(path, size, offset, fh)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("mnt")
    ap.add_argument("--bad", action="append", default=[])
    a = ap.parse_args()
    bad: dict[str, list[tuple[int, int]]] = {}
    for spec in a.bad:
        name, lo, hi = spec.rsplit(":", 2)
        bad.setdefault(name, []).append((int(lo), int(hi)))
    import mfusepy

    ops = FaultPassthrough(os.path.abspath(a.src), bad)
    try:
        mfusepy.FUSE(ops, a.mnt, foreground=True, ro=True, fsname="faultfs", max_threads=16)
    except RuntimeError:
        pass


class FaultMount:
    """Start faultfs in a subprocess; unmount on exit."""

    def __init__(self, src: Path, mnt: Path, bad: list[str]) -> None:
        self.src, self.mnt, self.bad = src, mnt, bad

    def __enter__(self) -> FaultMount:
        self.mnt.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, __file__, str(self.src), str(self.mnt)]
        for b in self.bad:
            args += ["--bad", b]
        self.proc = subprocess.Popen(
            args, env=dict(os.environ), start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while str(self.mnt) not in Path("/proc/self/mounts").read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("faultfs did not mount")
            time.sleep(0.05)
        # For a parent that cleans up after this process dies (SIGBUS): where and who.
        print(f"MOUNT {self.mnt} {self.proc.pid}", flush=True)
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)], check=False)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    main()
