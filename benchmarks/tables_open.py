"""Open a 1,000,000-row save_to_disk dataset: time and RSS, then random batches.

Run: PYTHONPATH=src python benchmarks/tables_open.py [DIR]
Writes the dataset (HF layout: state.json + Arrow IPC streams of 1,000-row
batches, as `datasets` writes them) once into DIR (default /tmp/headrace-1m),
then opens it in a fresh process so the RSS figures are the open's own.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

ROWS, SHARDS, BATCH = 1_000_000, 2, 1000


def write(root: str) -> None:
    import pyarrow as pa

    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(0)
    per = ROWS // SHARDS
    files = []
    for k in range(SHARDS):
        name = f"data-{k:05d}-of-{SHARDS:05d}.arrow"
        lens = rng.integers(1, 64, per)
        offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        ids = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
        t = pa.table(
            {
                "input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids)),
                "label": pa.array(np.arange(k * per, (k + 1) * per, dtype=np.int64)),
            }
        )
        with pa.OSFile(os.path.join(root, name), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
            w.write_table(t, max_chunksize=BATCH)
        files.append({"filename": name})
    with open(os.path.join(root, "state.json"), "w") as f:
        json.dump({"_data_files": files}, f)
    with open(os.path.join(root, "dataset_info.json"), "w") as f:
        json.dump({}, f)


def rss_mib(kind: str = "RssAnon") -> float:
    """Resident MiB of one kind: RssAnon is memory we allocated; RssFile is mapped
    file pages, clean page cache the kernel can drop at any time."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(kind + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def measure(root: str) -> None:
    import pyarrow  # noqa: F401  (import cost is not the open's)

    from headrace.collate import pad_batch
    from headrace.formats import Table

    before, fbefore = rss_mib(), rss_mib("RssFile")
    t = time.perf_counter()
    tb = Table.open(root)
    opened = time.perf_counter() - t
    after, fafter = rss_mib(), rss_mib("RssFile")
    print(f"open: {opened * 1e3:.0f} ms for {tb.num_rows:,} rows in {len(tb.files)} files")
    print(f"RssAnon: {before:.0f} MiB before open, {after:.0f} after (+{after - before:.1f})")
    print(f"RssFile: {fbefore:.0f} MiB before open, {fafter:.0f} after (+{fafter - fbefore:.1f})")
    size = sum(s for _, s in tb.files) / 2**20
    print(f"dataset size on disk: {size:.0f} MiB")
    rng = np.random.default_rng(1)
    times = []
    for _ in range(200):
        idx = rng.integers(0, tb.num_rows, 32)
        t = time.perf_counter()
        rows = tb.read_rows(idx)
        pad_batch(rows["input_ids"])
        times.append(time.perf_counter() - t)
    print(f"random batch of 32 (read_rows + pad_batch): median {np.median(times) * 1e6:.0f} us")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"after 200 batches: RssAnon {rss_mib():.0f} MiB, RssFile {rss_mib('RssFile'):.0f} MiB")
    print(f"peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[2] == "--measure":
        measure(sys.argv[1])
    else:
        if len(sys.argv) > 1 and sys.argv[1].startswith("-"):
            sys.exit(__doc__)
        root = sys.argv[1] if len(sys.argv) > 1 else "/tmp/headrace-1m"
        if not os.path.exists(os.path.join(root, "state.json")):
            write(root)
        subprocess.run([sys.executable, __file__, root, "--measure"], check=True)
