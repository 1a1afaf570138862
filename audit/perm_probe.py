"""Permissions removed before and during a run (run as a non-root user: root ignores them).

PYTHONPATH=src setpriv --bounding-set=-dac_override,-dac_read_search python audit/perm_probe.py
(root without the capabilities that bypass permission checks)
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))


def run(label: str, make, chmod_path: Path, when: str, mode: int = 0) -> None:
    from headrace.pipeline import Loader

    os.chmod(chmod_path, 0o755 if chmod_path.is_dir() else 0o644)
    if when == "before":
        os.chmod(chmod_path, mode)
    n = 0
    ld = None
    try:
        ld = Loader(make(), batch_size=16, prefetch=2)
        for _ in ld:
            n += 1
            if n == 3 and when == "during":
                os.chmod(chmod_path, mode)
            if n >= 400:
                break
        print(f"{label} ({when}): no error after {n} batches")
    except Exception as exc:  # noqa: BLE001
        print(f"{label} ({when}): {type(exc).__name__} after {n} batches: {str(exc)[:200]}")
    finally:
        if ld is not None:
            ld.close()
        os.chmod(chmod_path, 0o755 if chmod_path.is_dir() else 0o644)
    left = sum(t.name == "headrace-prefetch" for t in threading.enumerate())
    if left:
        print(f"   {left} prefetch threads left")


def main() -> None:
    from headrace.formats import FileSource, PaddedRows, TableSource, TokenSource

    root = Path(tempfile.mkdtemp(prefix="perm-"))
    rng = np.random.default_rng(0)
    rng.integers(0, 1000, 1 << 18, dtype=np.uint16).tofile(root / "a.bin")
    rng.integers(0, 1000, 1 << 18, dtype=np.uint16).tofile(root / "b.bin")
    np.save(root / "rows.npy", rng.integers(1, 1000, (4096, 33), dtype=np.int32))
    (root / "npy").mkdir()
    for i in range(16):
        np.save(root / "npy" / f"s{i:02d}.npy", rng.integers(0, 255, (2, 8, 8), dtype=np.uint8))
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = [rng.integers(0, 1000, 30, dtype=np.int32) for _ in range(4000)]
    pq.write_table(pa.table({"input_ids": pa.array(ids, type=pa.list_(pa.int32()))}),
                   root / "t.parquet", row_group_size=500)

    def tokens():
        return TokenSource([root / "a.bin", root / "b.bin"], dtype="uint16", context=32,
                           window_bytes=64 << 10, block_bytes=16 << 10)

    def rows():
        return PaddedRows(root / "rows.npy", context=32)

    def files():
        return FileSource(root / "npy", format="npy", samples_per_file=2)

    def table():
        return TableSource(root / "t.parquet", columns=["input_ids"], width=30)

    for when in ("before", "during"):
        run("TokenSource, b.bin unreadable", tokens, root / "b.bin", when)
        run("PaddedRows, rows.npy unreadable", rows, root / "rows.npy", when)
        run("FileSource, npy/s09.npy unreadable", files, root / "npy" / "s09.npy", when)
        run("FileSource, npy/ not searchable", files, root / "npy", when, 0o600)
        run("TableSource, t.parquet unreadable", table, root / "t.parquet", when)


if __name__ == "__main__":
    main()
