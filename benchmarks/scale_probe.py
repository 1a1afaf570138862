"""Invariant 3 audited: what opening a dataset of N and 10N files (rows, groups) costs.

    PYTHONPATH=src python benchmarks/scale_probe.py [--kinds tokens-shards,...]
        [--sizes 100,1000,10000] [--steps 50] [--root DIR] [--src SRC ...] [--json OUT]

For each kind and size a dataset of tiny files (or a sparse huge one) is written
once under ``--root``; then each size is opened in a fresh process (one per
``--src``, sides alternating) which reports: seconds to open and to the first
batch, RSS (``VmRSS``) before opening, after it and after ``--steps`` steps,
the Python heap the open left allocated (``tracemalloc``, numpy arrays
included) and the objects the garbage collector tracks that it added. The
slope between sizes, per item, is what the dataset's size costs; invariant 3
wants the open's slope to be the listing's (a key and a size a file) and the
steps' RSS not to grow with N at all. Each side prints the SHA-256 of its
batches, so the sides of a ``--src`` A/B must agree.

Kinds (``N`` is the size):

- ``tokens-shards``: N raw uint16 token files of 4,096 tokens; ``tokens-huge``:
  one sparse file of N MiB of tokens;
- ``padded``: ``PaddedRows`` over a sparse ``(N * 1024, 128)`` int32 NPY (plus
  its mask); ``pairs``: ``PairRows`` of two such members;
- ``parquet-files``: N Parquet files of 64 rows; ``parquet-groups``: one file of
  N row groups of 64 rows; ``arrow-shards``: a ``save_to_disk`` directory of N
  Arrow streams of 64 rows;
- ``npy-files``, ``jpeg-files``: N files of one sample; ``hdf5-files``: N HDF5
  files of 8 samples (``samples_per_file=8``);
- ``mixture``: a ``Mixture`` of N token sources of one file each;
- ``*-s3`` (``npy-files-s3``, ``tokens-shards-s3``, ``parquet-files-s3``,
  ``arrow-shards-s3``): the same files read as S3 objects (``_files_s3``:
  ListObjectsV2, HEAD, ranged GET).

``--epochs E``: instead, a long run of ``E`` epochs through one loader, with RSS,
descriptors, threads, tracked objects and the C heap's bytes in use and free (glibc)
at each epoch's end (growth from epoch 5 to the last). ``--requests``: instead, each
``-s3`` kind opened in this process behind a ``LatencyProxy`` (no latency), counting
the requests and bytes the open took per file (a listing done twice, or a request a
file more, shows there).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import io
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
B = 8
S3_OPTIONS = {
    "region": "us-east-1",
    "access_key_id": "bench",
    "secret_access_key": "bench",
    "allow_http": True,
}


def malloc_mb() -> tuple[float, float]:
    """The C heap's bytes handed out and its free bytes kept in its arenas (glibc's
    ``mallinfo2``; NaN elsewhere): RSS that grows while the first stays flat is the
    allocator keeping freed memory, not live data."""
    import ctypes

    class Info(ctypes.Structure):
        _fields_ = [
            (n, ctypes.c_size_t)
            for n in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks".split()
        ]

    try:
        f = ctypes.CDLL(None).mallinfo2
    except AttributeError:
        return float("nan"), float("nan")
    f.restype = Info
    got = f()
    return got.uordblks / 2**20, got.fordblks / 2**20


def rss_mb(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


# ---------------------------------------------------------------- datasets


def build(kind: str, n: int, root: Path) -> Path:
    """The dataset of ``kind`` at size ``n`` (written once)."""
    base = kind.removesuffix("-s3")
    d = root / f"{base}-{n}"
    if (d / ".done").exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(n)
    if base == "tokens-shards" or base == "mixture":
        for i in range(n):
            rng.integers(0, 50_000, 4096, dtype=np.uint16).tofile(d / f"shard-{i:06d}.bin")
    elif base == "tokens-huge":
        with open(d / "huge.bin", "wb") as f:
            f.truncate(n << 20)
    elif base in ("padded", "pairs"):
        for name in ("a", "b"):
            for part, dt in (("tokens", np.int32), ("mask", np.bool_)):
                m = np.lib.format.open_memmap(d / f"{name}_{part}.npy", "w+", dt, (n * 1024, 128))
                m[:4] = 1
                del m
    elif base in ("parquet-files", "parquet-groups", "arrow-shards"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        def table(i: int) -> pa.Table:
            ids = [list(range(i % 50, i % 50 + 1 + j % 30)) for j in range(64)]
            return pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32()))})

        if base == "parquet-files":
            for i in range(n):
                pq.write_table(table(i), d / f"part-{i:06d}.parquet")
        elif base == "parquet-groups":
            with pq.ParquetWriter(d / "groups.parquet", table(0).schema) as w:
                for i in range(n):
                    w.write_table(table(i))
        else:
            files = []
            for i in range(n):
                name = f"data-{i:05d}-of-{n:05d}.arrow"
                t = table(i)
                with pa.OSFile(str(d / name), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
                    w.write_table(t)
                files.append({"filename": name})
            (d / "state.json").write_text(
                json.dumps({"_data_files": files, "_fingerprint": "0", "_split": None})
            )
            (d / "dataset_info.json").write_text(json.dumps({"features": {}}))
    elif base == "npy-files":
        for i in range(n):
            np.save(d / f"s-{i:06d}.npy", np.full((16, 16), i % 251, np.uint8))
    elif base == "jpeg-files":
        from PIL import Image

        buf = io.BytesIO()
        Image.fromarray(np.full((16, 16, 3), 7, np.uint8)).save(buf, format="JPEG")
        for i in range(n):
            (d / f"s-{i:06d}.jpg").write_bytes(buf.getvalue())
    elif base == "hdf5-files":
        import h5py

        for i in range(n):
            with h5py.File(d / f"s-{i:06d}.h5", "w") as f:
                f.create_dataset("x", data=np.full((8, 16), i % 251, np.float32))
    else:
        raise SystemExit(f"unknown kind {kind!r}")
    (d / ".done").write_text("")
    return d


def open_source(kind: str, d: Path, endpoint: str | None) -> Any:
    from headrace.formats import FileSource, PaddedRows, PairRows, TableSource, TokenSource
    from headrace.pipeline import Mixture

    base = kind.removesuffix("-s3")
    where: Any = str(d)
    opts: dict[str, Any] = {}
    if endpoint is not None:
        where = f"s3://bench/{d.name}"
        opts = {"store_options": {**S3_OPTIONS, "endpoint": endpoint}}
    if base == "tokens-shards":
        if endpoint is not None:
            keys = sorted(p.name for p in d.glob("*.bin"))
            return TokenSource([f"{where}/{k}" for k in keys], context=64, dtype="uint16", **opts)
        return TokenSource(sorted(d.glob("*.bin")), context=64, dtype="uint16")
    if base == "tokens-huge":
        return TokenSource(d / "huge.bin", context=64, dtype="uint16")
    if base == "padded":
        return PaddedRows(d / "a_tokens.npy", context=127, pad_id=9)
    if base == "pairs":
        return PairRows({"a": d / "a_tokens.npy", "b": d / "b_tokens.npy"}, pad_id=9)
    if base in ("parquet-files", "arrow-shards"):
        return TableSource(where, columns=["input_ids"], width=32, truncate=True, **opts)
    if base == "parquet-groups":
        return TableSource(str(d / "groups.parquet"), columns=["input_ids"], width=32)
    if base == "npy-files":
        return FileSource(where, format="npy", **opts)
    if base == "jpeg-files":
        return FileSource(where, format="jpeg", **opts)
    if base == "hdf5-files":
        return FileSource(where, format="hdf5", samples_per_file=8, datasets=("x",), **opts)
    if base == "mixture":
        files = sorted(d.glob("*.bin"))
        srcs = {f.stem: TokenSource(f, context=64, dtype="uint16") for f in files}
        return Mixture(srcs, [1.0] * len(srcs), batch_size=B)
    raise SystemExit(f"unknown kind {kind!r}")


def heavy_imports(kind: str) -> None:
    """Modules the open would import, imported first: their cost is not the dataset's."""
    import headrace.formats
    import headrace.pipeline  # noqa: F401

    if "parquet" in kind or "arrow" in kind:
        import pyarrow.parquet  # noqa: F401
    if "hdf5" in kind:
        import h5py  # noqa: F401
    if "jpeg" in kind:
        import PIL.Image  # noqa: F401
    if "s3" in kind:
        import obstore  # noqa: F401


