"""Files truncated, replaced (new inode), deleted or made unreadable while a loader runs.

PYTHONPATH=src python audit/mutate_probe.py all        (each case in its own process)
PYTHONPATH=src python audit/mutate_probe.py KIND:ACTION[:OPT]

KIND: tokens (TokenSource, OPT=populate|pread), rows (PaddedRows, OPT=reader),
table (TableSource, Parquet), files (FileSource, npy).  ACTION: truncate, shrink_replace,
grow_replace, delete, chmod (run as nobody: root ignores permissions).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np


def write(root: Path) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    rng.integers(0, 50_000, 1 << 21, dtype=np.uint16).tofile(root / "t.bin")  # 4 MiB
    np.save(root / "rows.npy", rng.integers(1, 1000, (16384, 64), dtype=np.int32))  # 4 MiB
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = [rng.integers(0, 1000, 30, dtype=np.int32) for _ in range(40_000)]
    pq.write_table(
        pa.table({"input_ids": pa.array(ids, type=pa.list_(pa.int32()))}),
        root / "t.parquet", row_group_size=2000, compression="none",
    )
    (root / "npy").mkdir()
    for i in range(16):
        np.save(root / "npy" / f"s{i:02d}.npy", rng.integers(0, 255, (2, 64, 64), dtype=np.uint8))
    return {"tokens": root / "t.bin", "rows": root / "rows.npy", "table": root / "t.parquet",
            "files": root / "npy" / "s07.npy"}


def source(kind: str, opt: str, root: Path):
    from headrace.formats import FileSource, PaddedRows, TableSource, TokenSource

    if kind == "tokens":
        return TokenSource(root / "t.bin", dtype="uint16", context=64, reads=opt or "populate",
                           window_bytes=1 << 20, block_bytes=64 << 10)
    if kind == "rows":
        return PaddedRows(root / "rows.npy", context=63, reader=opt or "adaptive")
    if kind == "table":
        return TableSource(root / "t.parquet", columns=["input_ids"], width=30)
    return FileSource(root / "npy", format="npy", samples_per_file=2)


def mutate(action: str, path: Path) -> None:
    if action == "truncate":
        os.truncate(path, path.stat().st_size // 3)
    elif action in ("shrink_replace", "grow_replace"):
        data = path.read_bytes()
        new = data[: len(data) // 3] if action == "shrink_replace" else data + data
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(new)
        os.replace(tmp, path)
    elif action == "delete":
        path.unlink()
    elif action == "chmod":
        path.chmod(0)


def run_case(case: str) -> None:
    kind, action, *rest = case.split(":")
    opt = rest[0] if rest else ""
    root = Path(tempfile.mkdtemp(prefix="mut-"))
    os.chmod(root, 0o755)
    paths = write(root)
    for p in root.rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    if action == "chmod" and os.getuid() == 0:
        # Re-exec as nobody, so that permissions apply.
        os.chmod(root.parent, os.stat(root.parent).st_mode | 0o005)
        env = dict(os.environ, MUT_ROOT=str(root))
        p = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             sys.executable, __file__, case],
            env=env, capture_output=True, text=True, timeout=60,
        )
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr[-3000:])
        shutil.rmtree(root, ignore_errors=True)
        return
    if "MUT_ROOT" in os.environ:
        root = Path(os.environ["MUT_ROOT"])
        paths = {k: root / v.relative_to(v.parents[len(v.relative_to(root).parts) - 1]) for k, v in paths.items()}
    from headrace.pipeline import Loader

    ld = Loader(source(kind, opt, root), batch_size=32, prefetch=4)
    n = 0
    t0 = time.monotonic()
    try:
        for _ in ld:
            n += 1
            if n == 5:
                if action == "chmod":
                    # as nobody we cannot chmod root's file; its owner made it readable
                    # for us above; remove read permission via a helper is not possible:
                    pass
                mutate(action, paths[kind]) if action != "chmod" else None
            if n >= 3000:
                break
        print(f"RESULT {case}: no error after {n} batches")
    except BaseException as exc:  # noqa: BLE001
        print(f"RESULT {case}: {type(exc).__name__} after {n} batches: {exc}"[:400])
    t1 = time.monotonic()
    ld.close()
    print(f"  close {time.monotonic() - t1:.2f}s, prefetch threads left "
          f"{sum(t.name == 'headrace-prefetch' for t in threading.enumerate())}, "
          f"{time.monotonic() - t0:.1f}s in all")


def main() -> None:
    if sys.argv[1] != "all":
        run_case(sys.argv[1])
        return
    cases = [
        f"{k}:{a}{o}"
        for k, opts in [("tokens", [":populate", ":pread"]), ("rows", [":adaptive", ":pread"]),
                        ("table", [""]), ("files", [""])]
        for a in ["truncate", "shrink_replace", "grow_replace", "delete"]
        for o in opts
    ]
    for case in cases:
        p = subprocess.run([sys.executable, __file__, case], capture_output=True, text=True,
                           timeout=120)
        out = [ln for ln in p.stdout.splitlines() if ln.startswith(("RESULT", "  close"))]
        print("\n".join(out) or f"RESULT {case}: (no output)")
        if p.returncode:
            print(f"  exit code {p.returncode}" + (" (SIGBUS)" if p.returncode == -7 else "")
                  + f"; stderr: {p.stderr.strip().splitlines()[-1:]}")


if __name__ == "__main__":
    main()
