"""Bytes fetched from S3 by W hosts reading one epoch of a token file: host_order plan vs address.

    PYTHONPATH=src python benchmarks/hosts_s3.py [--mib 32] [--window-mib 8] [--block-mib 1]
        [--batch 256] [--worlds 2 4 8] [--rows | --mixture] [--root DIR]

``--rows``: a padded row file instead (``.npy`` of uint16 rows of 1,025 tokens,
``PaddedRows(shuffle="window")`` with windows of ``--window-mib``; row windows
are read in blocks of about 1 MiB whatever ``--block-mib`` says). ``--mixture``:
two token files of ``--mib / 2`` each, mixed 60/40 by a ``Mixture`` (in address
order a step's samples are sorted source by source; each source is told its
host's share of its own samples), for the steps of one pass over both.

One uint32 token file is uploaded to a moto server started for the run. For
each world size W and each ``host_order``, W hosts (fresh ``TokenSource`` and
``Loader`` each, run one after another in this process, as W machines would
run side by side) read one epoch; the object store's own counters give the
bytes and requests each host fetched. ``plan`` splits each step by position:
every host's samples spread over every window, so each host fetches (nearly)
the whole file. ``address`` sorts each step's samples by offset and gives each
host its stretch. The global batches are checked: the same on every W within
an order, and the same sets of samples in both orders (sorted rows per step).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from typing import Any

import numpy as np
from _out import out as _out

from headrace.bench._datagen import write_token_file
from headrace.bench._s3_serve import bench_s3
from headrace.formats import PaddedRows, TokenSource, write_row_file
from headrace.pipeline import Loader, Mixture

MiB = 1 << 20
URL = "s3://headrace-bench/hosts"
L = 1024
ROW_BYTES = (L + 1) * 2


def source(args: argparse.Namespace, urls: list[str], store: dict[str, Any]) -> Any:
    if args.rows:
        return PaddedRows(
            urls[0],
            context=L,
            shuffle="window",
            window_rows=int(args.window_mib * MiB) // ROW_BYTES,
            store_options=store,
        )
    tokens = [
        TokenSource(
            url,
            dtype="uint32",
            context=L,
            window_bytes=int(args.window_mib * MiB),
            block_bytes=int(args.block_mib * MiB),
            store_options=store,
        )
        for url in urls
    ]
    if args.mixture:
        return Mixture({"a": tokens[0], "b": tokens[1]}, [0.6, 0.4], batch_size=args.batch)
    return tokens[0]


def epoch_steps(src: Any, args: argparse.Namespace) -> int:
    if args.rows:
        return len(src) // args.batch
    parts = src.sources if args.mixture else [src]
    return sum(p.samples_per_epoch for p in parts) // args.batch


def epoch(args: argparse.Namespace, urls: list[str], store: dict[str, Any], world: int, order: str):
    """(bytes fetched, requests, per-step global batches as row arrays) for ``world`` hosts."""
    fetched = requests = 0
    parts: list[list[np.ndarray]] = []
    steps = 0
    for rank in range(world):
        src = source(args, urls, store)
        steps = epoch_steps(src, args)
        with Loader(
            src,
            batch_size=args.batch,
            seed=args.seed,
            rank=rank,
            world_size=world,
            steps=steps,
            host_order=order,  # type: ignore[arg-type]
        ) as ld:
            parts.append([np.array(b["x"]) for b in ld])
        for s in src.sources if args.mixture else [src]:
            stats = s.object_stats
            assert stats is not None
            fetched += stats.bytes
            requests += stats.requests
    batches = [np.concatenate([p[t] for p in parts]) for t in range(steps)]
    return fetched, requests, batches


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=float, default=32)
    ap.add_argument("--window-mib", type=float, default=8)
    ap.add_argument("--block-mib", type=float, default=1)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--seed", type=int, default=0)
    kind = ap.add_mutually_exclusive_group()
    kind.add_argument("--rows", action="store_true", help="a padded row file, not tokens")
    kind.add_argument("--mixture", action="store_true", help="two token files mixed 60/40")
    ap.add_argument("--root", default=os.path.expanduser("~/.cache/headrace/bench-hosts"))
    args = ap.parse_args()
    os.makedirs(args.root, exist_ok=True)
    if args.rows:
        path = os.path.join(args.root, f"rows-{args.mib:g}mib-u16-s{args.seed}.npy")
        if not os.path.exists(path):
            n = int(args.mib * MiB) // ROW_BYTES
            rng = np.random.default_rng(args.seed)
            write_row_file(path, rng.integers(1, 50_000, (n, L + 1), dtype=np.uint16))
        paths = [path]
        what = f"row file {args.mib:g} MiB (uint16 rows of {L + 1}), window {args.window_mib:g} MiB"
    else:
        files = 2 if args.mixture else 1
        paths = []
        for i in range(files):
            mib = args.mib / files
            path = os.path.join(args.root, f"tokens-{mib:g}mib-uint32-s{args.seed + i}.bin")
            write_token_file(path, int(mib * MiB) // 4, dtype="uint32", seed=args.seed + i)
            paths.append(path)
        what = (
            f"{'two token files (mixed 60/40)' if args.mixture else 'token file'} "
            f"{args.mib:g} MiB, window {args.window_mib:g} MiB, block {args.block_mib:g} MiB"
        )
    size = sum(os.path.getsize(p) for p in paths)
    _out(f"{what}, B={args.batch} L={L}, one epoch per host")
    _out("| hosts | host_order | MiB fetched, all hosts | x the data | requests | global sha256 |")
    _out("|---|---|---|---|---|---|")
    ok = True
    with bench_s3(URL, paths) as store:
        urls = [f"{URL}/{os.path.basename(p)}" for p in paths]
        seen: dict[str, str] = {}
        sets: dict[str, str] = {}
        for world in args.worlds:
            for order in ("plan", "address"):
                fetched, requests, batches = epoch(args, urls, store, world, order)
                h, s = hashlib.sha256(), hashlib.sha256()
                for b in batches:
                    h.update(b.tobytes())
                    s.update(np.sort(b.view(f"V{b.shape[1] * b.itemsize}").ravel()).tobytes())
                digest = h.hexdigest()[:12]
                ok &= seen.setdefault(order, digest) == digest  # same on every W
                sets[order] = s.hexdigest()
                _out(
                    f"| {world} | {order} | {fetched / MiB:,.1f} | {fetched / size:.2f}x | "
                    f"{requests} | {digest} |"
                )
            ok &= sets["plan"] == sets["address"]  # the same samples in every step
    _out("global batches: same on every world size, same sample sets in both orders:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