def run_side(kind: str, d: Path, steps: int, endpoint: str | None) -> dict[str, Any]:
    from headrace.pipeline import Loader
    from headrace.testing import update_digest

    heavy_imports(kind)
    # The heap an open leaves allocated, from an open of its own: tracemalloc slows
    # every allocation, so the timed open below runs untraced.
    gc.collect()
    tracemalloc.start()
    traced = open_source(kind, d, endpoint)
    gc.collect()
    heap_open = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    traced.close()
    del traced
    gc.collect()
    rss0 = rss_mb()
    objs0 = len(gc.get_objects())
    t0 = time.perf_counter()
    src = open_source(kind, d, endpoint)
    t_open = time.perf_counter() - t0
    gc.collect()
    objs_open = len(gc.get_objects()) - objs0
    rss_open = rss_mb()
    h = hashlib.sha256()
    with Loader(src, batch_size=B, seed=0, steps=steps) as ld:
        it = iter(ld)
        update_digest(h, next(it))
        t_first = time.perf_counter() - t0
        for batch in it:
            update_digest(h, batch)
        gc.collect()
        rss_steps = rss_mb()
        objs_steps = len(gc.get_objects()) - objs0
    return {
        "open_s": t_open,
        "first_s": t_first,
        "rss_before_mb": rss0,
        "rss_open_mb": rss_open - rss0,
        "rss_steps_mb": rss_steps - rss0,
        "heap_open_kb": heap_open / 1024,
        "objects_open": objs_open,
        "objects_steps": objs_steps,
        "fds": len(os.listdir("/proc/self/fd")),
        "sha256": h.hexdigest()[:12],
    }


