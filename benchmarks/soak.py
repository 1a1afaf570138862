"""Soak: does anything a long run or a sweep of loaders holds grow with steps, epochs or cycles?

    PYTHONPATH=src python benchmarks/soak.py [--scenarios tokens,npy-files-s3,cycles-npy-files,...]
        [--steps 20000] [--cycles 300] [--iters 60] [--files 16] [--root DIR] [--json OUT]

Each scenario runs in a fresh process over tiny datasets (``scale_probe.build``: ``--files``
files, a few steps an epoch, so a run meets hundreds of epochs) and samples, at marks after a
warm-up (a fifth of the run), after ``gc.collect()``:

- ``rss_mb`` (``VmRSS``), ``traced_kb`` (``tracemalloc``'s traced total, started after the
  warm-up: only what the run allocated since and still holds), ``objects`` (tracked by gc);
- ``fds`` (``/proc/self/fd``), ``threads`` (``threading`` and ``/proc/self/task``),
  ``shm`` (entries in ``/dev/shm`` named by this process or one below it: other processes
  on the machine make theirs), ``shm_maps`` (segments mapped), ``processes`` (below this);
- with ``cache_dir`` (``KIND-s3-cache``): the files and MB in it;
- the lengths of headrace's own tables (``tables()``): its ``lru_cache`` s, the registries of
  open loaders, file holders, reads in flight, locks, idle Parquet readers and token files,
  the epochs' file plans, an object store's latencies, and Python's warning registries.

Growth is the least-squares slope over the marks after the warm-up, reported per 10,000 steps
(Loader scenarios; per 100 epochs too), per 100 cycles (``cycles-KIND``: a source opened, a
``Loader`` read for 4 steps and closed, again and again in one process) or per 100
``iter()`` calls (``torch-workers``, ``torch-persistent``: ``HeadraceDataLoader`` with 2
worker processes, 3 batches an iteration; ``torch-cycles``: such a loader opened, read for
2 batches and closed, per 100 cycles). Every scenario prints the SHA-256 of what it read.

Scenarios: ``KIND`` (a ``Loader`` reading ahead, ``prefetch=8``) and ``KIND-sync``
(``prefetch=0``) for each of ``scale_probe``'s kinds (``tokens-shards``, ``padded``, ``pairs``,
``parquet-files``, ``arrow-shards``, ``npy-files``, ``jpeg-files``, ``hdf5-files``,
``mixture``), ``KIND-s3`` for ``tokens-shards``, ``npy-files``, ``parquet-files`` and
``arrow-shards`` (moto's server on 127.0.0.1, started here), ``tokens-shards-s3-cache`` and
``npy-files-s3-cache`` (the same with a ``cache_dir``), ``cycles-KIND`` (of any of these),
``torch-workers``, ``torch-persistent`` and ``torch-cycles``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _out import out  # noqa: E402
from scale_probe import B, build, heavy_imports, malloc_mb, open_source, rss_mb  # noqa: E402

LOCAL = ["tokens-shards", "padded", "pairs", "parquet-files", "arrow-shards"]
LOCAL += ["npy-files", "jpeg-files", "hdf5-files", "mixture"]
REMOTE = ["tokens-shards-s3", "npy-files-s3", "parquet-files-s3", "arrow-shards-s3"]
CACHED = ["tokens-shards-s3-cache", "npy-files-s3-cache"]  # with cache_dir=
SCENARIOS = [*LOCAL, *(f"{k}-sync" for k in LOCAL), *REMOTE, *CACHED]
SCENARIOS += [f"cycles-{k}" for k in [*LOCAL, *REMOTE, *CACHED]]
SCENARIOS += ["torch-workers", "torch-persistent", "torch-cycles"]
DEFAULT = "tokens-shards,padded,pairs,parquet-files,arrow-shards,npy-files,jpeg-files,"
DEFAULT += "hdf5-files,mixture,tokens-shards-sync,npy-files-sync,npy-files-s3,tokens-shards-s3,"
DEFAULT += "parquet-files-s3,npy-files-s3-cache,cycles-tokens-shards,cycles-parquet-files,"
DEFAULT += "cycles-npy-files-s3,cycles-tokens-shards-s3-cache,"
DEFAULT += "torch-workers,torch-persistent,torch-cycles"
MARKS = 12  # samples after the warm-up
SHM = "/dev/shm"


# ---------------------------------------------------------------- what is sampled


def _len(obj: Any) -> int:
    try:
        return len(obj)
    except TypeError:
        return -1


def tables(source: Any = None) -> dict[str, int]:
    """The lengths of headrace's process-wide tables (and ``source``'s latencies)."""
    import headrace.formats._file_plan as file_plan
    import headrace.formats._npy as npy
    import headrace.formats._table_part as table_part
    import headrace.formats._token_budget as token_budget
    import headrace.io._in_flight as in_flight
    import headrace.io._mounts as mounts
    import headrace.io._open_files as open_files
    import headrace.io._uring as uring
    import headrace.pipeline._locks as locks
    import headrace.pipeline._mixture as mixture
    import headrace.pipeline._shutdown as shutdown
    import headrace.pipeline._stall as stall
    import headrace.plan._permute as permute
    from headrace import _shm_ring
    from headrace.emulate import _lifeline

    got = {
        "permutations": permute.cached_permutation.cache_info().currsize,
        "keys": permute.cached_keys.cache_info().currsize,
        "source_seeds": mixture.source_seed.cache_info().currsize,
        "retry_keys": permute._retry_key.cache_info().currsize,
        "npy_headers": npy._literal.cache_info().currsize,
        "mount_folders": mounts._network_folder.cache_info().currsize,
        "reads_in_flight": len(in_flight._READS),
        "locks": len(locks._LOCKS),
        "open_loaders": len(shutdown._OPEN),
        "stall_waits": len(stall._WATCHER._waits),
        "file_holders": len(open_files._HOLDERS),
        "shm_rings": len(_shm_ring._LIVE),
        "parked_uring": len(uring._PARKED),
        "before_term": len(_lifeline._before_term),
        "file_plans": len(file_plan._EPOCHS),
        "idle_parquet": _len(table_part._IDLE._parts),
        "token_files": _len(token_budget._BUDGET._lru),
        "warning_registry": sum(
            len(r)
            for m in list(sys.modules.values())
            if isinstance(r := getattr(m, "__dict__", {}).get("__warningregistry__"), dict)
        ),
    }
    stats = getattr(source, "object_stats", None)
    if stats is not None:
        got["latencies"] = len(stats.latencies_s)
    return got


_SEEN: set[int] = set()  # every descendant met: a dead worker's segment is still its


def descendants() -> set[int]:
    """Live processes below this one (workers are the fork server's children)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError):  # gone meanwhile
                with open(f"/proc/{entry}/stat") as fh:
                    state, ppid = fh.read().rsplit(")", 1)[1].split()[:2]
                if state != "Z":
                    children.setdefault(int(ppid), []).append(int(entry))
    found: set[int] = set()
    todo = [os.getpid()]
    while todo:
        for c in children.get(todo.pop(), []):
            found.add(c)
            todo.append(c)
    return found


def shm_counts() -> tuple[int, int]:
    """Names in /dev/shm made by this process or any process below it (other processes
    on the machine make theirs too), and the segments this process maps."""
    _SEEN.update(descendants())
    prefixes = tuple(f"headrace_{pid}_" for pid in (os.getpid(), *_SEEN))
    names = sum(n.startswith(prefixes) for n in os.listdir(SHM)) if os.path.isdir(SHM) else 0
    with open("/proc/self/maps") as fh:
        return names, sum("/dev/shm/" in line for line in fh)


CACHE_DIR: str | None = None  # the -cache scenarios' cache_dir


def open_any(kind: str, d: Path, endpoint: str | None) -> Any:
    """``scale_probe.open_source``, or for ``KIND-s3-cache`` the same with ``cache_dir``."""
    if not kind.endswith("-cache"):
        return open_source(kind, d, endpoint)
    from scale_probe import S3_OPTIONS

    from headrace.formats import FileSource, TokenSource

    opts = {"store_options": {**S3_OPTIONS, "endpoint": endpoint}, "cache_dir": CACHE_DIR}
    where = f"s3://bench/{d.name}"
    if kind.startswith("tokens-shards"):
        keys = sorted(p.name for p in d.glob("*.bin"))
        return TokenSource([f"{where}/{k}" for k in keys], context=64, dtype="uint16", **opts)
    return FileSource(where, format="npy", **opts)


def cache_counts() -> dict[str, float]:
    """Files and MB under the cache directory."""
    if CACHE_DIR is None:
        return {}
    files, size = 0, 0
    for top, _, names in os.walk(CACHE_DIR):
        for n in names:
            with contextlib.suppress(OSError):
                size += os.stat(os.path.join(top, n)).st_size
                files += 1
    return {"cache_files": files, "cache_mb": size / 2**20}


def sample(source: Any = None) -> dict[str, float]:
    gc.collect()
    used, free = malloc_mb()
    shm = shm_counts()
    return {
        "rss_mb": rss_mb(),
        "traced_kb": tracemalloc.get_traced_memory()[0] / 1024 if tracemalloc.is_tracing() else 0,
        "malloc_used_mb": used,
        "malloc_free_mb": free,
        "objects": len(gc.get_objects()),
        "fds": len(os.listdir("/proc/self/fd")),
        "threads": threading.active_count(),
        "tasks": len(os.listdir("/proc/self/task")),
        "shm": shm[0],
        "shm_maps": shm[1],
        "processes": len(descendants()),
        **tables(source),
        **cache_counts(),
    }


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` over ``xs``."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


# ---------------------------------------------------------------- scenarios (child side)


def digest_of(h: Any, batch: Any) -> None:
    from headrace.testing import update_digest

    update_digest(h, batch)


def loader_run(
    kind: str, d: Path, endpoint: str | None, steps: int, prefetch: int
) -> Iterator[tuple[float, Any]]:
    """Steps through one Loader; yields (steps done, source) at each mark."""
    from headrace.pipeline import Loader

    src = open_any(kind, d, endpoint)
    every = max(1, steps // (MARKS + 3))
    h = hashlib.sha256()
    with Loader(src, batch_size=B, seed=0, steps=steps, prefetch=prefetch) as ld:
        for n, batch in enumerate(ld, 1):
            digest_of(h, batch)
            if n % every == 0:
                yield n, src
    yield -1, h.hexdigest()[:16]


def cycles_run(
    kind: str, d: Path, endpoint: str | None, cycles: int
) -> Iterator[tuple[float, Any]]:
    """``cycles`` times: open a source, read 4 steps through a Loader, close both."""
    from headrace.pipeline import Loader

    every = max(1, cycles // (MARKS + 3))
    h = hashlib.sha256()
    for n in range(1, cycles + 1):
        src = open_any(kind, d, endpoint)
        with Loader(src, batch_size=B, seed=n % 7, steps=4) as ld:
            for batch in ld:
                digest_of(h, batch)
        src.close()
        del src, ld
        if n % every == 0:
            yield n, None
    yield -1, h.hexdigest()[:16]


def torch_run(d: Path, iters: int, persistent: bool) -> Iterator[tuple[float, Any]]:
    """``iters`` ``iter()`` calls of a HeadraceDataLoader with 2 workers, 3 batches each."""
    from headrace.torch import HeadraceDataLoader, TorchDataset

    src = open_source("npy-files", d, None)
    ds = TorchDataset(src, batch_size=B, seed=0)
    every = max(1, iters // (MARKS + 3))
    h = hashlib.sha256()
    with HeadraceDataLoader(ds, num_workers=2, persistent_workers=persistent) as dl:
        for n in range(1, iters + 1):
            it = iter(dl)
            for _ in range(3):
                batch = next(it)
                for key in sorted(batch):
                    h.update(key.encode() + batch[key].numpy().tobytes())
            close = getattr(it, "close", None)
            if close is not None:
                close()
            del it, batch
            if n % every == 0:
                yield n, None
    yield -1, h.hexdigest()[:16]


def torch_cycles(d: Path, cycles: int) -> Iterator[tuple[float, Any]]:
    """``cycles`` times: a HeadraceDataLoader with 2 workers opened, 2 batches, closed."""
    from headrace.torch import HeadraceDataLoader, TorchDataset

    every = max(1, cycles // (MARKS + 3))
    h = hashlib.sha256()
    for n in range(1, cycles + 1):
        src = open_source("npy-files", d, None)
        ds = TorchDataset(src, batch_size=B, seed=n % 7, steps=2)
        with HeadraceDataLoader(ds, num_workers=2) as dl:
            for batch in dl:
                for key in sorted(batch):
                    h.update(key.encode() + batch[key].numpy().tobytes())
        del src, ds, dl, batch
        if n % every == 0:
            yield n, None
    yield -1, h.hexdigest()[:16]


def child(name: str, d: Path, endpoint: str | None, args: argparse.Namespace) -> dict[str, Any]:
    kind = name.removeprefix("cycles-").removesuffix("-sync")
    if kind.endswith("-cache"):
        import tempfile

        global CACHE_DIR
        CACHE_DIR = tempfile.mkdtemp(prefix="headrace-soak-cache-")
    if name.startswith("torch-"):
        import torch  # noqa: F401

        heavy_imports("npy-files")
        if name == "torch-cycles":
            run, unit = torch_cycles(d, args.cycles), "cycles"
        else:
            run, unit = torch_run(d, args.iters, name == "torch-persistent"), "iter() calls"
        per = 100
    elif name.startswith("cycles-"):
        heavy_imports(kind)
        run = cycles_run(kind, d, endpoint, args.cycles)
        unit, per = "cycles", 100
    else:
        heavy_imports(kind)
        prefetch = 0 if name.endswith("-sync") else 8
        run = loader_run(kind, d, endpoint, args.steps, prefetch)
        unit, per = "steps", 10_000
    marks: list[tuple[float, dict[str, float]]] = []
    warm = None
    t0 = time.perf_counter()
    for n, what in run:
        if n < 0:
            digest = what
            break
        if warm is None:  # the first mark ends the warm-up: trace from here
            warm = n
            tracemalloc.start()
        marks.append((n, sample(what)))
    tracemalloc.stop()
    seconds = time.perf_counter() - t0
    if CACHE_DIR is not None:
        import shutil

        shutil.rmtree(CACHE_DIR, ignore_errors=True)
    first, last = marks[1][1], marks[-1][1]  # marks[0]: just as tracing started
    xs = [float(n) for n, _ in marks[1:]]
    growth = {
        k: round(slope(xs, [m[k] for _, m in marks[1:]]) * per, 3)
        for k in first
        if any(m[k] != first[k] for _, m in marks[1:])
    }
    names: dict[str, int] = {}
    for t in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{t}/comm") as fh:
            comm = fh.read().strip().rstrip("0123456789")
            names[comm] = names.get(comm, 0) + 1
    fd_kinds: dict[str, int] = {}
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}").split("[")[0]
            fd_kinds[target] = fd_kinds.get(target, 0) + 1
    result: dict[str, Any] = {
        "task_names": names,
        "fd_targets": fd_kinds,
        "scenario": name,
        "unit": unit,
        "per": per,
        "range": [marks[1][0], marks[-1][0]],
        "seconds": round(seconds, 1),
        "first": first,
        "last": last,
        "growth": growth,
        "sha256": digest,
    }
    if unit == "steps":
        src = open_any(kind, d, endpoint)
        spe = getattr(src, "samples_per_epoch", None)
        src.close()
        if spe:
            result["steps_per_epoch"] = spe / B
            result["epochs"] = round(marks[-1][0] * B / spe, 1)
    return result


# ---------------------------------------------------------------- driver


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scenarios", default=DEFAULT, help=f"comma-separated, of {SCENARIOS}")
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--cycles", type=int, default=300)
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--files", type=int, default=16, help="files (or MiB, rows/1024) a dataset")
    ap.add_argument("--root", default="/tmp/headrace-soak")
    ap.add_argument("--json")
    ap.add_argument("--child", nargs=2, metavar=("SCENARIO", "DIR"))
    ap.add_argument("--endpoint")
    args = ap.parse_args()
    if args.child:
        name, d = args.child
        print(json.dumps(child(name, Path(d), args.endpoint, args)))
        return
    names = args.scenarios.split(",")
    unknown = [s for s in names if s not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario {unknown[0]!r}; known: {', '.join(SCENARIOS)}")
    rows = []
    for name in names:
        kind = name.removeprefix("cycles-").removesuffix("-sync").removesuffix("-cache")
        kind = "npy-files" if name.startswith("torch-") else kind
        d = build(kind, args.files, Path(args.root))
        with contextlib.ExitStack() as stack:
            endpoint = None
            if kind.endswith("-s3"):
                endpoint = stack.enter_context(_moto(d))
            cmd = [sys.executable, __file__, "--child", name, str(d)]
            cmd += ["--steps", str(args.steps), "--cycles", str(args.cycles)]
            cmd += ["--iters", str(args.iters)]
            if endpoint:
                cmd += ["--endpoint", endpoint]
            got = subprocess.run(cmd, capture_output=True, text=True)
        if got.returncode:
            out(name, "FAILED", got.stderr[-3000:])
            continue
        row = json.loads(got.stdout.splitlines()[-1])
        rows.append(row)
        out(report(row))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


@contextlib.contextmanager
def _moto(d: Path) -> Iterator[str]:
    """moto's server on 127.0.0.1 holding ``d``'s files as ``s3://bench/{d.name}/``."""
    from headrace.bench._s3_serve import bench_s3

    paths = sorted(str(p) for p in d.iterdir() if p.is_file() and not p.name.startswith("."))
    with bench_s3(f"s3://bench/{d.name}", paths) as options:
        yield options["endpoint"]


def report(row: dict[str, Any]) -> str:
    f, last, g = row["first"], row["last"], row["growth"]
    lo, hi = row["range"]
    head = f"{row['scenario']:24s} {row['unit']} {lo:.0f}-{hi:.0f}"
    if "epochs" in row:
        head += f" ({row['epochs']} epochs)"
    head += f" {row['seconds']} s sha256 {row['sha256']}"
    lines = [head, f"    at the end: OS threads {row['task_names']}, fds {row['fd_targets']}"]
    always = ("rss_mb", "traced_kb", "objects", "fds", "threads", "shm", "processes", "cache_files")
    for k in (k for k in f if k in always or k in g):
        mark = f"  {'+' if g.get(k, 0) > 0 else ''}{g[k]}/{row['per']}" if k in g else ""
        lines.append(f"    {k:18s} {f[k]:>12.1f} -> {last[k]:>12.1f}{mark}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
