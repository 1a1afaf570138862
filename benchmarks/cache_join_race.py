"""Several processes joining one object's block entries at once: the bytes they write.

    PYTHONPATH=src python benchmarks/cache_join_race.py --before OLD_SRC [--processes 6]
        [--mib 64] [--rounds 3]

A cache directory under /tmp is filled with the 64 KiB block entries of one ``--mib`` MiB
object (by a child of the tree under test), then ``--processes`` children, each an
``ObjectCache`` of it, count a read of every block at the same moment (as ranks of one
node reading a dataset do), so each of them looks to join the object. Reported per side
and round: the joins counted, the bytes the children wrote (``write_bytes`` of
``/proc/PID/io``) and the bytes left in the cache. ``--before``: an older ``src``
(``git archive REV src | tar -x -C /tmp/old``), alternating with this tree's.

Prediction (2026-12-06, before measuring): before, each process that looks while no
whole entry is there writes a copy (six, within the ~0.1 s a 64 MiB copy takes); after,
one process claims the join and the others write nothing: ~6x fewer bytes written, one
entry left either way.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

BLOCK = 64 << 10
URL = "|s3://bucket/object.npy"

_FILL = """
import sys
import numpy as np
from headrace.io import ObjectCache
root, size, block, url = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
c = ObjectCache(root)
data = np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8)
for a in range(0, size, block):
    assert c.write(url, size, "e", data[a : a + block], a)
"""

_CHILD = """
import sys, time
from headrace.io import ObjectCache
root, size, block, url, start = sys.argv[1:6]
size, block = int(size), int(block)
c = ObjectCache(root)
def written():
    for line in open("/proc/self/io"):
        if line.startswith("write_bytes"):
            return int(line.split()[1])
while time.time() < float(start):
    pass
w = written()
c.blocks_read(url, size, "e", block, -(-size // block))
print(c.stats.joined, written() - w)
"""


def run(src: str, root: Path, size: int, processes: int) -> tuple[int, int, int]:
    """``(joins, bytes written, bytes left)`` of one round with the tree at ``src``."""
    env = {**os.environ, "PYTHONPATH": src}
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    args = [str(root), str(size), str(BLOCK), URL]
    subprocess.run([sys.executable, "-c", _FILL, *args], env=env, check=True)
    os.sync()
    start = str(time.time() + 1.5)  # every child imported and waiting by then
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, *args, start], env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(processes)
    ]
    outs = [p.communicate()[0].split() for p in children]
    if any(p.returncode for p in children):
        raise SystemExit(f"a child failed ({src})")
    left = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    return sum(int(o[0]) for o in outs), sum(int(o[1]) for o in outs), left


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="an older tree's src")
    p.add_argument("--processes", type=int, default=6)
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    here = str(Path(__file__).resolve().parent.parent / "src")
    root = Path("/tmp/headrace-cache-join-race")
    try:
        for _ in range(a.rounds):
            for side, src in (("before", a.before), ("after", here)):
                joins, wrote, left = run(src, root, a.mib << 20, a.processes)
                print(
                    f"{side:6} joins {joins}  written {wrote / 1e6:7.1f} MB  "
                    f"left {left / 1e6:5.1f} MB"
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