def run_epochs(kind: str, d: Path, epochs: int, endpoint: str | None) -> dict[str, Any]:
    """``epochs`` epochs through one loader: RSS, descriptors, threads and the objects the
    garbage collector tracks at each epoch's end (after a collection)."""
    import threading

    from headrace.pipeline import Loader
    from headrace.testing import update_digest

    heavy_imports(kind)
    src = open_source(kind, d, endpoint)
    per = max(1, getattr(src, "samples_per_epoch", 800 * B) // B)
    h = hashlib.sha256()
    marks: list[tuple[float, int, int, int, float, float]] = []
    with Loader(src, batch_size=B, seed=0, steps=per * epochs) as ld:
        for step, batch in enumerate(ld, 1):
            update_digest(h, batch)
            if step % per == 0:
                gc.collect()
                fds = len(os.listdir("/proc/self/fd"))
                objs = len(gc.get_objects())
                marks.append((rss_mb(), fds, threading.active_count(), objs, *malloc_mb()))
    warm = marks[min(4, len(marks) - 1)]
    last = marks[-1]
    return {
        "steps_per_epoch": per,
        "rss_epoch5_mb": warm[0],
        "rss_growth_mb": last[0] - warm[0],
        "fds": [warm[1], last[1]],
        "threads": [warm[2], last[2]],
        "objects_growth": last[3] - warm[3],
        "malloc_used_growth_mb": last[4] - warm[4],
        "malloc_free_growth_mb": last[5] - warm[5],
        "sha256": h.hexdigest()[:12],
    }


def count_requests(kinds: list[str], sizes: list[int], root: str) -> None:
    sys.path.insert(0, str(HERE))
    from _files_s3 import files_s3

    from headrace.emulate import LatencyProxy

    for kind in kinds:
        heavy_imports(kind)
    with files_s3(root) as endpoint, LatencyProxy(endpoint) as proxy:
        for kind in kinds:
            for n in sizes:
                d = build(kind, n, Path(root))
                proxy.reset_stats()
                src = open_source(kind, d, proxy.endpoint)
                st = proxy.stats
                src.close()
                print(
                    f"{kind:18s} {n:6d} open: {st.requests} requests, {st.requests / n:.2f} "
                    f"a file, {st.bytes_down / n:.0f} B down a file",
                    flush=True,
                )


# What build() writes and source() opens; KIND-s3 reads it through a moto endpoint.
KINDS = ("tokens-shards", "tokens-huge", "padded", "pairs", "parquet-files", "parquet-groups",
         "arrow-shards", "npy-files", "jpeg-files", "hdf5-files", "mixture")  # fmt: skip
FIELDS = ("open_s", "first_s", "rss_open_mb", "rss_steps_mb", "heap_open_kb", "objects_open")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--kinds",
        default="tokens-shards,npy-files",
        help=f"comma-separated, of {', '.join(KINDS)} (KIND-s3: from a moto endpoint)",
    )
    ap.add_argument("--sizes", default="100,1000")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--root", default="/tmp/headrace-scale")
    ap.add_argument("--src", action="append", default=[])
    ap.add_argument("--json")
    ap.add_argument("--side", nargs=2, metavar=("KIND", "DIR"))
    ap.add_argument("--endpoint")
    ap.add_argument("--epochs", type=int, default=0, help="a long run of this many epochs")
    ap.add_argument("--requests", action="store_true", help="requests an open takes (-s3)")
    args = ap.parse_args()
    # Refused here, before build() makes the kind's folder, with the list: the error
    # said only "unknown kind 'tokens'", and left an empty tokens-100 folder behind.
    unknown = [k for k in args.kinds.split(",") if k.removesuffix("-s3") not in KINDS]
    if unknown or (args.side and args.side[0].removesuffix("-s3") not in KINDS):
        ap.error(f"unknown kind {(unknown or [args.side[0]])[0]!r}; known: {', '.join(KINDS)}")
    if args.requests:
        count_requests(args.kinds.split(","), [int(v) for v in args.sizes.split(",")], args.root)
        return
    if args.side:
        kind, d = args.side
        if args.epochs:
            print(json.dumps(run_epochs(kind, Path(d), args.epochs, args.endpoint)))
        else:
            print(json.dumps(run_side(kind, Path(d), args.steps, args.endpoint)))
        return
    from contextlib import ExitStack

    sys.path.insert(0, str(HERE))
    from _files_s3 import files_s3

    srcs = args.src or [str(HERE.parent / "src")]
    rows: list[dict[str, Any]] = []
    for kind in args.kinds.split(","):
        for n in (int(s) for s in args.sizes.split(",")):
            d = build(kind, n, Path(args.root))
            with ExitStack() as stack:
                endpoint = None
                if kind.endswith("-s3"):
                    endpoint = stack.enter_context(files_s3(str(d.parent)))
                runs: dict[str, list[dict[str, Any]]] = {s: [] for s in srcs}
                for _ in range(args.trials):
                    for s in srcs:
                        cmd = [sys.executable, __file__, "--side", kind, str(d)]
                        cmd += ["--steps", str(args.steps), "--epochs", str(args.epochs)]
                        if endpoint:
                            cmd += ["--endpoint", endpoint]
                        env = dict(os.environ, PYTHONPATH=s)
                        got = subprocess.run(cmd, env=env, capture_output=True, text=True)
                        if got.returncode:
                            print(kind, n, s, "FAILED", got.stderr[-2000:], flush=True)
                            continue
                        runs[s].append(json.loads(got.stdout.splitlines()[-1]))
            if args.epochs:
                for s, rs in runs.items():
                    for r in rs:
                        print(kind, n, Path(s).parent.name, json.dumps(r), flush=True)
                        rows.append({"kind": kind, "n": n, "src": s, **r})
                continue
            for s, rs in runs.items():
                if not rs:
                    continue
                med = {k: statistics.median(r[k] for r in rs) for k in FIELDS}
                row = {"kind": kind, "n": n, "src": s, **med, "fds": rs[0]["fds"]}
                row["sha256"] = sorted({r["sha256"] for r in rs})
                rows.append(row)
                print(
                    f"{kind:16s} {n:>6d} {Path(s).parent.name:>10s} open {med['open_s']:7.3f} s"
                    f"  first {med['first_s']:7.3f} s  RSS +{med['rss_open_mb']:6.1f}"
                    f" / +{med['rss_steps_mb']:6.1f} MB  heap {med['heap_open_kb']:8.0f} KB"
                    f"  objs {med['objects_open']:>7.0f}  fds {row['fds']:>4d}  {row['sha256']}",
                    flush=True,
                )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
