"""Bytes fetched from S3 by W hosts reading one epoch of a token file: host_order plan vs address.

    PYTHONPATH=src python benchmarks/hosts_s3.py [--mib 32] [--window-mib 8] [--block-mib 1]
        [--batch 256] [--worlds 2 4 8] [--rows] [--root DIR]

``--rows``: a padded row file instead (``.npy`` of uint16 rows of 1,025 tokens,
``PaddedRows(shuffle="window")`` with windows of ``--window-mib``; row windows
are read in blocks of about 1 MiB whatever ``--block-mib`` says).

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
from headrace.pipeline import Loader

MiB = 1 << 20
URL = "s3://headrace-bench/hosts"
L = 1024
ROW_BYTES = (L + 1) * 2


def source(args: argparse.Namespace, url: str, store: dict[str, Any]) -> Any:
    if args.rows:
        return PaddedRows(
            url,
            context=L,
            shuffle="window",
            window_rows=int(args.window_mib * MiB) // ROW_BYTES,
            store_options=store,
        )
    return TokenSource(
        url,
        dtype="uint32",
        context=L,
        window_bytes=int(args.window_mib * MiB),
        block_bytes=int(args.block_mib * MiB),
        store_options=store,
    )


def epoch(args: argparse.Namespace, url: str, store: dict[str, Any], world: int, order: str):
    """(bytes fetched, requests, per-step global batches as row arrays) for ``world`` hosts."""
    fetched = requests = 0
    parts: list[list[np.ndarray]] = []
    steps = 0
    for rank in range(world):
        src = source(args, url, store)
        steps = (len(src) if args.rows else src.samples_per_epoch) // args.batch
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
        stats = src.object_stats
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
    ap.add_argument("--rows", action="store_true", help="a padded row file, not tokens")
    ap.add_argument("--root", default=os.path.expanduser("~/.cache/headrace/bench-hosts"))
    args = ap.parse_args()
    if args.rows:
        path = os.path.join(args.root, f"rows-{args.mib:g}mib-u16-s{args.seed}.npy")
        if not os.path.exists(path):
            os.makedirs(args.root, exist_ok=True)
            n = int(args.mib * MiB) // ROW_BYTES
            rng = np.random.default_rng(args.seed)
            write_row_file(path, rng.integers(1, 50_000, (n, L + 1), dtype=np.uint16))
        what = f"row file {args.mib:g} MiB (uint16 rows of {L + 1}), window {args.window_mib:g} MiB"
    else:
        tokens = int(args.mib * MiB) // 4
        path = os.path.join(args.root, f"tokens-{args.mib:g}mib-uint32-s{args.seed}.bin")
        write_token_file(path, tokens, dtype="uint32", seed=args.seed)
        what = (
            f"token file {args.mib:g} MiB, window {args.window_mib:g} MiB, block "
            f"{args.block_mib:g} MiB"
        )
    size = os.path.getsize(path)
    _out(f"{what}, B={args.batch} L={L}, one epoch per host")
    _out("| hosts | host_order | MiB fetched, all hosts | x the file | requests | global sha256 |")
    _out("|---|---|---|---|---|---|")
    ok = True
    with bench_s3(URL, [path]) as store:
        url = f"{URL}/{os.path.basename(path)}"
        seen: dict[str, str] = {}
        sets: dict[str, str] = {}
        for world in args.worlds:
            for order in ("plan", "address"):
                fetched, requests, batches = epoch(args, url, store, world, order)
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
